// Ranks as threads of one process on one device: what a Communicator runs on in place of NCCL
// where there is one GPU (NCCL refuses two ranks on one device), so that the parallel code paths
// (their splits, exchanges and corrections) can be checked against one GPU's results there.
//
// Every collective is host-synchronous: the rank waits for its stream, meets the other ranks'
// threads, copies (device to device) or sums (on the host, in rank order, in double), and waits
// for its stream again before it returns. The ranks' kernels run concurrently between
// collectives; no collective overlaps compute, none can be captured in a CUDA graph, and their
// times mean nothing. Every wait is bounded: past the deadline, or once any rank aborts or errs,
// every rank's pending and later calls throw, naming the cause. Internal to the runtime.
#pragma once
#include <cuda.h>

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ssmjit/parallel.h"
#include "ssmjit/tensor.h"

namespace ssmjit::parallel {

// `size` communicators of one in-process group, rank r at index r, each to be used by its own
// thread (with the device's context current). The group lives as long as any of them.
std::vector<std::unique_ptr<Communicator>> localGroup(int size, double timeout_s = 120);

class LocalGroup {
 public:
  LocalGroup(int size, double timeout_s) : size_(size), timeout_s_(timeout_s), posts_(size) {}

  void allReduceSum(int rank, const TensorView& data, CUstream stream);
  void allGather(int rank, const TensorView& in, const TensorView& out, CUstream stream);
  void reduceScatterSum(int rank, const TensorView& in, const TensorView& out, CUstream stream);
  void sendRecv(int rank, const TensorView& send, int to, const TensorView& recv, int from, CUstream stream);
  // Every rank's waiting and later calls throw, naming `why` (the first reason given stays).
  void abort(const std::string& why);

 private:
  // What a rank brings to a meeting: the collective's name, its view (and its stream's wait done).
  struct Post {
    std::string op;
    TensorView view;
  };
  // A mailbox entry of sendRecv: the sender's view, taken once its receiver has copied it.
  struct Letter {
    TensorView view;
    uint64_t id = 0;
  };
  // Waits until every rank has posted to this round, then returns all ranks' posts (rank order);
  // throws if they name different collectives.
  std::vector<Post> meet(int rank, Post mine);
  // Waits (bounded) until `ready`; throws on abort or at the deadline, naming `what`.
  template <class Pred>
  void waitFor(std::unique_lock<std::mutex>& lock, int rank, const std::string& what, Pred ready);
  void failLocked(const std::string& why);
  [[noreturn]] void throwBroken(int rank) const;

  const int size_;
  const double timeout_s_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::string broken_;  // why the group was aborted; empty while usable
  // The meeting: this round's posts, how many have arrived, the round count, the last round's
  // posts (read by its ranks after it completes; the next round cannot complete before they have).
  std::vector<Post> posts_, met_;
  int arrived_ = 0;
  uint64_t round_ = 0;
  // sendRecv's mailboxes, (from, to) -> letters in order; ids of letters taken.
  std::map<std::pair<int, int>, std::vector<Letter>> mail_;
  std::vector<uint64_t> taken_;
  uint64_t nextLetter_ = 1;
};

}  // namespace ssmjit::parallel

// Several GPUs, one process each, over NCCL (loaded at run time: libnccl.so.2, else libnccl.so,
// else the toolkit's lib/ and lib64/ under CUDA_HOME). A Communicator joins `size` processes:
// rank 0 makes NCCL's unique id and hands it to the others through a rendezvous, a file path
// (written atomically by rank 0, polled by the others, removed once all have joined) or
// `tcp://host:port` (rank 0 listens there). Then every rank's configuration (key=value pairs: the
// model, the parallel degrees, the layer sizes) is compared, so that ranks that disagree stop at
// once, each naming what differs, instead of computing garbage or hanging.
//
// Nothing blocks without a bound: the rendezvous, NCCL's setup and synchronize() poll NCCL's
// asynchronous error and a deadline (timeout_s); on an error or at the deadline the communicator
// is aborted (so NCCL's kernels stop and the stream drains) and ssmjit::Error is thrown naming the
// cause. A collective waits likewise, before it is enqueued, while 8 earlier ones are unfinished:
// the host never runs so far ahead of a collective that cannot finish that the driver's launch
// queue fills and a launch blocks with no bound. A peer that exits early or is killed thus ends
// every other rank with an error, not a hang. An abort is itself waited for at most 10 s: where
// the stalled collectives were captured in a CUDA graph NCCL's abort has been seen never to
// return, and the communicator is then abandoned (ncclAbandoned() below). Graph replays holding
// collectives are bounded only where each is waited for by synchronize() before the next (a
// decode loop): replays queued without a wait bypass the communicator, so none of its bounds
// applies to them. After an abort every further call throws. NCCL's multicast (NVLS) is switched
// off (NCCL_NVLS_ENABLE=0, unless the environment sets it).
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ssmjit/tensor.h"

namespace ssmjit {

using Stream = void*;

struct CommunicatorOptions {
  int rank = 0;
  int size = 1;
  std::string rendezvous;  // a file path (fresh per run) or "tcp://host:port"
  double timeout_s = 120;  // every blocking point
  // Checked equal on every rank; a difference throws on every rank, naming the key and the values.
  std::vector<std::pair<std::string, std::string>> config;
};

class Communicator;
namespace parallel {
// The runtime's in-process group (ranks as threads of one process on one device, for checking
// parallel code where there is one GPU) makes communicators too. Internal.
std::vector<std::unique_ptr<Communicator>> localGroup(int size, double timeout_s);
}  // namespace parallel

// True if NCCL loads; else false and the reason in *why.
bool ncclAvailable(std::string* why = nullptr);

// True once a communicator of this process was abandoned: NCCL's abort did not return within
// 10 s (seen where a CUDA graph holds the collectives a dead peer stalls), so the error was thrown
// while NCCL's threads and kernels still run. Such a process cannot count on a normal exit (NCCL's
// threads have crashed in its teardown): flush what it prints and end it with _exit or quick_exit.
bool ncclAbandoned();

class Communicator {
 public:
  // Joins the other ranks on the current context's device (collective: every rank calls it).
  static std::unique_ptr<Communicator> create(const CommunicatorOptions& options);
  ~Communicator();  // destroys the communicator (aborts it when it is in error)
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;

  // Collectives enqueued on `stream` (every rank calls each, in the same order). Tensors are
  // contiguous CUDA views of the communicator's device, fp32/bf16/fp16/int32/int64.
  void allReduceSum(const TensorView& data, Stream stream);  // in place
  // out (size * n elements) = every rank's in (n elements), in rank order.
  void allGather(const TensorView& in, const TensorView& out, Stream stream);
  // out (n elements) = the sum over ranks of in's rank-th block of n elements.
  void reduceScatterSum(const TensorView& in, const TensorView& out, Stream stream);
  // Point to point in one group: send `send` to rank `to` and receive `recv` from rank `from`;
  // an undefined view (or a rank of -1) leaves that half out.
  void sendRecv(const TensorView& send, int to, const TensorView& recv, int from, Stream stream);

  // Waits for `stream`, polling NCCL's asynchronous error and the deadline; throws (after
  // aborting) on either. `what` names the wait in the error.
  void synchronize(Stream stream, const char* what = "the stream");
  // Aborts the communicator; later calls throw ssmjit::Error naming `why`.
  void abort(const std::string& why);

  struct Impl;

 private:
  friend std::vector<std::unique_ptr<Communicator>> parallel::localGroup(int size, double timeout_s);
  explicit Communicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Context parallelism (ssd_parallel.h, scan_parallel.h): one packed row cut into comm.size()
// contiguous parts, rank r holding the r-th. How this rank's part joins its neighbours': rank r's
// to_next must equal rank r + 1's from_previous; rank 0 has no from_previous, the last rank no
// to_next.
struct ContextPart {
  bool from_previous = false;  // the part's first sequence continues from rank - 1
  bool to_next = false;        // the part's last sequence continues into rank + 1
};

}  // namespace ssmjit

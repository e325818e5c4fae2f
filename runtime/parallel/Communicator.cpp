// The communicator (ssmjit/parallel.h): NCCL in non-blocking mode, so that every wait is a poll
// of NCCL's asynchronous error and a deadline, and an abort ends it; or, for ranks that are
// threads of one process on one device, the in-process group (LocalGroup.h).
#include <chrono>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/CudaGraph.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/parallel/CollectivesInFlight.h"
#include "runtime/parallel/ConfigCheck.h"
#include "runtime/parallel/LocalGroup.h"
#include "runtime/parallel/Nccl.h"
#include "runtime/parallel/Rendezvous.h"
#include "ssmjit/error.h"
#include "ssmjit/parallel.h"

namespace ssmjit {
namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point deadlineAfter(double s) {
  return Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

// The pause before a wait's next poll: none while the wait is young (a collective's enqueue and a
// decode step settle within microseconds, and a step's all-reduce sits on its critical path), then
// 20 µs, then 500 µs, so that a long wait does not keep a core busy.
void pollPause(int spins) {
  if (spins < 64)
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(std::chrono::microseconds(spins < 164 ? 20 : 500));
}

ncclDataType_t ncclType(DType t, const char* arg) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::BF16: return ncclBfloat16;
    case DType::F16: return ncclFloat16;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
  }
  throw Error(Error::Kind::InvalidArgument, std::string(arg) + " has an unsupported dtype");
}

bool isContiguous(const TensorView& t) {
  int64_t expect = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expect) return false;
    expect *= t.shape[d];
  }
  return true;
}

}  // namespace

struct Communicator::Impl {
  ncclComm_t comm = nullptr;
  std::shared_ptr<parallel::LocalGroup> local;  // instead of comm: a rank of an in-process group
  int rank = 0, size = 1;
  double timeout_s = 120;
  std::string broken;  // why it was aborted; empty while usable
  // How long an abort may take: NCCL's can block for good where a CUDA graph holds collectives
  // that wait on a dead peer, and a rank that gives up must still end.
  static constexpr double kAbortWait_s = 10;
  parallel::CollectivesInFlight inFlight;

  [[noreturn]] void fail(const std::string& why, Error::Kind kind = Error::Kind::Cuda) {
    abortWith(why);
    throw Error(kind, "rank " + std::to_string(rank) + " of " + std::to_string(size) + ": " + broken);
  }
  // Aborts and records why; false if NCCL's abort did not return in time (its work may still run).
  bool abortWith(const std::string& why) {
    std::string abandoned;
    if (comm && !nccl::abortWithin(comm, kAbortWait_s))
      abandoned = " (NCCL's abort did not return within " + std::to_string(static_cast<int>(kAbortWait_s)) +
                  " s; the communicator is abandoned)";
    if (local) local->abort("rank " + std::to_string(rank) + ": " + why);
    comm = nullptr;
    if (broken.empty()) broken = why + abandoned;
    return abandoned.empty();
  }
  void usable(const char* what) const {
    if (!broken.empty())
      throw Error(Error::Kind::Cuda, std::string(what) + ": the communicator was aborted (" + broken + ")");
  }
  // Waits out an in-progress result (non-blocking mode) within the deadline; fails on an error.
  void settle(ncclResult_t r, const std::string& what) {
    const Clock::time_point deadline = deadlineAfter(timeout_s);
    for (int spins = 0; r == ncclInProgress;) {
      if (Clock::now() >= deadline)
        fail(what + " did not finish within " + std::to_string(timeout_s) +
             " s (did every rank start, with the same rendezvous and world size?)");
      pollPause(spins++);
      ncclResult_t state = ncclSuccess;
      const ncclResult_t q = nccl::api().commGetAsyncError(comm, &state);
      r = q != ncclSuccess ? q : state;
    }
    if (r != ncclSuccess) fail(what + " failed: " + nccl::describe(r, comm));
  }
  // Polls `query` (cuStreamQuery or cuEventQuery, named by `queryName`) until the work it asks
  // about is done, NCCL reports an error or the deadline passes; on the last two aborts (NCCL's
  // kernels stop, and the work drains, boundedly, before buffers go away) and throws naming `what`.
  void waitFor(const std::function<CUresult()>& query, const char* queryName, const std::string& what) {
    const Clock::time_point deadline = deadlineAfter(timeout_s);
    for (int spins = 0;; ++spins) {
      const CUresult q = query();
      if (q == CUDA_SUCCESS) return;
      if (q != CUDA_ERROR_NOT_READY) {
        try {
          driver::check(q, queryName);
        } catch (const Error& e) {
          fail("waiting for " + what + ": " + e.what());
        }
      }
      ncclResult_t state = ncclSuccess;
      if (comm) nccl::api().commGetAsyncError(comm, &state);
      std::string why;
      if (state != ncclSuccess && state != ncclInProgress)
        why = "NCCL reported " + nccl::describe(state, comm) + " while waiting for " + what +
              " (a peer rank may have exited)";
      else if (Clock::now() >= deadline)
        why = "timed out after " + std::to_string(timeout_s) + " s waiting for " + what +
              " (a peer rank may have exited or stalled)";
      if (!why.empty()) {
        // A returned abort stops NCCL's kernels, so the work drains (bounded) before buffers go
        // away; after an abandoned one they may never stop, and waiting would only delay the error.
        const bool aborted = abortWith(why);
        const Clock::time_point drain = deadlineAfter(aborted ? 10 : 0);
        while (query() == CUDA_ERROR_NOT_READY && Clock::now() < drain)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        throw Error(Error::Kind::Cuda, "rank " + std::to_string(rank) + " of " + std::to_string(size) + ": " + broken);
      }
      pollPause(spins);
    }
  }
  // Enqueues a collective on `stream` through `enqueue`: first waits while
  // CollectivesInFlight::kLimit earlier ones are unfinished, so that the host never blocks where
  // no deadline is checked; then marks the new one's end.
  void enqueueWatched(CUstream stream, const char* what, const std::function<void()>& enqueue) {
    const bool capturing = parallel::CollectivesInFlight::capturing(stream);
    if (!capturing) makeRoom(what);
    enqueue();
    if (!capturing) inFlight.enqueued(stream);
  }
  void makeRoom(const char* what) {
    while (CUevent e = inFlight.oldestWhileFull()) {
      waitFor([e] { return driver::api().cuEventQuery(e); }, "cuEventQuery",
              "a collective enqueued " + std::to_string(parallel::CollectivesInFlight::kLimit) + " before this " +
                  what + " (at most that many run ahead of the GPU)");
      inFlight.finished();
    }
  }
  void checkTensor(const char* op, const char* arg, const TensorView& t) const {
    if (!t.defined() || t.device != DeviceKind::CUDA || !isContiguous(t))
      throw Error(Error::Kind::InvalidArgument, std::string(op) + ": " + arg + " is " +
                                                    (t.defined() ? "not a contiguous CUDA tensor" : "undefined") +
                                                    ", expected a contiguous CUDA tensor");
  }

  // The checks of a collective whose `out` (gathered) or `in` (scattered) holds size x the other's
  // elements, both of one dtype.
  void checkInOut(const char* op, const TensorView& in, const TensorView& out, bool outIsWhole) const {
    usable(op);
    checkTensor(op, "in", in);
    checkTensor(op, "out", out);
    const TensorView& whole = outIsWhole ? out : in;
    const TensorView& part = outIsWhole ? in : out;
    const std::string wholeName = outIsWhole ? "out" : "in", partName = outIsWhole ? "in" : "out";
    if (whole.numel() != part.numel() * size || in.dtype != out.dtype)
      throw Error(Error::Kind::InvalidArgument, std::string(op) + ": " + wholeName + " has " +
                                                    std::to_string(whole.numel()) + " elements, expected size x " +
                                                    partName + "'s (" + std::to_string(part.numel() * size) +
                                                    ") of " + partName + "'s dtype");
  }
};

bool ncclAvailable(std::string* why) { return nccl::available(why); }

bool ncclAbandoned() { return nccl::anyAbandoned(); }

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

// Destroyed while an exception unwinds (this rank gave up mid-run), the communicator is aborted:
// a destroy would finalize with peers that may be waiting in a collective this rank never joins,
// and hang both.
Communicator::~Communicator() {
  if (!impl_->comm) return;
  ncclResult_t state = ncclSuccess;
  nccl::api().commGetAsyncError(impl_->comm, &state);
  if (state == ncclSuccess && std::uncaught_exceptions() == 0)
    nccl::api().commDestroy(impl_->comm);
  else
    nccl::abortWithin(impl_->comm, Impl::kAbortWait_s);
}

int Communicator::rank() const { return impl_->rank; }
int Communicator::size() const { return impl_->size; }

std::unique_ptr<Communicator> Communicator::create(const CommunicatorOptions& o) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size)
    throw Error(Error::Kind::InvalidArgument, "Communicator: rank " + std::to_string(o.rank) + " of size " +
                                                  std::to_string(o.size) + ", expected 0 <= rank < size");
  if (!(o.timeout_s > 0))
    throw Error(Error::Kind::InvalidArgument,
                "Communicator: timeout_s is " + std::to_string(o.timeout_s) + ", expected > 0");
  const std::vector<char> block = parallel::encodeConfig(o.config);  // bad pairs fail before any wait
  setenv("NCCL_NVLS_ENABLE", "0", 0);  // multicast stays off unless the environment says otherwise
  const nccl::Api& a = nccl::api();
  driver::ensureContext();

  ncclUniqueId id{};
  if (o.rank == 0) {
    const ncclResult_t r = a.getUniqueId(&id);
    if (r != ncclSuccess) throw Error(Error::Kind::Cuda, "ncclGetUniqueId failed: " + nccl::describe(r));
  }
  const std::vector<char> mine(id.internal, id.internal + sizeof id.internal);
  const std::vector<char> got = parallel::shareFromRankZero(o.rendezvous, o.rank, o.size, mine, o.timeout_s);
  std::copy(got.begin(), got.end(), id.internal);

  auto impl = std::make_unique<Impl>();
  impl->rank = o.rank;
  impl->size = o.size;
  impl->timeout_s = o.timeout_s;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  const ncclResult_t r = a.commInitRankConfig(&impl->comm, o.size, id, o.rank, &cfg);
  if (r != ncclSuccess && r != ncclInProgress)
    throw Error(Error::Kind::Cuda, "rank " + std::to_string(o.rank) + ": ncclCommInitRankConfig failed: " +
                                       nccl::describe(r));
  std::unique_ptr<Communicator> c(new Communicator(std::move(impl)));
  c->impl_->settle(r, "NCCL setup (ncclCommInitRankConfig)");
  if (o.rank == 0) parallel::removeRendezvous(o.rendezvous);

  // Every rank's configuration, compared on every rank.
  DeviceBuffer send(block.size()), recv(block.size() * static_cast<size_t>(o.size));
  send.upload(block);
  OwnedStream stream;
  c->allGather(TensorView::contiguous(send.data(), DType::I32, {static_cast<int64_t>(block.size() / 4)}),
               TensorView::contiguous(recv.data(), DType::I32, {static_cast<int64_t>(recv.bytes() / 4)}), stream);
  c->synchronize(stream, "the configuration exchange");
  const std::vector<char> all = recv.download<char>();
  std::vector<std::vector<char>> blocks;
  for (int i = 0; i < o.size; ++i)
    blocks.emplace_back(all.begin() + i * block.size(), all.begin() + (i + 1) * block.size());
  const std::string diff = parallel::configMismatch(blocks);
  if (!diff.empty())
    throw Error(Error::Kind::InvalidArgument,
                "rank " + std::to_string(o.rank) + ": the ranks' configurations differ:\n  " + diff);
  return c;
}

void Communicator::allReduceSum(const TensorView& t, Stream stream) {
  impl_->usable("allReduceSum");
  impl_->checkTensor("allReduceSum", "data", t);
  if (impl_->local) return impl_->local->allReduceSum(impl_->rank, t, static_cast<CUstream>(stream));
  impl_->enqueueWatched(static_cast<CUstream>(stream), "ncclAllReduce", [&] {
    impl_->settle(nccl::api().allReduce(t.data, t.data, static_cast<size_t>(t.numel()), ncclType(t.dtype, "data"),
                                        ncclSum, impl_->comm, static_cast<cudaStream_t>(stream)),
                  "ncclAllReduce");
  });
}

void Communicator::allGather(const TensorView& in, const TensorView& out, Stream stream) {
  impl_->checkInOut("allGather", in, out, true);
  if (impl_->local) return impl_->local->allGather(impl_->rank, in, out, static_cast<CUstream>(stream));
  impl_->enqueueWatched(static_cast<CUstream>(stream), "ncclAllGather", [&] {
    impl_->settle(nccl::api().allGather(in.data, out.data, static_cast<size_t>(in.numel()), ncclType(in.dtype, "in"),
                                        impl_->comm, static_cast<cudaStream_t>(stream)),
                  "ncclAllGather");
  });
}

void Communicator::reduceScatterSum(const TensorView& in, const TensorView& out, Stream stream) {
  impl_->checkInOut("reduceScatterSum", in, out, false);
  if (impl_->local) return impl_->local->reduceScatterSum(impl_->rank, in, out, static_cast<CUstream>(stream));
  impl_->enqueueWatched(static_cast<CUstream>(stream), "ncclReduceScatter", [&] {
    impl_->settle(
        nccl::api().reduceScatter(in.data, out.data, static_cast<size_t>(out.numel()), ncclType(out.dtype, "out"),
                                  ncclSum, impl_->comm, static_cast<cudaStream_t>(stream)),
        "ncclReduceScatter");
  });
}

void Communicator::sendRecv(const TensorView& send, int to, const TensorView& recv, int from, Stream stream) {
  impl_->usable("sendRecv");
  const bool doSend = send.defined() && to >= 0, doRecv = recv.defined() && from >= 0;
  for (auto [active, peer] : {std::pair{doSend, to}, std::pair{doRecv, from}})
    if (active && (peer >= impl_->size || peer == impl_->rank))
      throw Error(Error::Kind::InvalidArgument, "sendRecv: peer rank " + std::to_string(peer) +
                                                    " is not another rank of [0, " + std::to_string(impl_->size) + ")");
  if (doSend) impl_->checkTensor("sendRecv", "send", send);
  if (doRecv) impl_->checkTensor("sendRecv", "recv", recv);
  if (impl_->local)
    return impl_->local->sendRecv(impl_->rank, doSend ? send : TensorView{}, to, doRecv ? recv : TensorView{}, from,
                                  static_cast<CUstream>(stream));
  const nccl::Api& a = nccl::api();
  const auto s = static_cast<cudaStream_t>(stream);
  impl_->enqueueWatched(static_cast<CUstream>(stream), "ncclSend/ncclRecv", [&] {
    impl_->settle(a.groupStart(), "ncclGroupStart");
    if (doSend)
      impl_->settle(
          a.send(send.data, static_cast<size_t>(send.numel()), ncclType(send.dtype, "send"), to, impl_->comm, s),
          "ncclSend");
    if (doRecv)
      impl_->settle(
          a.recv(recv.data, static_cast<size_t>(recv.numel()), ncclType(recv.dtype, "recv"), from, impl_->comm, s),
          "ncclRecv");
    impl_->settle(a.groupEnd(), "ncclGroupEnd");
  });
}

void Communicator::synchronize(Stream stream, const char* what) {
  impl_->usable("synchronize");
  const auto s = static_cast<CUstream>(stream);
  impl_->waitFor([s] { return driver::api().cuStreamQuery(s); }, "cuStreamQuery", what);
}

void Communicator::abort(const std::string& why) { impl_->abortWith(why); }

std::vector<std::unique_ptr<Communicator>> parallel::localGroup(int size, double timeout_s) {
  if (size < 1 || !(timeout_s > 0))
    throw Error(Error::Kind::InvalidArgument, "localGroup: size " + std::to_string(size) + " and timeout_s " +
                                                  std::to_string(timeout_s) + ", expected size >= 1 and timeout_s > 0");
  auto group = std::make_shared<LocalGroup>(size, timeout_s);
  std::vector<std::unique_ptr<Communicator>> ranks;
  for (int r = 0; r < size; ++r) {
    auto impl = std::make_unique<Communicator::Impl>();
    impl->rank = r;
    impl->size = size;
    impl->timeout_s = timeout_s;
    impl->local = group;
    ranks.push_back(std::unique_ptr<Communicator>(new Communicator(std::move(impl))));
  }
  return ranks;
}

}  // namespace ssmjit

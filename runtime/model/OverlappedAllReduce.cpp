#include "runtime/model/OverlappedAllReduce.h"

#include <algorithm>
#include <charconv>
#include <memory>
#include <utility>

#include "compiler/Knobs.h"
#include "runtime/CudaGraph.h"
#include "runtime/Driver.h"
#include "runtime/model/Mamba2LayerHooks.h"
#include "ssmjit/error.h"

namespace ssmjit::detail {
namespace {

constexpr const char* kKnob = "SSMJIT_TP_OVERLAP_PIECES";

// A side stream (of high priority: a piece's all-reduce starts as the next GEMM's blocks retire,
// not after them) and the two events of a fork (the side stream waits for a piece of the
// caller's) and a join (the caller's waits for the side stream). One fork event serves every
// piece: a wait takes the event's latest record at the time it is enqueued, in a capture too.
struct SideStream {
  OwnedStream stream{CU_STREAM_NON_BLOCKING, true};
  CUevent fork = nullptr, join = nullptr;
  SideStream() {
    const driver::Api& api = driver::api();
    driver::check(api.cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING), "linearAllReduced: cuEventCreate");
    driver::check(api.cuEventCreate(&join, CU_EVENT_DISABLE_TIMING), "linearAllReduced: cuEventCreate");
  }
  ~SideStream() {
    driver::api().cuEventDestroy(fork);
    driver::api().cuEventDestroy(join);
  }
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;
};

// This thread's side stream in the current context, made on first use and kept for the thread's
// life. The free function mamba2_tp_layer_prefill has no object to hold it, and a stream per call
// would cost a create and destroy per layer. Per thread, because two threads recording one fork
// event could each make their side stream wait for the other's piece; per context, because a
// stream and its events belong to one. A thread's streams go at its exit (the process's main
// thread: before static destructors, so the driver's table is still there).
SideStream& sideStream() {
  thread_local std::vector<std::pair<CUcontext, std::unique_ptr<SideStream>>> streams;
  const CUcontext ctx = driver::ensureContext();
  for (auto& [c, s] : streams)
    if (c == ctx) return *s;
  streams.emplace_back(ctx, std::make_unique<SideStream>());
  return *streams.back().second;
}

}  // namespace

std::vector<RowRange> rowPieces(int64_t rows, int pieces) {
  if (pieces < 1)
    throw Error(Error::Kind::Internal, "rowPieces: pieces is " + std::to_string(pieces) + ", expected >= 1");
  const int64_t n = std::min<int64_t>(pieces, rows), base = n > 0 ? rows / n : 0, larger = n > 0 ? rows % n : 0;
  std::vector<RowRange> out;
  for (int64_t i = 0, at = 0; i < n; ++i) {
    const int64_t len = base + (i < larger ? 1 : 0);
    out.push_back({at, at + len});
    at += len;
  }
  return out;
}

std::optional<int> parseOverlapPieces(const std::string& value) {
  if (value.empty()) return std::nullopt;
  int n = 0;
  const char* end = value.data() + value.size();
  const auto [at, ec] = std::from_chars(value.data(), end, n);
  if (ec != std::errc() || at != end || n < 1)
    throw Error(Error::Kind::InvalidArgument,
                std::string(kKnob) + " is '" + value +
                    "', expected a positive integer (the row pieces of a tensor-parallel prefill's out_proj; "
                    "unset: automatic)");
  return n;
}

int overlapPieces(std::optional<int> knob, int64_t rows) {
  if (knob) return *knob;
  return rows >= kAutoOverlapMinRows ? kAutoOverlapPieces : 1;
}

int tpOverlapPieces(int64_t rows) { return overlapPieces(parseOverlapPieces(knobValue(kKnob)), rows); }

void linearAllReduced(const LinearArgs& l, Communicator& comm, int pieces, Stream stream) {
  const std::vector<RowRange> ranges = rowPieces(l.y.ndim == 2 ? l.y.shape[0] : 0, pieces);
  if (ranges.size() <= 1) {
    linear(l, stream);
    comm.allReduceSum(l.y, stream);
    return;
  }
  const driver::Api& api = driver::api();
  const auto main = static_cast<CUstream>(stream);
  SideStream& side = sideStream();
  for (const RowRange& r : ranges) {
    LinearArgs piece = l;
    piece.x = l.x.narrow(0, r.begin, r.end - r.begin);
    piece.y = l.y.narrow(0, r.begin, r.end - r.begin);
    linear(piece, stream);
    driver::check(api.cuEventRecord(side.fork, main), "linearAllReduced: cuEventRecord");
    driver::check(api.cuStreamWaitEvent(side.stream, side.fork, 0), "linearAllReduced: cuStreamWaitEvent");
    comm.allReduceSum(piece.y, side.stream.get());
  }
  driver::check(api.cuEventRecord(side.join, side.stream), "linearAllReduced: cuEventRecord");
  driver::check(api.cuStreamWaitEvent(main, side.join, 0), "linearAllReduced: cuStreamWaitEvent");
}

void mamba2TpLayerPrefill(const Mamba2Dims& local, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                          const Mamba2LayerArgs& a, Communicator& comm, Stream stream) {
  // Read before any launch, so that a bad value fails with nothing enqueued.
  const int pieces = tpOverlapPieces(a.hidden.ndim == 2 ? a.hidden.shape[0] : 0);
  Mamba2PrefillHooks hooks;
  hooks.outProj = [&](const LinearArgs& l) { linearAllReduced(l, comm, pieces, stream); };
  mamba2LayerPrefill(local, w, s, a, stream, hooks);
}

}  // namespace ssmjit::detail

// The SSD's context parallelism, forward and backward (ssmjit/ssd_parallel.h). The extra buffers,
// each 256-byte aligned: the parts' slot indices (int32: the first sequence's initial slot, 0 when
// it continues from the previous rank; the last sequence's final slot, 0 when it continues into
// the next), this rank's summary row [a (H) | state (H, P, N)], the gathered rows, then the
// forward's sequence decays or the backward's reversed rows and G.
#include "runtime/parallel/SsdContextParallel.h"

#include <cuda.h>

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/Driver.h"
#include "runtime/ops/ArgCheck.h"
#include "runtime/ops/SsdCheck.h"
#include "runtime/ops/SsdSpec.h"
#include "runtime/parallel/CpStateScan.h"
#include "ssmjit/error.h"

namespace ssmjit {
namespace {

constexpr int64_t kAlign = 256;
int64_t alignUp(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

struct Geometry {
  int64_t nseq = 1, H = 0, P = 0, N = 0, PN = 0;
  int ranks = 1;
  // Byte offsets in the extras; `tail` is the forward's decays or the backward's reversed rows.
  int64_t row = 0, gathered = 0, tail = 0, g = 0, bytes = 0;
};

Geometry geometryOf(int64_t nseq, int64_t H, int64_t PN, int ranks, bool backward) {
  Geometry g;
  g.nseq = nseq, g.H = H, g.PN = PN, g.ranks = ranks;
  const int64_t rowBytes = (H + H * PN) * 4;
  g.row = alignUp(2 * nseq * 4);
  g.gathered = g.row + alignUp(rowBytes);
  g.tail = g.gathered + alignUp(ranks * rowBytes);
  if (backward) {
    g.g = g.tail + alignUp(ranks * rowBytes);
    g.bytes = g.g + alignUp(H * PN * 4);
  } else {
    g.bytes = g.tail + alignUp(nseq * H * 4);
  }
  return g;
}

Geometry geometryOf(const SsdArgs& a, int ranks, bool backward) {
  const int64_t nseq = a.cu_seqlens.defined() ? a.cu_seqlens.shape[0] - 1 : 1;
  Geometry g = geometryOf(nseq, a.x.shape[2], a.x.shape[3] * a.B.shape[3], ranks, backward);
  g.P = a.x.shape[3], g.N = a.B.shape[3];
  return g;
}

struct Bufs {
  char* base;
  int device;
  TensorView at(int64_t byteOffset, DType t, std::initializer_list<int64_t> shape) const {
    return TensorView::contiguous(base + byteOffset, t, shape, DeviceKind::CUDA, device);
  }
  TensorView initIdx(const Geometry& g) const { return at(0, DType::I32, {g.nseq}); }
  TensorView lastIdx(const Geometry& g) const { return at(g.nseq * 4, DType::I32, {g.nseq}); }
  TensorView row(const Geometry& g) const { return at(g.row, DType::F32, {g.H + g.H * g.PN}); }
  TensorView rowState(const Geometry& g) const { return at(g.row + g.H * 4, DType::F32, {1, g.H, g.P, g.N}); }
};

void* standIn() { return reinterpret_cast<void*>(uintptr_t{1} << 45); }

bool whole(const Geometry& g, const SsdCpPart& p) { return g.nseq == 1 && p.from_previous && p.to_next; }

// The forward's first sequence from the incoming state (contiguous (H, P, N), as checkCarry asks)
// when it continues from the previous rank: one state slot.
SsdArgs fromIncoming(SsdArgs a, const SsdCpPart& p, const SsdCpCarry& carry, const Geometry& g, const Bufs& b) {
  if (!p.from_previous) return a;
  a.initial_states = TensorView::contiguous(carry.incoming.data, DType::F32, {1, g.H, g.P, g.N}, DeviceKind::CUDA,
                                            carry.incoming.deviceId);
  a.initial_state_indices = b.initIdx(g);
  return a;
}

// The summary: states only, from a zero start for the continuing sequence (the caller's initial
// states for the others), into the summary row, with every sequence's decay.
SsdArgs summaryArgs(SsdArgs a, const Geometry& g, const Bufs& b) {
  a.out = a.y = a.z = a.D = TensorView{};
  a.final_states = b.rowState(g);
  a.final_state_indices = b.lastIdx(g);
  a.sequence_decay = b.at(g.tail, DType::F32, {g.nseq, g.H});
  a.compile_backward = false;
  return a;
}

// The first pass of the backward (the gradient of the incoming state, into the summary row's
// state) and the second (G as the crossing-out sequence's final-state gradient).
SsdBackwardArgs firstPass(SsdBackwardArgs a, const SsdCpPart& p, const Geometry& g, const Bufs& b) {
  if (p.to_next) a.dfinal_states = TensorView{};
  a.dinitial_states = b.rowState(g);
  return a;
}
SsdBackwardArgs secondPass(SsdBackwardArgs a, const SsdCpPart& p, const Geometry& g, const Bufs& b) {
  a.forward.final_state_indices = b.lastIdx(g);
  a.dfinal_states = b.at(g.g, DType::F32, {1, g.H, g.P, g.N});
  if (p.from_previous) a.dinitial_states = TensorView{};
  return a;
}

// ---- checks -------------------------------------------------------------------------------------

// What ssd_cp and ssd_cp_backward both ask of the forward's arguments and the part.
void checkPart(const detail::Checker& c, const SsdArgs& a, const SsdCpPart& p, int rank, int ranks) {
  if (ranks < 1 || rank < 0 || rank >= ranks)
    c.fail("rank " + std::to_string(rank) + " of " + std::to_string(ranks) + " ranks is not a rank");
  if (a.x.shape[0] != 1)
    c.fail("x has batch " + std::to_string(a.x.shape[0]) + ", expected 1 (each rank's part of one packed row)");
  if (p.from_previous && rank == 0)
    c.fail("part.from_previous is true on rank 0, expected false (no rank precedes it)");
  if (p.to_next && rank == ranks - 1)
    c.fail("part.to_next is true on the last rank (" + std::to_string(rank) + "), expected false (no rank follows it)");
  if (a.block_state_tokens != 0 || a.block_states.defined() || a.block_state_indices.defined())
    c.fail("block_state_tokens is " + std::to_string(a.block_state_tokens) +
           " (or block states are given), expected 0 and none: block states are not context parallel");
  if (a.sequence_decay.defined()) c.fail("sequence_decay is given, expected none (the op computes its own)");
  if (p.from_previous && (a.initial_states.defined() || a.initial_state_indices.defined()))
    c.fail(
        "initial_states is given with part.from_previous, expected none (the first sequence starts from the "
        "incoming state, the others from zero)");
}

void checkContiguousF32(const detail::Checker& c, const char* name, const TensorView& t, const detail::Dim* e, int n) {
  c.required(name, t);
  c.rank(name, t, e, n);
  c.tensor(name, t, e, n, detail::kF32Only, false);
  for (int64_t i = n - 1, s = 1; i >= 0; s *= t.shape[i], --i)
    if (t.strides[i] != s && t.shape[i] > 1)
      c.fail(std::string(name) + " has strides " + detail::listString(t.strides, n) + ", expected contiguous");
}

void checkCarry(detail::Checker& c, const SsdCpCarry& carry, const SsdArgs& a) {
  c.setDeviceId(a.x.deviceId, "x");
  const int64_t H = a.x.shape[2], P = a.x.shape[3], N = a.B.shape[3];
  const detail::Dim eIn[3] = {{H, "nheads"}, {P, "headdim"}, {N, "dstate"}};
  checkContiguousF32(c, "carry.incoming", carry.incoming, eIn, 3);
  const detail::Dim eA[1] = {{H, "nheads"}};
  checkContiguousF32(c, "carry.decay", carry.decay, eA, 1);
}

}  // namespace

namespace detail {

int64_t ssdCpForwardExtrasBytes(int64_t nseq, int64_t H, int64_t PN, int ranks) {
  return geometryOf(nseq, H, PN, ranks, false).bytes;
}
int64_t ssdCpBackwardExtrasBytes(int64_t nseq, int64_t H, int64_t PN, int ranks) {
  return geometryOf(nseq, H, PN, ranks, true).bytes;
}

int64_t ssdCpWorkspaceFloats(const SsdArgs& a, const SsdCpPart& p, int rank, int ranks) {
  constexpr const char* op = "ssd_cp";
  checkSsdArgs(a, DeviceKind::CUDA, op);
  const Checker c(op, DeviceKind::CUDA);
  checkPart(c, a, p, rank, ranks);
  if (!a.out.defined()) c.fail("out is not given, expected (1, L, H, P) (the forward of a training step)");
  const Geometry g = geometryOf(a, ranks, false);
  const Bufs b{static_cast<char*>(standIn()), a.x.deviceId};
  SsdCpCarry stand;
  stand.incoming = b.at(g.bytes, DType::F32, {g.H, g.P, g.N});
  const int64_t ssd =
      std::max(ssd_workspace_size(summaryArgs(a, g, b)), ssd_workspace_size(fromIncoming(a, p, stand, g, b)));
  return g.bytes / 4 + ssd;
}

int64_t ssdCpBackwardWorkspaceFloats(const SsdBackwardArgs& a, const SsdCpPart& p, int rank, int ranks) {
  constexpr const char* op = "ssd_cp_backward";
  checkSsdBackwardArgs(a, DeviceKind::CUDA, op);
  const Checker c(op, DeviceKind::CUDA);
  checkPart(c, a.forward, p, rank, ranks);
  if (p.to_next && a.dfinal_states.defined())
    c.fail(
        "dfinal_states is given with part.to_next, expected none (the crossing-out sequence's gradient comes "
        "from the next rank, the others' is zero)");
  const Geometry g = geometryOf(a.forward, ranks, true);
  const Bufs b{static_cast<char*>(standIn()), a.forward.x.deviceId};
  SsdCpCarry stand;
  stand.incoming = b.at(g.bytes, DType::F32, {g.H, g.P, g.N});
  SsdBackwardArgs base = a;
  base.forward = fromIncoming(a.forward, p, stand, g, b);
  int64_t ssd = ssd_backward_workspace_size(base);
  if (p.from_previous) ssd = std::max(ssd, ssd_backward_workspace_size(firstPass(base, p, g, b)));
  if (p.to_next) ssd = std::max(ssd, ssd_backward_workspace_size(secondPass(base, p, g, b)));
  return g.bytes / 4 + ssd;
}

void checkSsdCp(const SsdArgs& a, const SsdCpPart& p, const SsdCpCarry& carry, int rank, int ranks) {
  const int64_t need = ssdCpWorkspaceFloats(a, p, rank, ranks);
  Checker c("ssd_cp", DeviceKind::CUDA);
  checkCarry(c, carry, a);
  checkWorkspace("ssd_cp", a.workspace, a.x, "x", need, "ssd_cp_workspace_size");
}

void checkSsdCpBackward(const SsdBackwardArgs& a, const SsdCpPart& p, const SsdCpCarry& carry, int rank, int ranks) {
  const int64_t need = ssdCpBackwardWorkspaceFloats(a, p, rank, ranks);
  Checker c("ssd_cp_backward", DeviceKind::CUDA);
  checkCarry(c, carry, a.forward);
  checkWorkspace("ssd_cp_backward", a.workspace, a.forward.x, "forward.x", need, "ssd_cp_backward_workspace_size");
}

}  // namespace detail

// ---- the passes ---------------------------------------------------------------------------------

namespace {

const driver::Api& api() { return driver::api(); }
CUdeviceptr ptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

void uploadIndices(const Geometry& g, const SsdCpPart& p, const Bufs& b, CUstream cs) {
  std::vector<int32_t> ints(2 * g.nseq, -1);
  if (p.from_previous) ints[0] = 0;
  if (p.to_next) ints[2 * g.nseq - 1] = 0;
  driver::check(api().cuMemcpyHtoDAsync(ptr(b.base), ints.data(), ints.size() * 4, cs),
                "ssd_cp: uploading the part's slot indices");
}

// The SSD's own workspace: what follows the extras.
TensorView afterExtras(const TensorView& w, int64_t extrasBytes) {
  return TensorView::contiguous(static_cast<char*>(w.data) + extrasBytes, DType::F32, {w.numel() - extrasBytes / 4},
                                DeviceKind::CUDA, w.deviceId);
}

void zero(const TensorView& t, CUstream cs) {
  driver::check(api().cuMemsetD32Async(ptr(t.data), 0, t.numel(), cs), "ssd_cp: cuMemsetD32Async");
}
void copyFloats(void* dst, const void* src, int64_t n, CUstream cs) {
  driver::check(api().cuMemcpyDtoDAsync(ptr(dst), ptr(src), n * 4, cs), "ssd_cp: cuMemcpyDtoDAsync");
}

}  // namespace

void detail::ssdCpForward(const SsdArgs& q, const SsdCpPart& p, const SsdCpCarry& carry, Communicator& comm,
                          char* extras, Stream stream) {
  const Geometry g = geometryOf(q, comm.size(), false);
  const Bufs b{extras, q.x.deviceId};
  const auto cs = static_cast<CUstream>(stream);
  uploadIndices(g, p, b, cs);
  // The summary: the crossing-out sequence's end state from zero (zeros when none crosses out) and
  // the part's decay a (0 unless the part is one sequence continuing both ways). The chunks'
  // states stay in the SSD's workspace for the resumed call.
  const SsdArgs summary = summaryArgs(q, g, b);
  if (ssd_workspace_size(summary) > q.workspace.numel())
    throw Error(Error::Kind::Internal, "ssd_cp: the states-only SSD needs more workspace than the SSD's");
  if (!p.to_next) zero(b.rowState(g), cs);
  detail::ssdPhase(summary, detail::SsdPhase::Summary, stream);
  if (whole(g, p))
    copyFloats(b.base + g.row, b.base + g.tail, g.H, cs);
  else
    zero(b.at(g.row, DType::F32, {g.H}), cs);
  copyFloats(carry.decay.data, b.base + g.row, g.H, cs);
  const TensorView gathered = b.at(g.gathered, DType::F32, {g.ranks, g.H + g.H * g.PN});
  comm.allGather(b.row(g), gathered, stream);
  detail::cpStateScan(gathered, comm.rank(), g.H, g.PN, carry.incoming, stream);
  detail::ssdPhase(fromIncoming(q, p, carry, g, b), detail::SsdPhase::Resume, stream);
}

int64_t ssd_cp_workspace_size(const SsdArgs& args, const SsdCpPart& part, const Communicator& comm) {
  return detail::ssdCpWorkspaceFloats(args, part, comm.rank(), comm.size());
}

void ssd_cp(const SsdArgs& args, const SsdCpPart& part, const SsdCpCarry& carry, Communicator& comm, Stream stream) {
  detail::checkSsdCp(args, part, carry, comm.rank(), comm.size());
  SsdArgs q = args;
  q.workspace = afterExtras(args.workspace, geometryOf(args, comm.size(), false).bytes);
  detail::ssdCpForward(q, part, carry, comm, static_cast<char*>(args.workspace.data), stream);
}

int64_t ssd_cp_backward_workspace_size(const SsdBackwardArgs& args, const SsdCpPart& part, const Communicator& comm) {
  return detail::ssdCpBackwardWorkspaceFloats(args, part, comm.rank(), comm.size());
}

void ssd_cp_backward(const SsdBackwardArgs& args, const SsdCpPart& part, const SsdCpCarry& carry, Communicator& comm,
                     Stream stream) {
  detail::checkSsdCpBackward(args, part, carry, comm.rank(), comm.size());
  const int rank = comm.rank(), ranks = comm.size();
  const Geometry g = geometryOf(args.forward, ranks, true);
  const Bufs b{static_cast<char*>(args.workspace.data), args.forward.x.deviceId};
  const auto cs = static_cast<CUstream>(stream);
  SsdBackwardArgs base = args;
  base.workspace = afterExtras(args.workspace, g.bytes);
  base.forward = fromIncoming(args.forward, part, carry, g, b);
  uploadIndices(g, part, b, cs);
  // Pass 1: dS_in_local, the incoming state's gradient with no gradient of the crossing-out
  // sequence's end state (final already when nothing crosses out). Its other gradients go to the
  // real outputs: pass 2 overwrites every one of them.
  if (part.from_previous)
    ssd_backward(firstPass(base, part, g, b), stream);
  else
    zero(b.rowState(g), cs);
  copyFloats(b.base + g.row, carry.decay.data, g.H, cs);
  const int64_t rowFloats = g.H + g.H * g.PN;
  comm.allGather(b.row(g), b.at(g.gathered, DType::F32, {ranks, rowFloats}), stream);
  if (part.to_next) {
    // G(r) = a(r+1) G(r+1) + dS_in_local(r+1) from G(c-1) = 0: the forward's exclusive scan over
    // the rows in reverse rank order.
    for (int q = 0; q < ranks; ++q)
      copyFloats(b.base + g.tail + (ranks - 1 - q) * rowFloats * 4, b.base + g.gathered + q * rowFloats * 4, rowFloats,
                 cs);
    detail::cpStateScan(b.at(g.tail, DType::F32, {ranks, rowFloats}), ranks - 1 - rank, g.H, g.PN,
                        b.at(g.g, DType::F32, {g.H * g.PN}), stream);
    ssd_backward(secondPass(base, part, g, b), stream);
  } else if (!part.from_previous) {
    ssd_backward(base, stream);
  }
}

}  // namespace ssmjit

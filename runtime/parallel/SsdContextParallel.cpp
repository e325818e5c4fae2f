// The SSD's context parallelism, forward and backward (ssmjit/ssd_parallel.h). The extra buffers,
// each 256-byte aligned: the parts' slot indices (int32: the first sequence's initial slot, 0 when
// it continues from the previous rank; the last sequence's final slot, 0 when it continues into
// the next), this rank's summary row [a (H) | state (H, P, N)], the gathered rows, then the
// forward's sequence decays or the backward's reversed rows and G.
#include "runtime/parallel/SsdContextParallel.h"

#include <algorithm>
#include <string>

#include "runtime/ops/ArgCheck.h"
#include "runtime/ops/SsdBackwardSpec.h"
#include "runtime/ops/SsdCheck.h"
#include "runtime/ops/SsdSpec.h"
#include "runtime/parallel/CpExchange.h"
#include "ssmjit/error.h"

namespace ssmjit {
namespace {

using detail::cpAlignUp;
constexpr detail::CpDecay kDecay = detail::CpDecay::PerHead;

struct Geometry {
  int64_t nseq = 1, H = 0, P = 0, N = 0, PN = 0;
  // Byte offsets in the extras; `tail` is the forward's decays or the backward's reversed rows.
  int64_t row = 0, gathered = 0, tail = 0, g = 0, bytes = 0;
};

Geometry geometryOf(int64_t nseq, int64_t H, int64_t PN, int ranks, bool backward) {
  Geometry g;
  g.nseq = nseq, g.H = H, g.PN = PN;
  const int64_t rowBytes = detail::cpRowFloats(H, PN, kDecay) * 4;
  g.row = detail::cpSlotBytes(nseq);
  g.gathered = g.row + cpAlignUp(rowBytes);
  g.tail = g.gathered + cpAlignUp(ranks * rowBytes);
  if (backward) {
    g.g = g.tail + cpAlignUp(ranks * rowBytes);
    g.bytes = g.g + cpAlignUp(H * PN * 4);
  } else {
    g.bytes = g.tail + cpAlignUp(nseq * H * 4);
  }
  return g;
}

Geometry geometryOf(const SsdArgs& a, int ranks, bool backward) {
  const int64_t nseq = a.cu_seqlens.defined() ? a.cu_seqlens.shape[0] - 1 : 1;
  Geometry g = geometryOf(nseq, a.x.shape[2], a.x.shape[3] * a.B.shape[3], ranks, backward);
  g.P = a.x.shape[3], g.N = a.B.shape[3];
  return g;
}

// The summary rows' places in the extras.
detail::CpRows rowsOf(const Geometry& g) {
  detail::CpRows r;
  r.row = g.row, r.gathered = g.gathered, r.reversed = g.tail, r.g = g.g;
  r.H = g.H, r.PN = g.PN, r.decay = kDecay;
  return r;
}

struct Bufs : detail::CpBuffers {
  TensorView initIdx(const Geometry& g) const { return at(0, DType::I32, {g.nseq}); }
  TensorView lastIdx(const Geometry& g) const { return at(g.nseq * 4, DType::I32, {g.nseq}); }
  TensorView rowState(const Geometry& g) const { return at(g.row + g.H * 4, DType::F32, {1, g.H, g.P, g.N}); }
};

bool whole(const Geometry& g, const ContextPart& p) { return g.nseq == 1 && p.from_previous && p.to_next; }

// The forward's first sequence from the incoming state (contiguous (H, P, N), as checkCarry asks)
// when it continues from the previous rank: one state slot.
SsdArgs fromIncoming(SsdArgs a, const ContextPart& p, const SsdCpCarry& carry, const Geometry& g, const Bufs& b) {
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

// The backward's summary (the incoming state's gradient alone, into the summary row's state) and
// its call with G as the crossing-out sequence's final-state gradient.
SsdBackwardArgs firstPass(SsdBackwardArgs a, const ContextPart& p, const Geometry& g, const Bufs& b) {
  if (p.to_next) a.dfinal_states = TensorView{};
  a.dinitial_states = b.rowState(g);
  return a;
}
SsdBackwardArgs secondPass(SsdBackwardArgs a, const ContextPart& p, const Geometry& g, const Bufs& b) {
  a.forward.final_state_indices = b.lastIdx(g);
  a.dfinal_states = b.at(g.g, DType::F32, {1, g.H, g.P, g.N});
  if (p.from_previous) a.dinitial_states = TensorView{};
  return a;
}

// ---- checks -------------------------------------------------------------------------------------

// What ssd_cp and ssd_cp_backward both ask of the forward's arguments and the part.
void checkPart(const detail::Checker& c, const SsdArgs& a, const ContextPart& p, int rank, int ranks) {
  detail::checkContextPart(c, "x", a.x.shape[0], p, a.initial_states.defined() || a.initial_state_indices.defined(),
                           rank, ranks);
  if (a.block_state_tokens != 0 || a.block_states.defined() || a.block_state_indices.defined())
    c.fail("block_state_tokens is " + std::to_string(a.block_state_tokens) +
           " (or block states are given), expected 0 and none: block states are not context parallel");
  if (a.sequence_decay.defined()) c.fail("sequence_decay is given, expected none (the op computes its own)");
}

void checkCarry(detail::Checker& c, const SsdCpCarry& carry, const SsdArgs& a) {
  c.setDeviceId(a.x.deviceId, "x");
  const int64_t H = a.x.shape[2], P = a.x.shape[3], N = a.B.shape[3];
  const detail::Dim eIn[3] = {{H, "nheads"}, {P, "headdim"}, {N, "dstate"}};
  detail::checkContiguousF32(c, "carry.incoming", carry.incoming, eIn, 3);
  const detail::Dim eA[1] = {{H, "nheads"}};
  detail::checkContiguousF32(c, "carry.decay", carry.decay, eA, 1);
}

}  // namespace

namespace detail {

int64_t ssdCpForwardExtrasBytes(int64_t nseq, int64_t H, int64_t PN, int ranks) {
  return geometryOf(nseq, H, PN, ranks, false).bytes;
}
int64_t ssdCpBackwardExtrasBytes(int64_t nseq, int64_t H, int64_t PN, int ranks) {
  return geometryOf(nseq, H, PN, ranks, true).bytes;
}

int64_t ssdCpWorkspaceFloats(const SsdArgs& a, const ContextPart& p, int rank, int ranks) {
  constexpr const char* op = "ssd_cp";
  checkSsdArgs(a, DeviceKind::CUDA, op);
  const Checker c(op, DeviceKind::CUDA);
  checkPart(c, a, p, rank, ranks);
  if (!a.out.defined()) c.fail("out is not given, expected (1, L, H, P) (the forward of a training step)");
  const Geometry g = geometryOf(a, ranks, false);
  const Bufs b{{detail::cpStandInBase(), a.x.deviceId}};
  SsdCpCarry stand;
  stand.incoming = b.at(g.bytes, DType::F32, {g.H, g.P, g.N});
  const int64_t ssd =
      std::max(ssd_workspace_size(summaryArgs(a, g, b)), ssd_workspace_size(fromIncoming(a, p, stand, g, b)));
  return g.bytes / 4 + ssd;
}

int64_t ssdCpBackwardWorkspaceFloats(const SsdBackwardArgs& a, const ContextPart& p, int rank, int ranks) {
  constexpr const char* op = "ssd_cp_backward";
  checkSsdBackwardArgs(a, DeviceKind::CUDA, op);
  const Checker c(op, DeviceKind::CUDA);
  checkPart(c, a.forward, p, rank, ranks);
  if (p.to_next && a.dfinal_states.defined())
    c.fail(
        "dfinal_states is given with part.to_next, expected none (the crossing-out sequence's gradient comes "
        "from the next rank, the others' is zero)");
  const Geometry g = geometryOf(a.forward, ranks, true);
  const Bufs b{{detail::cpStandInBase(), a.forward.x.deviceId}};
  SsdCpCarry stand;
  stand.incoming = b.at(g.bytes, DType::F32, {g.H, g.P, g.N});
  SsdBackwardArgs base = a;
  base.forward = fromIncoming(a.forward, p, stand, g, b);
  int64_t ssd = ssd_backward_workspace_size(base);
  if (p.from_previous) ssd = std::max(ssd, ssd_backward_workspace_size(firstPass(base, p, g, b)));
  if (p.to_next) ssd = std::max(ssd, ssd_backward_workspace_size(secondPass(base, p, g, b)));
  return g.bytes / 4 + ssd;
}

void checkSsdCp(const SsdArgs& a, const ContextPart& p, const SsdCpCarry& carry, int rank, int ranks) {
  const int64_t need = ssdCpWorkspaceFloats(a, p, rank, ranks);
  Checker c("ssd_cp", DeviceKind::CUDA);
  checkCarry(c, carry, a);
  checkWorkspace("ssd_cp", a.workspace, a.x, "x", need, "ssd_cp_workspace_size");
}

void checkSsdCpBackward(const SsdBackwardArgs& a, const ContextPart& p, const SsdCpCarry& carry, int rank, int ranks) {
  const int64_t need = ssdCpBackwardWorkspaceFloats(a, p, rank, ranks);
  Checker c("ssd_cp_backward", DeviceKind::CUDA);
  checkCarry(c, carry, a.forward);
  checkWorkspace("ssd_cp_backward", a.workspace, a.forward.x, "forward.x", need, "ssd_cp_backward_workspace_size");
}

}  // namespace detail

// ---- the passes ---------------------------------------------------------------------------------

void detail::ssdCpForward(const SsdArgs& q, const ContextPart& p, const SsdCpCarry& carry, Communicator& comm,
                          char* extras, Stream stream) {
  const Geometry g = geometryOf(q, comm.size(), false);
  const Bufs b{{extras, q.x.deviceId}};
  detail::uploadPartSlots(b.base, g.nseq, p, stream, "ssd_cp");
  // The summary: the crossing-out sequence's end state from zero (zeros when none crosses out) and
  // the part's decay a (0 unless the part is one sequence continuing both ways). The chunks'
  // states stay in the SSD's workspace for the resumed call.
  const SsdArgs summary = summaryArgs(q, g, b);
  if (ssd_workspace_size(summary) > q.workspace.numel())
    throw Error(Error::Kind::Internal, "ssd_cp: the states-only SSD needs more workspace than the SSD's");
  if (!p.to_next) detail::zeroFloats(b.rowState(g).data, g.H * g.PN, stream);
  detail::ssdPhase(summary, detail::SsdPhase::Summary, stream);
  if (whole(g, p))
    detail::copyFloats(b.base + g.row, b.base + g.tail, g.H, stream);
  else
    detail::zeroFloats(b.base + g.row, g.H, stream);
  detail::passStatesOn(comm, b, rowsOf(g), carry.decay.data, carry.incoming, stream);
  detail::ssdPhase(fromIncoming(q, p, carry, g, b), detail::SsdPhase::Resume, stream);
}

int64_t ssd_cp_workspace_size(const SsdArgs& args, const ContextPart& part, const Communicator& comm) {
  return detail::ssdCpWorkspaceFloats(args, part, comm.rank(), comm.size());
}

void ssd_cp(const SsdArgs& args, const ContextPart& part, const SsdCpCarry& carry, Communicator& comm, Stream stream) {
  detail::checkSsdCp(args, part, carry, comm.rank(), comm.size());
  SsdArgs q = args;
  q.workspace = detail::afterExtras(args.workspace, geometryOf(args, comm.size(), false).bytes);
  detail::ssdCpForward(q, part, carry, comm, static_cast<char*>(args.workspace.data), stream);
}

int64_t ssd_cp_backward_workspace_size(const SsdBackwardArgs& args, const ContextPart& part, const Communicator& comm) {
  return detail::ssdCpBackwardWorkspaceFloats(args, part, comm.rank(), comm.size());
}

void ssd_cp_backward(const SsdBackwardArgs& args, const ContextPart& part, const SsdCpCarry& carry, Communicator& comm,
                     Stream stream) {
  detail::checkSsdCpBackward(args, part, carry, comm.rank(), comm.size());
  const Geometry g = geometryOf(args.forward, comm.size(), true);
  const Bufs b{{static_cast<char*>(args.workspace.data), args.forward.x.deviceId}};
  SsdBackwardArgs base = args;
  base.workspace = detail::afterExtras(args.workspace, g.bytes);
  base.forward = fromIncoming(args.forward, part, carry, g, b);
  detail::uploadPartSlots(b.base, g.nseq, part, stream, "ssd_cp_backward");
  // The summary: the incoming state's gradient alone (with no gradient of the crossing-out
  // sequence's end state; final already when nothing crosses out).
  detail::passAdjointsBack(
      comm, part, b, rowsOf(g), carry.decay.data,
      [&] { detail::ssdBackwardInitialStateGradient(firstPass(base, part, g, b), stream); }, stream);
  ssd_backward(part.to_next ? secondPass(base, part, g, b) : base, stream);
}

}  // namespace ssmjit

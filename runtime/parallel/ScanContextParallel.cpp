// The Mamba-1 scan's context parallelism, forward and backward (ssmjit/scan_parallel.h). The
// extras, each 256-byte aligned: the part's slot indices (CpExchange.h), this rank's summary row
// [a (D, N) | state (D, N)], the gathered rows, and for the backward the reversed rows and G.
#include "runtime/parallel/ScanContextParallel.h"

#include <algorithm>
#include <string>

#include "runtime/ops/ArgCheck.h"
#include "runtime/ops/SelectiveScanCheck.h"
#include "runtime/parallel/CpExchange.h"
#include "runtime/parallel/ScanCpCorrect.h"
#include "runtime/parallel/ScanCpDecay.h"
#include "runtime/parallel/ScanCpStateGrad.h"
#include "ssmjit/error.h"

namespace ssmjit {
namespace {

using detail::cpAlignUp;
constexpr detail::CpDecay kDecay = detail::CpDecay::PerState;

struct Geometry {
  int64_t nseq = 1, D = 0, N = 0, DN = 0;
  // Byte offsets in the extras.
  int64_t row = 0, gathered = 0, reversed = 0, g = 0, bytes = 0;
};

Geometry geometryOf(int64_t nseq, int64_t DN, int ranks, bool backward) {
  Geometry g;
  g.nseq = nseq, g.DN = DN;
  const int64_t rowBytes = detail::cpRowFloats(1, DN, kDecay) * 4;
  g.row = detail::cpSlotBytes(nseq);
  g.gathered = g.row + cpAlignUp(rowBytes);
  g.bytes = g.gathered + cpAlignUp(ranks * rowBytes);
  if (backward) {
    g.reversed = g.bytes;
    g.g = g.reversed + cpAlignUp(ranks * rowBytes);
    g.bytes = g.g + cpAlignUp(DN * 4);
  }
  return g;
}

Geometry geometryOf(const SelectiveScanArgs& a, int ranks, bool backward) {
  const int64_t nseq = a.cu_seqlens.defined() ? a.cu_seqlens.shape[0] - 1 : 1;
  Geometry g = geometryOf(nseq, a.A.shape[0] * a.A.shape[1], ranks, backward);
  g.D = a.A.shape[0], g.N = a.A.shape[1];
  return g;
}

// The summary rows' places in the extras: the scan's state is one "head" of D N with a decay a
// state.
detail::CpRows rowsOf(const Geometry& g) {
  detail::CpRows r;
  r.row = g.row, r.gathered = g.gathered, r.reversed = g.reversed, r.g = g.g;
  r.H = 1, r.PN = g.DN, r.decay = kDecay;
  return r;
}

struct Bufs : detail::CpBuffers {
  TensorView initIdx(const Geometry& g) const { return at(0, DType::I32, {g.nseq}); }
  TensorView lastIdx(const Geometry& g) const { return at(g.nseq * 4, DType::I32, {g.nseq}); }
  TensorView rowDecay(const Geometry& g) const { return at(g.row, DType::F32, {g.D, g.N}); }
  TensorView rowState(const Geometry& g) const { return at(g.row + g.DN * 4, DType::F32, {1, g.D, g.N}); }
  TensorView rowStateGrad(const Geometry& g) const { return at(g.row + g.DN * 4, DType::F32, {g.D, g.N}); }
  TensorView G(const Geometry& g) const { return at(g.g, DType::F32, {1, g.D, g.N}); }
};

bool whole(const Geometry& g, const ContextPart& p) { return g.nseq == 1 && p.from_previous && p.to_next; }

TensorView states(const TensorView& t, const Geometry& g) {
  return TensorView::contiguous(t.data, DType::F32, {1, g.D, g.N}, DeviceKind::CUDA, t.deviceId);
}

// The call whose first sequence starts from the incoming state when it continues from the
// previous rank (one state slot; the others start from zero).
SelectiveScanArgs fromIncoming(SelectiveScanArgs a, const ContextPart& p, const ScanCpCarry& carry, const Geometry& g,
                               const Bufs& b) {
  if (!p.from_previous) return a;
  a.initial_states = states(carry.incoming, g);
  a.initial_state_indices = b.initIdx(g);
  return a;
}

// The summary: the part from a zero start for a continuing first sequence (else from the
// caller's initial states), the crossing-out sequence's end state into the summary row.
SelectiveScanArgs summaryArgs(SelectiveScanArgs a, const Geometry& g, const Bufs& b) {
  a.final_states = b.rowState(g);
  a.final_state_indices = b.lastIdx(g);
  return a;
}

// The backward's summary (the incoming state's gradient with no gradient of the crossing-out
// sequence's end state) and its pass with G as that gradient.
SelectiveScanBackwardArgs summaryPass(SelectiveScanBackwardArgs a, const ContextPart& p) {
  if (p.to_next) a.dfinal_states = TensorView{};
  return a;
}
SelectiveScanBackwardArgs secondPass(SelectiveScanBackwardArgs a, const ContextPart& p, const Geometry& g,
                                     const Bufs& b) {
  a.forward.final_states = TensorView{};
  a.forward.final_state_indices = b.lastIdx(g);
  a.dfinal_states = b.G(g);
  if (p.from_previous) a.dinitial_states = TensorView{};
  return a;
}

// ---- checks -------------------------------------------------------------------------------------

void checkCarry(detail::Checker& c, const ScanCpCarry& carry, const SelectiveScanArgs& a) {
  c.setDeviceId(a.u.deviceId, "u");
  const detail::Dim e[2] = {{a.A.shape[0], "channels (D)"}, {a.A.shape[1], "dstate (N)"}};
  detail::checkContiguousF32(c, "carry.incoming", carry.incoming, e, 2);
  detail::checkContiguousF32(c, "carry.decay", carry.decay, e, 2);
}

ScanCpCarry standInCarry(const Geometry& g, const Bufs& b) {
  return {b.at(g.bytes, DType::F32, {g.D, g.N}), b.at(g.bytes + g.DN * 4, DType::F32, {g.D, g.N})};
}

}  // namespace

namespace detail {

int64_t scanCpExtrasBytes(int64_t nseq, int64_t DN, int ranks, bool backward) {
  return geometryOf(nseq, DN, ranks, backward).bytes;
}

int64_t scanCpWorkspaceFloats(const SelectiveScanArgs& a, const ContextPart& p, int rank, int ranks) {
  constexpr const char* op = "selective_scan_cp";
  checkSelectiveScanArgs(a, DeviceKind::CUDA, op);
  const Checker c(op, DeviceKind::CUDA);
  checkContextPart(c, "u", a.u.shape[0], p, a.initial_states.defined() || a.initial_state_indices.defined(), rank,
                   ranks);
  const Geometry g = geometryOf(a, ranks, false);
  const Bufs b{{detail::cpStandInBase(), a.u.deviceId}};
  const SelectiveScanArgs real = fromIncoming(a, p, standInCarry(g, b), g, b);
  const int64_t scan = std::max({selective_scan_workspace_size(summaryArgs(a, g, b)),
                                 selective_scan_workspace_size(real), detail::scanCpCorrectWorkspaceFloats(a)});
  return g.bytes / 4 + scan;
}

int64_t scanCpBackwardWorkspaceFloats(const SelectiveScanBackwardArgs& a, const ContextPart& p, int rank, int ranks) {
  constexpr const char* op = "selective_scan_cp_backward";
  checkSelectiveScanBackwardArgs(a, DeviceKind::CUDA, op);
  const Checker c(op, DeviceKind::CUDA);
  const SelectiveScanArgs& f = a.forward;
  checkContextPart(c, "forward.u", f.u.shape[0], p, f.initial_states.defined() || f.initial_state_indices.defined(),
                   rank, ranks);
  if (p.to_next && a.dfinal_states.defined())
    c.fail(
        "dfinal_states is given with part.to_next, expected none (the crossing-out sequence's gradient comes "
        "from the next rank, the others' is zero)");
  const Geometry g = geometryOf(f, ranks, true);
  const Bufs b{{detail::cpStandInBase(), f.u.deviceId}};
  SelectiveScanBackwardArgs base = a;
  base.forward = fromIncoming(f, p, standInCarry(g, b), g, b);
  const int64_t scan = std::max(selective_scan_backward_workspace_size(p.to_next ? secondPass(base, p, g, b) : base),
                                p.from_previous ? detail::scanCpStateGradWorkspaceFloats(base) : 0);
  return g.bytes / 4 + scan;
}

void checkScanCp(const SelectiveScanArgs& a, const ContextPart& p, const ScanCpCarry& carry, int rank, int ranks) {
  const int64_t need = scanCpWorkspaceFloats(a, p, rank, ranks);
  Checker c("selective_scan_cp", DeviceKind::CUDA);
  checkCarry(c, carry, a);
  checkWorkspace("selective_scan_cp", a.workspace, a.u, "u", need, "selective_scan_cp_workspace_size");
}

void checkScanCpBackward(const SelectiveScanBackwardArgs& a, const ContextPart& p, const ScanCpCarry& carry, int rank,
                         int ranks) {
  const int64_t need = scanCpBackwardWorkspaceFloats(a, p, rank, ranks);
  Checker c("selective_scan_cp_backward", DeviceKind::CUDA);
  checkCarry(c, carry, a.forward);
  checkWorkspace("selective_scan_cp_backward", a.workspace, a.forward.u, "forward.u", need,
                 "selective_scan_cp_backward_workspace_size");
}

}  // namespace detail

// ---- the passes ---------------------------------------------------------------------------------

int64_t selective_scan_cp_workspace_size(const SelectiveScanArgs& args, const ContextPart& part,
                                         const Communicator& comm) {
  return detail::scanCpWorkspaceFloats(args, part, comm.rank(), comm.size());
}

void selective_scan_cp(const SelectiveScanArgs& args, const ContextPart& p, const ScanCpCarry& carry,
                       Communicator& comm, Stream stream) {
  detail::checkScanCp(args, p, carry, comm.rank(), comm.size());
  const Geometry g = geometryOf(args, comm.size(), false);
  const Bufs b{{static_cast<char*>(args.workspace.data), args.u.deviceId}};
  SelectiveScanArgs q = args;
  q.workspace = detail::afterExtras(args.workspace, g.bytes);
  detail::uploadPartSlots(b.base, g.nseq, p, stream, "selective_scan_cp");
  // A part continuing from the previous rank scans from a zero state beside the others and adds
  // the incoming state's share after the exchange (to its first sequence's final state too),
  // unless it continues into the next rank and the caller asks for final states (its first scan
  // writes the summary instead of them): then it scans again from the incoming state.
  const bool correct = p.from_previous && !(p.to_next && q.final_states.defined());
  // The first scan, before the exchange: the crossing-out sequence's end state (from zero when
  // the part continues from the previous rank) into the summary row, and the part's decay a (0
  // unless one sequence continuing both ways).
  if (p.to_next || correct) selective_scan(p.to_next ? summaryArgs(q, g, b) : q, stream);
  if (whole(g, p))
    detail::scanCpDecay(q, b.rowDecay(g), stream);
  else
    detail::zeroFloats(b.base + g.row, p.to_next ? g.DN : 2 * g.DN, stream);
  detail::passStatesOn(comm, b, rowsOf(g), carry.decay.data, carry.incoming, stream);
  if (correct)
    detail::scanCpCorrect(q, carry.incoming, stream);
  else if (p.from_previous || !p.to_next || q.final_states.defined())
    selective_scan(fromIncoming(q, p, carry, g, b), stream);
}

int64_t selective_scan_cp_backward_workspace_size(const SelectiveScanBackwardArgs& args, const ContextPart& part,
                                                  const Communicator& comm) {
  return detail::scanCpBackwardWorkspaceFloats(args, part, comm.rank(), comm.size());
}

void selective_scan_cp_backward(const SelectiveScanBackwardArgs& args, const ContextPart& p, const ScanCpCarry& carry,
                                Communicator& comm, Stream stream) {
  detail::checkScanCpBackward(args, p, carry, comm.rank(), comm.size());
  const Geometry g = geometryOf(args.forward, comm.size(), true);
  const Bufs b{{static_cast<char*>(args.workspace.data), args.forward.u.deviceId}};
  SelectiveScanBackwardArgs base = args;
  base.workspace = detail::afterExtras(args.workspace, g.bytes);
  base.forward = fromIncoming(args.forward, p, carry, g, b);
  detail::uploadPartSlots(b.base, g.nseq, p, stream, "selective_scan_cp_backward");
  // The summary: the incoming state's gradient alone, beside the other ranks'; then every part's
  // backward at once.
  detail::passAdjointsBack(
      comm, p, b, rowsOf(g), carry.decay.data,
      [&] { detail::scanCpStateGrad(summaryPass(base, p), b.rowStateGrad(g), base.workspace, stream); }, stream);
  selective_scan_backward(p.to_next ? secondPass(base, p, g, b) : base, stream);
}

}  // namespace ssmjit

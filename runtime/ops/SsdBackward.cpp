// ssd_backward: the gradients of the SSD chunked scan (ssmjit/ops.h). Checked once (SsdCheck),
// then on the caller's stream: the forward (ssd) into the front of the workspace, keeping y
// before the gate in the workspace's y plane (or, where the forward kept y, every forward kernel
// but chunk_scan), and the backward kernels (kernels_dsl/SsdBackward.h) in order: dstates (passing
// the states' gradients back along the chunks), dx (dz, the per-token partials), dCB, dB, dC, ddt
// (the cumsum backward), then the fixed-order sums dA, ddt_bias and dD.
#include <cuda.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "kernels_dsl/Registry.h"
#include "kernels_dsl/ssd/Ssd.h"
#include "kernels_dsl/ssd/SsdBackward.h"
#include "runtime/DeviceStatus.h"
#include "runtime/ops/ArgCheck.h"
#include "runtime/ops/CompileAhead.h"
#include "runtime/ops/KernelCall.h"
#include "runtime/ops/SsdBackwardSpec.h"
#include "runtime/ops/SsdBinding.h"
#include "runtime/ops/SsdCheck.h"
#include "runtime/ops/SsdSpec.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"

namespace ssmjit {
namespace {

using detail::Axes;
using detail::KernelCall;
using detail::SsdDims;

constexpr const char* kOp = "ssd_backward";

struct BwdPlan {
  kernels::SsdWorkspaceLayout fwd;
  kernels::SsdBwdWorkspaceLayout bwd;
  bool wide = false;  // 64-bit offsets
};
BwdPlan plan(const SsdBackwardArgs& b, const SsdDims& d) {
  BwdPlan p;
  const int64_t Q = d.chunk, slots = d.packed ? d.nseq + d.L / Q : d.batch * ((d.L + Q - 1) / Q);
  p.fwd = kernels::ssdWorkspaceLayout(slots, d.H, d.G, d.P, d.N, Q);
  const SsdArgs& f = b.forward;
  p.bwd = kernels::ssdBwdWorkspaceLayout(p.fwd.total, slots, d.batch * d.L, d.H, d.G, d.P, d.N, Q, f.y.defined());
  p.wide = !detail::fits32({&f.x, &f.dt, &f.z, &f.y, &f.B, &f.C, &f.initial_states, &b.dout, &b.dfinal_states, &b.dx,
                            &b.ddt, &b.dz, &b.dB, &b.dC, &b.dinitial_states}) ||
           p.bwd.total >= (int64_t{1} << 31);
  return p;
}

// The workspace's float32 plane at element `at` (or, without a workspace (specialisations only),
// at a placeholder address with the alignment a device allocation has: the same kernels).
TensorView wsPlane(const SsdBackwardArgs& b, int64_t at, std::initializer_list<int64_t> shape) {
  float* ws = b.workspace.defined() ? static_cast<float*>(b.workspace.data) : reinterpret_cast<float*>(uintptr_t{256});
  TensorView v = TensorView::contiguous(ws + at, DType::F32, shape);
  v.device = b.forward.x.device, v.deviceId = b.forward.x.deviceId;
  return v;
}

// y before the gate as the token kernels read it: the forward's where it kept it, else the plane
// the recomputation writes.
TensorView yRead(const SsdBackwardArgs& b, const SsdDims& d, const BwdPlan& p) {
  return b.forward.y.defined() ? b.forward.y : wsPlane(b, p.bwd.oY, {d.batch, d.L, d.H, d.P});
}

// The forward call that recomputes what the backward reads: its workspace is the front of the
// backward's; out is the y plane (fp32, before the gate: no z), or, where the forward kept y, not
// written (the States phase); no state or decay outputs.
struct Recompute {
  SsdArgs args;
  detail::SsdPhase phase;
};
Recompute recompute(const SsdBackwardArgs& b, const SsdDims& d, const BwdPlan& p) {
  SsdArgs f = b.forward;
  const bool keptY = f.y.defined();
  f.compile_backward = false;  // this is the backward
  f.z = {};
  f.y = {};
  f.out = keptY ? TensorView{} : yRead(b, d, p);
  f.final_states = {}, f.final_state_indices = {};
  f.block_state_tokens = 0, f.block_states = {}, f.block_state_indices = {};
  f.sequence_decay = {};
  f.workspace = b.workspace.defined() ? wsPlane(b, 0, {p.fwd.total}) : TensorView{};
  return {f, keptY ? detail::SsdPhase::States : detail::SsdPhase::Whole};
}

// Binds the token kernels' shared signature (SsdBackward.h) for kernel `S`.
// pass_parts: the pass plane's partials a slot and head (dstates' programs a head; ssd_bwd_dt
// reads them).
void bind(KernelCall& c, const dsl::Signature& S, const SsdBackwardArgs& b, const SsdDims& d, const BwdPlan& p,
          int64_t passParts) {
  const SsdArgs& f = b.forward;
  detail::bindSsdInputs(c, S, f, d);
  const Axes rows = detail::ssdRowAxes(d);
  c.tensor(S.tensor("y"), yRead(b, d, p), rows);
  c.tensor(S.tensor("dout"), b.dout, rows);
  c.tensor(S.tensor("dx"), b.dx, rows);
  c.tensor(S.tensor("ddt"), b.ddt, rows);
  c.tensor(S.tensor("dA"), b.dA);
  c.tensor(S.tensor("dB"), b.dB, rows);
  c.tensor(S.tensor("dC"), b.dC, rows);
  c.tensor(S.tensor("dD"), b.dD, detail::ssdDAxes(d));
  c.tensor(S.tensor("dz"), b.dz, rows);
  c.tensor(S.tensor("ddtb"), b.ddt_bias);
  c.tensor(S.tensor("ws"), b.workspace);
  c.pointer(S.tensor("chunks"), b.workspace.data, DType::I32);
  c.size(S.size("slots"), p.fwd.slots);
  detail::bindSsdForwardOffsets(c, S, p.fwd);
  c.size(S.size("o_g"), p.bwd.oG);
  c.size(S.size("o_tok"), p.bwd.oTok);
  c.size(S.size("o_dd"), p.bwd.oDd);
  c.size(S.size("o_pn"), p.bwd.oPn);
  c.size(S.size("o_sl"), p.bwd.oSl);
  c.size(S.size("o_dcb"), p.bwd.oDcb);
  c.size(S.size("pass_parts"), passParts);
  c.flag(S.flag("d_per_channel"), d.dPerChannel);
  c.flag(S.flag("has_init"), f.initial_states.defined());
  c.flag(S.flag("has_dfinal"), b.dfinal_states.defined());
  c.meta("meta:index_bits", p.wide ? 64 : 32);
}

// dstates' own arguments beside the token kernels': what passing the states' gradients reads and
// writes, and its chain's words (the forward's, zeroed again before it).
void bindChain(KernelCall& c, const SsdBackwardArgs& b, const SsdDims& d, const BwdPlan& p, void* err) {
  constexpr const dsl::Signature& S = kernels::kSsdBwdDstates;
  const SsdArgs& f = b.forward;
  const TensorView finalIdx = b.dfinal_states.defined() ? f.final_state_indices : TensorView{};
  c.tensor(S.tensor("dfinal"), b.dfinal_states);
  c.tensor(S.tensor("dinit"), b.dinitial_states);
  c.tensor(S.tensor("cu"), f.cu_seqlens);
  c.tensor(S.tensor("init_idx"), f.initial_state_indices);
  c.tensor(S.tensor("final_idx"), finalIdx);
  c.pointer(S.tensor("err"), err, DType::I64);
  c.size(S.size("nseq"), d.nseq);
  c.size(S.size("nslots_init"), d.initSlots);
  c.size(S.size("nslots_final"), b.dfinal_states.defined() ? b.dfinal_states.shape[0] : 0);
  c.size(S.size("o_flags"), p.fwd.oFlags);
  c.flag(S.flag("has_cu"), d.packed);
  c.flag(S.flag("has_init_idx"), f.initial_state_indices.defined());
  c.flag(S.flag("has_final_idx"), finalIdx.defined());
  c.flag(S.flag("has_dinit"), b.dinitial_states.defined());
}

using Grid = std::array<unsigned, 3>;

// Every backward launch of the call in order (after the forward's), bound, with its grid;
// `zeroFlags` runs before dstates (its chain's words start at 0). A call without tokens launches
// the sums only (they write zeros). `statesOnly`: dstates alone (the initial states' gradient).
template <class F, class Z>
void forEachLaunch(const SsdBackwardArgs& b, const SsdDims& d, const BwdPlan& p, void* err, F&& f, Z&& zeroFlags,
                   bool statesOnly = false) {
  const int64_t S = p.fwd.slots, nb = d.chunk / kernels::kSsdTokenBlock;
  auto cdivU = [](int64_t x, int64_t y) { return static_cast<unsigned>((x + y - 1) / y); };
  auto u = [](int64_t v) { return static_cast<unsigned>(v); };
  int64_t passParts = 0;  // dstates' programs a head, once its launch knows its blocks
  auto launch = [&](const dsl::Signature& sig, auto grid) {
    KernelCall c(sig);
    bind(c, sig, b, d, p, passParts);
    if (&sig == &kernels::kSsdBwdDstates) bindChain(c, b, d, p, err);
    f(c, [&](KernelCall& k) { return grid(k); });
  };
  const bool tokens = d.L > 0 && d.nseq > 0;
  if (tokens) {
    zeroFlags();
    launch(kernels::kSsdBwdDstates, [&](KernelCall& k) {
      const unsigned blocks = cdivU(d.P, k.metaValue("meta:BLOCK_P")) * cdivU(d.N, k.metaValue("meta:BLOCK_N"));
      passParts = blocks;
      return detail::ssdSlotHeadGrid(k, kOp, S, d.H, blocks);
    });
    if (statesOnly) return;
    launch(kernels::kSsdBwdDx, [&](KernelCall& k) {
      return detail::ssdSlotHeadGrid(k, kOp, S, d.H, nb * cdivU(d.P, kernels::ssdBwdBlockP(d.P)));
    });
    launch(kernels::kSsdBwdDcb, [&](KernelCall& k) { return detail::ssdSlotHeadGrid(k, kOp, S, d.G, nb * nb); });
    for (const dsl::Signature* sig : {&kernels::kSsdBwdDb, &kernels::kSsdBwdDc})
      launch(*sig, [&](KernelCall& k) {
        return detail::ssdSlotHeadGrid(k, kOp, S, d.G, nb * cdivU(d.N, k.metaValue("meta:BLOCK_N")));
      });
    launch(kernels::kSsdBwdDt, [&](KernelCall& k) { return Grid{u(S), cdivU(d.H, k.metaValue("meta:BLOCK_H")), 1}; });
  }
  if (!statesOnly) launch(kernels::kSsdBwdSums, [&](KernelCall&) { return Grid{u(d.H), 1, 1}; });
}

// The launches on the caller's stream, the chain's words zeroed before dstates.
void launchAll(const SsdBackwardArgs& b, const SsdDims& d, const BwdPlan& p, Stream stream, bool statesOnly) {
  const CUstream s = static_cast<CUstream>(stream);
  forEachLaunch(
      b, d, p, deviceStatusRecord(),
      [&](KernelCall& c, auto grid) {
        const Grid g = grid(c);
        const unsigned dims[3] = {g[0], g[1], g[2]};
        c.launch(dims, s);
      },
      [&] { detail::zeroSsdChainWords(b.workspace, p.fwd, s, kOp); }, statesOnly);
}

// The op's checks of a launching call: arguments, workspace and grid limits.
BwdPlan checkedPlan(const SsdBackwardArgs& b, SsdDims* d) {
  *d = detail::checkSsdBackwardArgs(b, DeviceKind::CUDA, kOp);
  const BwdPlan p = plan(b, *d);
  detail::checkWorkspace(kOp, b.workspace, b.forward.x, "x", p.bwd.total, "ssd_backward_workspace_size",
                         "the forward's recomputation and the gradients' partial sums");
  if (d->nseq > 65535 || d->H > 65535)
    throw Error(Error::Kind::InvalidArgument, std::string(kOp) + ": " + std::to_string(d->nseq) + " sequences and " +
                                                  std::to_string(d->H) +
                                                  " heads, expected at most 65535 of each (grid limits)");
  return p;
}

}  // namespace

int64_t ssd_backward_workspace_size(const SsdBackwardArgs& b) {
  const SsdDims d = detail::checkSsdBackwardArgs(b, b.forward.x.device, kOp);
  return plan(b, d).bwd.total;
}

void ssd_backward(const SsdBackwardArgs& b, Stream stream) {
  SsdDims d;
  const BwdPlan p = checkedPlan(b, &d);
  if (d.H == 0) return;
  // Opened before the recomputation's ssd call, whose own CompileAhead defers to this one.
  const detail::CompileAhead ahead(
      [&](const std::string& arch) { return detail::ssdBackwardSpecializations(b, arch); });
  if (d.L > 0 && d.nseq > 0) {
    const Recompute r = recompute(b, d, p);
    detail::ssdPhase(r.args, r.phase, stream);
  }
  launchAll(b, d, p, stream, false);
}

void detail::ssdBackwardInitialStateGradient(const SsdBackwardArgs& b, Stream stream) {
  SsdDims d;
  const BwdPlan p = checkedPlan(b, &d);
  if (!b.dinitial_states.defined())
    throw Error(Error::Kind::Internal, "ssdBackwardInitialStateGradient: no dinitial_states to write");
  if (d.H == 0 || d.L == 0 || d.nseq == 0) return;
  Recompute r = recompute(b, d, p);
  r.args.out = {};  // the chunks' states only: dstates reads no y
  detail::ssdPhase(r.args, detail::SsdPhase::States, stream);
  launchAll(b, d, p, stream, true);
}

std::vector<Specialization> detail::ssdBackwardSpecializations(const SsdBackwardArgs& b, const std::string& arch) {
  const SsdDims d = checkSsdBackwardArgs(b, b.forward.x.device, kOp);
  const BwdPlan p = plan(b, d);
  const Recompute r = recompute(b, d, p);
  std::vector<Specialization> out = ssdSpecializations(r.args, arch, r.phase);
  forEachLaunch(
      b, d, p, nullptr,
      [&](KernelCall& c, auto) {
        Specialization sp = c.specialization(arch);
        if (std::find(out.begin(), out.end(), sp) == out.end()) out.push_back(std::move(sp));
      },
      [] {});
  return out;
}

}  // namespace ssmjit

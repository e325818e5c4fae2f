// The context-parallel Mamba-2 layer (mamba2_parallel.h). The prefill is the layer's own with
// two hooks, a conv halo from the previous rank and the SSD's context-parallel forward
// (ssd_parallel.h); the backward is the layer's own with the transposed hooks, the SSD's
// context-parallel backward and the halo's gradient sent back. Each keeps its extra buffers at its
// workspace's front, the layer's workspace after them.
#include <cuda.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/Driver.h"
#include "runtime/model/Mamba2CpPart.h"
#include "runtime/model/Mamba2LayerHooks.h"
#include "runtime/parallel/CpExchange.h"
#include "runtime/parallel/SsdContextParallel.h"
#include "ssmjit/error.h"
#include "ssmjit/mamba2_parallel.h"

namespace ssmjit {
namespace {

constexpr const char* kOp = "mamba2_cp_layer_prefill";
using detail::cpAlignUp;

constexpr const char* kBackwardOp = "mamba2_cp_layer_backward";

[[noreturn]] void fail(const std::string& msg, const char* op = kOp) {
  throw Error(Error::Kind::InvalidArgument, std::string(op) + ": " + msg);
}

// Byte offsets of the extra buffers in the workspace: the part's index arrays, the conv's halo,
// what the SSD's forward keeps (its incoming state and decay) and the SSD's context-parallel
// extras.
struct Extras {
  int64_t halo = 0, incoming = 0, decay = 0, ssd = 0, layer = 0;
};

Extras extrasOf(const Mamba2Dims& d, DType act, const detail::CpPart& p, int ranks) {
  const int64_t H = d.heads, PN = d.head_dim * d.state;
  Extras x;
  x.halo = cpAlignUp(static_cast<int64_t>(p.ints.size()) * 4);
  x.incoming = x.halo + cpAlignUp((d.conv_width - 1) * d.inProjRows() * dtypeBytes(act));
  x.decay = x.incoming + cpAlignUp(H * PN * 4);
  x.ssd = x.decay + cpAlignUp(H * 4);
  x.layer = x.ssd + detail::ssdCpForwardExtrasBytes(p.nloc, H, PN, ranks);
  return x;
}

using Bufs = detail::CpBuffers;

// The layer's own call on this rank's tokens; its workspace after the extras (none when sizing).
Mamba2LayerArgs layerArgs(const Mamba2CpPrefillArgs& a, const detail::CpPart& p, const Extras& x, const Bufs& b,
                          int64_t workspaceFloats) {
  Mamba2LayerArgs l;
  l.hidden = a.hidden;
  l.out = a.out;
  l.cu_seqlens = b.at(0, DType::I32, {p.nloc + 1});
  l.state_indices = b.at((p.nloc + 1) * 4, DType::I32, {p.nloc});
  if (workspaceFloats > 0) l.workspace = b.at(x.layer, DType::F32, {workspaceFloats - x.layer / 4});
  return l;
}

// A workspace holding at least `bytes` (its extras): float32, else refused naming what came.
void checkHolds(const char* op, const char* name, const TensorView& ws, int64_t bytes, const char* sizeFn) {
  if (ws.defined() && ws.dtype == DType::F32 && ws.numel() * 4 >= bytes) return;
  if (!ws.defined()) fail(std::string(name) + " is missing, expected float32 of " + sizeFn + "() elements", op);
  fail(std::string(name) + " is " + dtypeName(ws.dtype) + " " + ws.shapeString() + ", expected float32 of at least " +
           std::to_string(bytes / 4) + " elements (" + sizeFn + "())",
       op);
}

// The previous rank's last W - 1 rows of in_proj's output, as the forward received them, viewed as
// the conv's initial state (1, convDim, W - 1) of the part's first sequence; and that sequence's
// slot array (0 when it continues from the previous rank, else -1; -1 for the others).
TensorView haloState(const Mamba2Dims& d, const Extras& x, const Bufs& b, DType act) {
  const int64_t Wm = d.conv_width - 1, R = d.inProjRows();
  TensorView halo = b.at(x.halo + d.dInner() * dtypeBytes(act), act, {1, d.convDim(), Wm});
  halo.strides[0] = Wm * R;
  halo.strides[1] = 1;
  halo.strides[2] = R;
  return halo;
}
TensorView firstSlots(const detail::CpPart& p, const Bufs& b) {
  return b.at((2 * p.nloc + 1) * 4, DType::I32, {p.nloc});
}

// The SSD's share of the backward's scratch: its context-parallel backward's.
std::function<int64_t(const SsdBackwardArgs&)> ssdCpWorkspaceFloats(const detail::CpPart& p, const Communicator& comm) {
  const ContextPart part{p.firstContinues, p.lastContinues};
  return [&comm, part](const SsdBackwardArgs& q) { return ssd_cp_backward_workspace_size(q, part, comm); };
}

// The halo's gradient in the backward's workspace: what this rank sends back (the gradient of
// the conv's initial state of its first sequence) and what it receives (that of its last W - 1
// rows), each (1, convDim, W - 1) fp32, after the last segment's slot array; the layer's backward
// workspace after them.
struct BackwardExtras {
  int64_t send = 0, recv = 0, layer = 0;
};

BackwardExtras backwardExtrasOf(const Mamba2Dims& d, const detail::CpPart& p) {
  const int64_t halo = cpAlignUp(d.convDim() * (d.conv_width - 1) * 4);
  BackwardExtras x;
  x.send = cpAlignUp(p.nloc * 4);
  x.recv = x.send + halo;
  x.layer = x.recv + halo;
  return x;
}

// The part's layer backward: the prefill's call as mamba2_cp_layer_prefill made it (its index
// arrays still in the forward's workspace), this rank's dout and gradients.
struct CpBackward {
  detail::CpPart p;
  Extras fx;
  BackwardExtras bx;
  Bufs fb, bb;
  Mamba2LayerBackwardArgs layer;
};

CpBackward cpBackward(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                      const Mamba2CpBackwardArgs& a, const Communicator& comm) {
  CpBackward c;
  const Mamba2CpPrefillArgs& f = a.forward;
  c.p = detail::cpPartOf(d, f, comm.rank(), comm.size());
  c.fx = extrasOf(d, f.hidden.dtype, c.p, comm.size());
  c.bx = backwardExtrasOf(d, c.p);
  // Sizing (no workspaces): stand-in addresses, only checked, never dereferenced.
  const bool sized = f.workspace.defined() && a.workspace.defined();
  if (sized) {
    checkHolds(kBackwardOp, "forward.workspace", f.workspace, c.fx.layer, "mamba2_cp_layer_prefill_workspace_size");
    checkHolds(kBackwardOp, "workspace", a.workspace, c.bx.layer, "mamba2_cp_layer_backward_workspace_size");
  }
  c.fb = {static_cast<char*>(sized ? f.workspace.data : detail::cpStandInBase()), f.hidden.deviceId};
  c.bb = {static_cast<char*>(sized ? a.workspace.data : detail::cpStandInBase(1)), f.hidden.deviceId};
  c.layer.forward = layerArgs(f, c.p, c.fx, c.fb, sized ? f.workspace.numel() : 0);
  c.layer.dout = a.dout;
  c.layer.grads = a.grads;
  if (a.grads.initial_states.conv_state.defined() || a.grads.initial_states.ssm_state.defined())
    fail("grads.initial_states is given, expected none (every sequence starts from zero)", kBackwardOp);
  if (sized) c.layer.workspace = c.bb.at(c.bx.layer, DType::F32, {a.workspace.numel() - c.bx.layer / 4});
  return c;
}

// The conv's and the SSD's backward over the parts.
detail::Mamba2BackwardHooks cpBackwardHooks(const Mamba2Dims& d, const CpBackward& c, Communicator& comm,
                                            Stream stream) {
  detail::Mamba2BackwardHooks h;
  const ContextPart part{c.p.firstContinues, c.p.lastContinues};
  h.ssdWorkspaceFloats = ssdCpWorkspaceFloats(c.p, comm);
  h.ssd = [&comm, part, &c, &d, stream](SsdBackwardArgs& q) {
    SsdCpCarry carry;
    carry.incoming = c.fb.at(c.fx.incoming, DType::F32, {d.heads, d.head_dim, d.state});
    carry.decay = c.fb.at(c.fx.decay, DType::F32, {d.heads});
    ssd_cp_backward(q, part, carry, comm, stream);
  };
  h.conv = [&comm, &c, &d, stream](CausalConv1dBackwardArgs& v) {
    const int rank = comm.rank(), ranks = comm.size();
    const int64_t Wm = d.conv_width - 1, nloc = c.p.nloc;
    const auto cs = static_cast<CUstream>(stream);
    const TensorView send = c.bb.at(c.bx.send, DType::F32, {1, d.convDim(), Wm}),
                     recv = c.bb.at(c.bx.recv, DType::F32, {1, d.convDim(), Wm});
    if (rank > 0) {  // the forward's halo as the first sequence's initial state (slot 0, or -1)
      v.initial_states = haloState(d, c.fx, c.fb, c.layer.forward.hidden.dtype);
      v.initial_state_indices = firstSlots(c.p, c.fb);
      v.dinitial_states = send;
      // Written only where the first sequence reads its slot: zeros otherwise.
      driver::check(driver::api().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(send.data), 0,
                                                  static_cast<size_t>(send.numel() * 4), cs),
                    "mamba2_cp_layer_backward: zeroing the halo's gradient");
    }
    causal_conv1d_backward(v, stream);
    comm.sendRecv(rank > 0 ? send : TensorView{}, rank > 0 ? rank - 1 : -1, rank + 1 < ranks ? recv : TensorView{},
                  rank + 1 < ranks ? rank + 1 : -1, stream);
    if (!c.p.lastContinues) return;
    // The next rank read this part's last W - 1 rows: their gradient joins as the last segment's
    // final-state gradient, and the conv's backward runs again.
    std::vector<int32_t> last(static_cast<size_t>(nloc), -1);
    last.back() = 0;
    const TensorView lastIdx = c.bb.at(0, DType::I32, {nloc});
    driver::check(
        driver::api().cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(lastIdx.data), last.data(), last.size() * 4, cs),
        "mamba2_cp_layer_backward: uploading the last segment's slot");
    v.dfinal_states = recv;
    v.final_state_indices = lastIdx;
    causal_conv1d_backward(v, stream);
  };
  return h;
}

}  // namespace

int64_t mamba2_cp_layer_prefill_workspace_size(const Mamba2Dims& d, const Mamba2LayerWeights& w,
                                               const Mamba2LayerState& s, const Mamba2CpPrefillArgs& a,
                                               const Communicator& comm) {
  const detail::CpPart p = detail::cpPartOf(d, a, comm.rank(), comm.size());
  const Extras x = extrasOf(d, a.hidden.dtype, p, comm.size());
  const Bufs b{detail::cpStandInBase(), a.hidden.deviceId};
  return x.layer / 4 + mamba2_layer_workspace_size(d, w, s, layerArgs(a, p, x, b, 0), Mamba2LayerMode::Prefill);
}

void mamba2_cp_layer_prefill(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                             const Mamba2CpPrefillArgs& a, Communicator& comm, Stream stream) {
  const int rank = comm.rank(), ranks = comm.size();
  const detail::CpPart p = detail::cpPartOf(d, a, rank, ranks);
  const Extras x = extrasOf(d, a.hidden.dtype, p, ranks);
  checkHolds(kOp, "workspace", a.workspace, x.layer, "mamba2_cp_layer_prefill_workspace_size");
  const Bufs b{static_cast<char*>(a.workspace.data), a.workspace.deviceId};
  const Mamba2LayerArgs layer = layerArgs(a, p, x, b, a.workspace.numel());
  const auto cs = static_cast<CUstream>(stream);
  const driver::Api& api = driver::api();
  driver::check(api.cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(b.base), p.ints.data(), p.ints.size() * 4, cs),
                "mamba2_cp_layer_prefill: uploading the part's indices");
  const DType act = a.hidden.dtype;
  const int64_t R = d.inProjRows(), Wm = d.conv_width - 1;

  detail::Mamba2PrefillHooks hooks;
  hooks.beforeConv = [&](CausalConv1dArgs& conv, const TensorView& zxbcdt) {
    // The last W - 1 rows of in_proj's output go to the next rank; the previous rank's arrive as
    // the conv's initial state of the sequence continuing here, (1, convDim, W - 1) in place.
    const int64_t bytes = dtypeBytes(act);
    const TensorView send = TensorView::contiguous(static_cast<char*>(zxbcdt.data) + (p.Tr - Wm) * R * bytes, act,
                                                   {Wm * R}, DeviceKind::CUDA, zxbcdt.deviceId);
    const TensorView recv = b.at(x.halo, act, {Wm * R});
    const bool toNext = rank + 1 < ranks, fromPrev = rank > 0;
    comm.sendRecv(toNext ? send : TensorView{}, toNext ? rank + 1 : -1, fromPrev ? recv : TensorView{},
                  fromPrev ? rank - 1 : -1, stream);
    if (!fromPrev) return;
    conv.initial_states = haloState(d, x, b, act);
    conv.initial_state_indices = firstSlots(p, b);
  };
  hooks.ssd = [&](SsdArgs& q) {
    SsdCpCarry carry;
    carry.incoming = b.at(x.incoming, DType::F32, {d.heads, d.head_dim, d.state});
    carry.decay = b.at(x.decay, DType::F32, {d.heads});
    detail::ssdCpForward(q, ContextPart{p.firstContinues, p.lastContinues}, carry, comm, b.base + x.ssd, stream);
  };
  detail::mamba2LayerPrefill(d, w, s, layer, stream, hooks);
}

int64_t mamba2_cp_layer_backward_workspace_size(const Mamba2Dims& d, const Mamba2LayerWeights& w,
                                                const Mamba2LayerState& s, const Mamba2CpBackwardArgs& a,
                                                const Communicator& comm) {
  Mamba2CpBackwardArgs sized = a;
  sized.workspace = {};
  const CpBackward c = cpBackward(d, w, s, sized, comm);
  detail::Mamba2BackwardHooks h;
  h.ssdWorkspaceFloats = ssdCpWorkspaceFloats(c.p, comm);
  return c.bx.layer / 4 + detail::mamba2LayerBackwardWorkspaceSize(d, w, s, c.layer, h);
}

void mamba2_cp_layer_backward(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                              const Mamba2CpBackwardArgs& a, Communicator& comm, Stream stream) {
  checkHolds(kBackwardOp, "forward.workspace", a.forward.workspace, 0, "mamba2_cp_layer_prefill_workspace_size");
  checkHolds(kBackwardOp, "workspace", a.workspace, 0, "mamba2_cp_layer_backward_workspace_size");
  const CpBackward c = cpBackward(d, w, s, a, comm);
  detail::mamba2LayerBackward(d, w, s, c.layer, stream, cpBackwardHooks(d, c, comm, stream));
}

}  // namespace ssmjit

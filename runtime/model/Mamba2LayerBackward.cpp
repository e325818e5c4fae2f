// The Mamba-2 layer's backward (mamba2.h): the prefill's ops transposed in reverse order, each
// reading the intermediates the prefill left in its workspace:
//   out_proj   linear_backward: d(normed y) (fp32), dW_out, db_out
//   norm       gated_rms_norm_backward: dy (fp32), dz (into in_proj's gradient), dnorm_weight
//   SSD        ssd_backward: dx, dB, dC (fp32, the conv output's gradient), ddt (into in_proj's
//              gradient), dA, dD, ddt_bias, the SSM states' gradients
//   conv       causal_conv1d_backward: dxBC (into in_proj's gradient), dconv weight and bias, the
//              conv states' gradients
//   in_proj    linear_backward: dhidden, dW_in, db_in
// Workspace, each part 256-byte aligned: in_proj's output's gradient (T, inProjRows) in the
// activations' dtype | dy (T, d_inner) fp32 | the conv output's gradient (T, convDim), fp32, which
// holds d(normed y) (T, d_inner) first | the ops' own workspaces, one after another in one region.
#include <algorithm>
#include <cstdint>

#include "runtime/model/Mamba2LayerHooks.h"
#include "runtime/model/Mamba2PrefillCalls.h"
#include "runtime/model/Mamba2WeightFields.h"
#include "runtime/ops/ArgCheck.h"
#include "ssmjit/mamba2.h"

namespace ssmjit {
namespace {

using detail::Mamba2PrefillCalls;

constexpr const char* kOp = "mamba2_layer_backward";
constexpr int64_t kAlignBytes = 256;

int64_t alignUp(int64_t v) { return (v + kAlignBytes - 1) / kAlignBytes * kAlignBytes; }

// `like` (a view into the forward's intermediates) moved to `base` + the same element offset
// from `from`, in `dtype`: the gradient buffer laid out as the intermediate it mirrors.
TensorView mirror(const TensorView& like, const TensorView& from, void* base, DType dtype) {
  TensorView v = like;
  const int64_t offset = (static_cast<char*>(like.data) - static_cast<char*>(from.data)) / dtypeBytes(like.dtype);
  v.data = static_cast<char*>(base) + offset * dtypeBytes(dtype);
  v.dtype = dtype;
  return v;
}

// The backward's calls and where their buffers sit in the workspace.
struct BackwardCalls {
  LinearBackwardArgs outProj, inProj;
  GatedRmsNormBackwardArgs norm;
  SsdBackwardArgs ssd;
  CausalConv1dBackwardArgs conv;
  int64_t scratchOffset = 0, bytes = 0;
};

BackwardCalls backwardCalls(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerBackwardArgs& a,
                            const Mamba2PrefillCalls& f) {
  const int64_t T = f.tokens;
  const DType act = f.zxbcdt.dtype;
  // Without a workspace, a stand-in address apart from the prefill's (Mamba2Layer.cpp uses 2^47).
  void* base = a.workspace.defined() ? a.workspace.data : reinterpret_cast<void*>(uintptr_t{3} << 46);
  const int dev = a.forward.hidden.deviceId;
  int64_t at = 0;
  auto take = [&](int64_t cols, DType t) {
    TensorView v = TensorView::contiguous(static_cast<char*>(base) + at, t, {T, cols}, DeviceKind::CUDA, dev);
    at += alignUp(T * cols * dtypeBytes(t));
    return v;
  };
  const TensorView dzxbcdt = take(d.inProjRows(), act), dy = take(d.dInner(), DType::F32),
                   dxbc = take(d.convDim(), DType::F32);
  // d(normed y) is dead once the norm's backward has run: the conv output's gradient (the wider of
  // the two) takes its place.
  const TensorView dyn = TensorView::contiguous(dxbc.data, DType::F32, {T, d.dInner()}, DeviceKind::CUDA, dev);
  BackwardCalls c;
  c.scratchOffset = at;
  const Mamba2LayerWeights& g = a.grads.weights;

  c.outProj = {f.yn, w.out_proj, a.dout, dyn, g.out_proj, g.out_proj_bias, {}};
  c.norm.forward = f.norm;
  c.norm.forward.out = TensorView{};
  c.norm.dout = dyn;
  c.norm.dx = dy;
  c.norm.dz = mirror(f.norm.z, f.zxbcdt, dzxbcdt.data, act);
  c.norm.dweight = g.norm_weight;

  SsdBackwardArgs& q = c.ssd;
  q.forward = f.ssd;
  q.dout = mirror(f.ssd.out, f.y, dy.data, DType::F32);
  q.dx = mirror(f.ssd.x, f.xbc, dxbc.data, DType::F32);
  q.dB = mirror(f.ssd.B, f.xbc, dxbc.data, DType::F32);
  q.dC = mirror(f.ssd.C, f.xbc, dxbc.data, DType::F32);
  q.ddt = mirror(f.ssd.dt, f.zxbcdt, dzxbcdt.data, act);
  q.dA = g.A;
  q.dD = g.D;
  q.ddt_bias = g.dt_bias;
  q.dfinal_states = a.dfinal_states.ssm_state;
  if (!q.dfinal_states.defined()) q.forward.final_state_indices = TensorView{};
  q.dinitial_states = a.grads.initial_states.ssm_state;
  // The backward maps the final states' gradients by the forward's final slots; it writes no state.
  q.forward.final_states = TensorView{};

  CausalConv1dBackwardArgs& v = c.conv;
  const CausalConv1dArgs& cf = f.conv;
  v.x = cf.x;
  v.weight = cf.weight;
  v.bias = cf.bias;
  v.dout = mirror(cf.out, f.xbc, dxbc.data, DType::F32);
  v.layout = cf.layout;
  v.silu = cf.silu;
  v.cu_seqlens = cf.cu_seqlens;
  v.initial_states = cf.initial_states;
  v.initial_state_indices = cf.initial_state_indices;
  v.dfinal_states = a.dfinal_states.conv_state;
  if (v.dfinal_states.defined()) v.final_state_indices = cf.final_state_indices;
  v.dx = mirror(cf.x, f.zxbcdt, dzxbcdt.data, act);
  v.dweight = g.conv_weight;
  v.dbias = g.conv_bias;
  v.dinitial_states = a.grads.initial_states.conv_state;

  c.inProj = {a.forward.hidden, w.in_proj, dzxbcdt, a.grads.dhidden, g.in_proj, g.in_proj_bias, {}};
  return c;
}

// The ops' workspaces, one region they share (they run one after another): its size in floats.
int64_t scratchFloats(const BackwardCalls& c, const detail::Mamba2BackwardHooks& hooks) {
  const int64_t ssd = hooks.ssdWorkspaceFloats ? hooks.ssdWorkspaceFloats(c.ssd) : ssd_backward_workspace_size(c.ssd);
  return std::max({linear_backward_workspace_size(c.outProj), gated_rms_norm_backward_workspace_size(c.norm), ssd,
                   causal_conv1d_backward_workspace_size(c.conv), linear_backward_workspace_size(c.inProj)});
}

// The backward's own arguments (the forward's are the prefill's check): dout, dhidden, and a
// gradient exactly for each weight given.
void checkBackward(const Mamba2LayerBackwardArgs& a, int64_t T, const Mamba2Dims& d, const Mamba2LayerWeights& w) {
  detail::Checker c(kOp, DeviceKind::CUDA);
  c.setDeviceId(a.forward.hidden.deviceId, "forward.hidden");
  const detail::Dim th[] = {{T, "tokens"}, {d.hidden, "hidden"}};
  const unsigned act = detail::dtypeBit(a.forward.hidden.dtype);
  c.required("dout", a.dout);
  c.tensor("dout", a.dout, th, 2, act, false);
  c.required("grads.dhidden", a.grads.dhidden);
  c.tensor("grads.dhidden", a.grads.dhidden, th, 2, act, false);
  const auto weights = detail::mamba2WeightFields(w);
  const auto grads = detail::mamba2WeightFields(a.grads.weights);
  for (size_t k = 0; k < weights.size(); ++k)
    if (weights[k].second->defined() != grads[k].second->defined())
      c.fail(std::string("grads.weights.") + weights[k].first + " is " +
             (grads[k].second->defined() ? "given" : "absent") + ", expected it exactly when weights." +
             weights[k].first + " is given");
}

int64_t layout(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
               const Mamba2LayerBackwardArgs& a, const detail::Mamba2BackwardHooks& hooks, Mamba2PrefillCalls& f,
               BackwardCalls& c) {
  f = detail::mamba2PrefillCalls(kOp, d, w, s, a.forward);
  checkBackward(a, f.tokens, d, w);
  c = backwardCalls(d, w, a, f);
  c.bytes = c.scratchOffset + scratchFloats(c, hooks) * 4;
  return (c.bytes + 3) / 4;
}

TensorView scratch(const Mamba2LayerBackwardArgs& a, const BackwardCalls& c) {
  return TensorView::contiguous(static_cast<char*>(a.workspace.data) + c.scratchOffset, DType::F32,
                                {(c.bytes - c.scratchOffset) / 4}, DeviceKind::CUDA, a.workspace.deviceId);
}

}  // namespace

int64_t detail::mamba2LayerBackwardWorkspaceSize(const Mamba2Dims& d, const Mamba2LayerWeights& w,
                                                 const Mamba2LayerState& s, const Mamba2LayerBackwardArgs& a,
                                                 const Mamba2BackwardHooks& hooks) {
  Mamba2PrefillCalls f;
  BackwardCalls c;
  return layout(d, w, s, a, hooks, f, c);
}

void detail::mamba2LayerBackward(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                                 const Mamba2LayerBackwardArgs& a, Stream stream, const Mamba2BackwardHooks& hooks) {
  Mamba2PrefillCalls f;
  BackwardCalls c;
  const int64_t need = layout(d, w, s, a, hooks, f, c);
  detail::checkWorkspace(kOp, a.forward.workspace, a.forward.hidden, "forward.hidden", f.workspaceFloats,
                         "mamba2_layer_workspace_size (the prefill's, holding its intermediates)");
  detail::checkWorkspace(kOp, a.workspace, a.forward.hidden, "forward.hidden", need,
                         "mamba2_layer_backward_workspace_size");
  if (f.tokens == 0) return;
  const TensorView ws = scratch(a, c);
  c.outProj.workspace = c.norm.workspace = c.ssd.workspace = c.conv.workspace = c.inProj.workspace = ws;
  linear_backward(c.outProj, stream);
  gated_rms_norm_backward(c.norm, stream);
  if (hooks.ssd)
    hooks.ssd(c.ssd);
  else
    ssd_backward(c.ssd, stream);
  if (hooks.conv)
    hooks.conv(c.conv);
  else
    causal_conv1d_backward(c.conv, stream);
  linear_backward(c.inProj, stream);
}

int64_t mamba2_layer_backward_workspace_size(const Mamba2Dims& d, const Mamba2LayerWeights& w,
                                             const Mamba2LayerState& s, const Mamba2LayerBackwardArgs& a) {
  return detail::mamba2LayerBackwardWorkspaceSize(d, w, s, a, {});
}

void mamba2_layer_backward(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                           const Mamba2LayerBackwardArgs& a, Stream stream) {
  detail::mamba2LayerBackward(d, w, s, a, stream, {});
}

}  // namespace ssmjit

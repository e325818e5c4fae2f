// The Mamba-2 mixer layer (mamba2.h): the ops in order, on views of in_proj's output, with the
// intermediates carved from the caller's workspace. The ops check their own arguments; the
// layer checks what only it knows (hidden, out, the weights' shapes against the dims), so an error
// names the layer's argument rather than an inner op's.
#include <algorithm>
#include <cstdint>
#include <string>

#include "runtime/OpSpecializations.h"
#include "runtime/model/Mamba2Kernels.h"
#include "runtime/model/Mamba2LayerHooks.h"
#include "runtime/ops/ArgCheck.h"
#include "runtime/ops/RmsNormSpec.h"
#include "ssmjit/mamba2.h"

namespace ssmjit {
namespace {

using detail::Checker;
using detail::Dim;

constexpr int64_t kAlignBytes = 256;

int64_t alignUp(int64_t v) { return (v + kAlignBytes - 1) / kAlignBytes * kAlignBytes; }

// A view of `shape` with `strides` at element `offset` of `base` (same dtype and device).
TensorView viewOf(const TensorView& base, int64_t offset, std::initializer_list<int64_t> shape,
                  std::initializer_list<int64_t> strides) {
  TensorView v = base;
  v.data = static_cast<char*>(base.data) + offset * dtypeBytes(base.dtype);
  v.ndim = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t s : shape) v.shape[i++] = s;
  i = 0;
  for (int64_t s : strides) v.strides[i++] = s;
  return v;
}

// The layer's intermediates in the workspace, in order, each 256-byte aligned:
// zxbcdt (T, inProjRows) | xBC after the conv (T, convDim) | y (T, dInner) | normed y (T, dInner)
// | the SSD's float32 workspace (prefill) | the GEMMs' workspace.
struct Plan {
  TensorView zxbcdt, xbc, y, yn;
  int64_t ssdOffset = 0;     // bytes
  int64_t linearOffset = 0;  // bytes
  int64_t bytes = 0;
};

Plan carve(const Mamba2Dims& d, DType act, int64_t T, void* base, int deviceId) {
  Plan p;
  int64_t at = 0;
  auto take = [&](int64_t cols) {
    TensorView v = TensorView::contiguous(static_cast<char*>(base) + at, act, {T, cols}, DeviceKind::CUDA, deviceId);
    at += alignUp(T * cols * dtypeBytes(act));
    return v;
  };
  p.zxbcdt = take(d.inProjRows());
  p.xbc = take(d.convDim());
  p.y = take(d.dInner());
  p.yn = take(d.dInner());
  p.ssdOffset = at;
  return p;
}

struct Views {
  TensorView z, xbcIn, dt;  // in zxbcdt
  TensorView x, B, C;       // in xbc
};

Views splitViews(const Mamba2Dims& d, const Plan& p, int64_t T) {
  const int64_t R = d.inProjRows(), Dc = d.convDim(), Di = d.dInner(), GN = d.groups * d.state;
  Views v;
  v.z = viewOf(p.zxbcdt, 0, {1, T, d.heads, d.head_dim}, {T * R, R, d.head_dim, 1});
  v.xbcIn = viewOf(p.zxbcdt, Di, {1, T, Dc}, {T * R, R, 1});
  v.dt = viewOf(p.zxbcdt, Di + Dc, {1, T, d.heads}, {T * R, R, 1});
  v.x = viewOf(p.xbc, 0, {1, T, d.heads, d.head_dim}, {T * Dc, Dc, d.head_dim, 1});
  v.B = viewOf(p.xbc, Di, {1, T, d.groups, d.state}, {T * Dc, Dc, d.state, 1});
  v.C = viewOf(p.xbc, Di + GN, {1, T, d.groups, d.state}, {T * Dc, Dc, d.state, 1});
  return v;
}

// Checks the layer's own arguments; returns T.
int64_t checkLayer(const char* op, const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerArgs& a) {
  Checker c(op, DeviceKind::CUDA);
  if (d.hidden < 1 || d.heads < 1 || d.head_dim < 1 || d.state < 1 || d.groups < 1 || d.heads % d.groups != 0)
    c.fail("dims (hidden " + std::to_string(d.hidden) + ", heads " + std::to_string(d.heads) + ", head_dim " +
           std::to_string(d.head_dim) + ", state " + std::to_string(d.state) + ", groups " + std::to_string(d.groups) +
           ") are not a Mamba-2 layer: every size must be >= 1 and heads a multiple of groups");
  c.required("hidden", a.hidden);
  c.setDeviceId(a.hidden.deviceId, "hidden");
  const Dim hd[] = {{a.hidden.ndim == 2 ? a.hidden.shape[0] : -1, "tokens"}, {d.hidden, "hidden"}};
  c.rank("hidden", a.hidden, hd, 2);
  const int64_t T = a.hidden.shape[0];
  const Dim th[] = {{T, "tokens"}, {d.hidden, "hidden"}};
  const unsigned act = detail::dtypeBit(a.hidden.dtype);
  c.tensor("hidden", a.hidden, th, 2, detail::kFloat16Or32, false);
  c.required("out", a.out);
  c.tensor("out", a.out, th, 2, act, false);
  if (a.out.data == a.hidden.data) c.fail("out aliases hidden, expected a separate buffer");
  c.required("state_indices", a.state_indices);
  const Dim ip[] = {{d.inProjRows(), "in_proj rows"}, {d.hidden, "hidden"}};
  c.required("weights.in_proj", w.in_proj);
  c.tensor("weights.in_proj", w.in_proj, ip, 2, act, false);
  const Dim op2[] = {{d.hidden, "hidden"}, {d.dInner(), "d_inner"}};
  c.required("weights.out_proj", w.out_proj);
  c.tensor("weights.out_proj", w.out_proj, op2, 2, act, false);
  const Dim nw[] = {{d.dInner(), "d_inner"}};
  c.required("weights.norm_weight", w.norm_weight);
  c.tensor("weights.norm_weight", w.norm_weight, nw, 1, act | detail::kF32Only, false);
  return T;
}


// The GEMM calls go through these two, the one place that knows linear's argument names.
LinearArgs linearCall(const TensorView& x, const TensorView& weight, const TensorView& bias, const TensorView& y) {
  LinearArgs l;
  l.x = x;
  l.weight = weight;
  l.bias = bias;
  l.y = y;
  return l;
}
int64_t linearWorkspaceFloats(const LinearArgs& l) { return linear_workspace_size(l); }

// The views a token range shares between prefill and decode: the norm and the two GEMMs.
GatedRmsNormArgs normCall(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Plan& p, int64_t T) {
  GatedRmsNormArgs n;
  n.x = p.y;
  n.z = viewOf(p.zxbcdt, 0, {T, d.dInner()}, {d.inProjRows(), 1});
  n.weight = w.norm_weight;
  n.out = p.yn;
  n.group_size = d.dInner() / d.groups;
  n.norm_before_gate = d.norm_before_gate;
  n.eps = d.norm_eps;
  return n;
}

struct PrefillCalls {
  LinearArgs inProj, outProj;
  CausalConv1dArgs conv;
  SsdArgs ssd;
  GatedRmsNormArgs norm;
};

PrefillCalls prefillCalls(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                          const Mamba2LayerArgs& a, const Plan& p, int64_t T) {
  const Views v = splitViews(d, p, T);
  const int64_t Dc = d.convDim();
  PrefillCalls c;
  c.inProj = linearCall(a.hidden, w.in_proj, w.in_proj_bias, p.zxbcdt);
  c.conv.x = v.xbcIn;
  c.conv.weight = w.conv_weight;
  c.conv.bias = w.conv_bias;
  c.conv.out = viewOf(p.xbc, 0, {1, T, Dc}, {T * Dc, Dc, 1});
  c.conv.layout = ConvLayout::ChannelLast;
  c.conv.silu = true;
  c.conv.cu_seqlens = a.cu_seqlens;
  if (a.initial_state_indices.defined()) {
    c.conv.initial_states = s.conv_state;
    c.conv.initial_state_indices = a.initial_state_indices;
  }
  c.conv.final_states = s.conv_state;
  c.conv.final_state_indices = a.state_indices;

  SsdArgs& q = c.ssd;
  q.x = v.x;
  q.dt = v.dt;
  q.A = w.A;
  q.B = v.B;
  q.C = v.C;
  q.D = w.D;
  q.dt_bias = w.dt_bias;
  q.dt_softplus = true;
  q.dt_min = d.dt_min;
  q.dt_max = d.dt_max;
  q.chunk_size = d.chunk_size;
  q.out = viewOf(p.y, 0, {1, T, d.heads, d.head_dim}, {T * d.dInner(), d.dInner(), d.head_dim, 1});
  q.cu_seqlens = a.cu_seqlens;
  if (a.initial_state_indices.defined()) {
    q.initial_states = s.ssm_state;
    q.initial_state_indices = a.initial_state_indices;
  }
  q.final_states = s.ssm_state;
  q.final_state_indices = a.state_indices;

  c.norm = normCall(d, w, p, T);
  c.outProj = linearCall(p.yn, w.out_proj, w.out_proj_bias, a.out);
  return c;
}

struct DecodeCalls {
  LinearArgs inProj, outProj;
  CausalConv1dUpdateArgs conv;
  SelectiveStateUpdateArgs ssu;
  GatedRmsNormArgs norm;
};

DecodeCalls decodeCalls(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                        const Mamba2LayerArgs& a, const Plan& p, int64_t B) {
  const int64_t R = d.inProjRows(), Dc = d.convDim(), Di = d.dInner(), GN = d.groups * d.state;
  DecodeCalls c;
  c.inProj = linearCall(a.hidden, w.in_proj, w.in_proj_bias, p.zxbcdt);
  c.conv.conv_state = s.conv_state;
  c.conv.x = viewOf(p.zxbcdt, Di, {B, 1, Dc}, {R, R, 1});
  c.conv.weight = w.conv_weight;
  c.conv.bias = w.conv_bias;
  c.conv.state_indices = a.state_indices;
  c.conv.out = viewOf(p.xbc, 0, {B, 1, Dc}, {Dc, Dc, 1});
  c.conv.silu = true;

  SelectiveStateUpdateArgs& u = c.ssu;
  u.state = s.ssm_state;
  u.x = viewOf(p.xbc, 0, {B, d.heads, d.head_dim}, {Dc, d.head_dim, 1});
  u.dt = viewOf(p.zxbcdt, Di + Dc, {B, d.heads}, {R, 1});
  u.A = w.A;
  u.B = viewOf(p.xbc, Di, {B, d.groups, d.state}, {Dc, d.state, 1});
  u.C = viewOf(p.xbc, Di + GN, {B, d.groups, d.state}, {Dc, d.state, 1});
  u.D = w.D;
  u.dt_bias = w.dt_bias;
  u.state_batch_indices = a.state_indices;
  u.out = viewOf(p.y, 0, {B, d.heads, d.head_dim}, {Di, d.head_dim, 1});
  u.dt_softplus = true;
  u.dt_min = d.dt_min;
  u.dt_max = d.dt_max;

  c.norm = normCall(d, w, p, B);
  c.outProj = linearCall(p.yn, w.out_proj, w.out_proj_bias, a.out);
  return c;
}

// The workspace layout of a call: the intermediates, then the SSD's and the GEMMs' workspaces.
// Without a workspace, sized against a stand-in base address that aliases no argument: the views
// are only checked, never dereferenced.
template <class Calls, class MakeCalls>
int64_t layoutFloats(const Mamba2Dims& d, const Mamba2LayerArgs& a, int64_t T, Plan& p, const MakeCalls& make,
                     int64_t (*ssdFloats)(const Calls&)) {
  void* base = a.workspace.defined() ? a.workspace.data : reinterpret_cast<void*>(uintptr_t{1} << 47);
  p = carve(d, a.hidden.dtype, T, base, a.hidden.deviceId);
  const Calls c = make(p);
  p.linearOffset = p.ssdOffset + alignUp(ssdFloats(c) * 4);
  const int64_t linearFloats = std::max(linearWorkspaceFloats(c.inProj), linearWorkspaceFloats(c.outProj));
  p.bytes = p.linearOffset + linearFloats * 4;
  return (p.bytes + 3) / 4;
}

int64_t prefillSsdFloats(const PrefillCalls& c) { return ssd_workspace_size(c.ssd); }
int64_t decodeSsdFloats(const DecodeCalls&) { return 0; }

TensorView floatsAt(const TensorView& ws, int64_t byteOffset, int64_t floats) {
  return TensorView::contiguous(static_cast<char*>(ws.data) + byteOffset, DType::F32, {floats}, DeviceKind::CUDA,
                                ws.deviceId);
}

void checkWorkspace(const char* op, const Mamba2LayerArgs& a, int64_t need) {
  detail::checkWorkspace(op, a.workspace, a.hidden, "hidden", need, "mamba2_layer_workspace_size");
}

// The workspace plan of a prefill or decode call of T tokens, in float32 elements.
int64_t prefillLayout(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                      const Mamba2LayerArgs& a, int64_t T, Plan& p) {
  return layoutFloats<PrefillCalls>(
      d, a, T, p, [&](const Plan& q) { return prefillCalls(d, w, s, a, q, T); }, prefillSsdFloats);
}
int64_t decodeLayout(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                     const Mamba2LayerArgs& a, int64_t T, Plan& p) {
  return layoutFloats<DecodeCalls>(
      d, a, T, p, [&](const Plan& q) { return decodeCalls(d, w, s, a, q, T); }, decodeSsdFloats);
}

constexpr const char* kPrefill = "mamba2_layer_prefill";
constexpr const char* kDecode = "mamba2_layer_decode";

}  // namespace

int64_t mamba2_layer_workspace_size(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                                    const Mamba2LayerArgs& a, bool prefill) {
  const int64_t T = checkLayer(prefill ? kPrefill : kDecode, d, w, a);
  Plan p;
  return prefill ? prefillLayout(d, w, s, a, T, p) : decodeLayout(d, w, s, a, T, p);
}

void mamba2_layer_prefill(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                          const Mamba2LayerArgs& a, Stream stream) {
  detail::mamba2LayerPrefill(d, w, s, a, stream, {});
}

void detail::mamba2LayerPrefill(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                                const Mamba2LayerArgs& a, Stream stream, const Mamba2PrefillHooks& hooks) {
  const int64_t T = checkLayer(kPrefill, d, w, a);
  Plan p;
  ssmjit::checkWorkspace(kPrefill, a, prefillLayout(d, w, s, a, T, p));
  if (T == 0) return;
  PrefillCalls c = prefillCalls(d, w, s, a, p, T);
  c.ssd.workspace = floatsAt(a.workspace, p.ssdOffset, (p.linearOffset - p.ssdOffset) / 4);
  const int64_t linFloats = (p.bytes - p.linearOffset) / 4;
  c.inProj.workspace = c.outProj.workspace = floatsAt(a.workspace, p.linearOffset, linFloats);
  linear(c.inProj, stream);
  if (hooks.beforeConv) hooks.beforeConv(c.conv, p.zxbcdt);
  causal_conv1d(c.conv, stream);
  if (hooks.beforeSsd) hooks.beforeSsd(c.ssd);
  ssd(c.ssd, stream);
  gated_rms_norm(c.norm, stream);
  linear(c.outProj, stream);
}

void mamba2_layer_decode(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                         const Mamba2LayerArgs& a, Stream stream) {
  const int64_t B = checkLayer(kDecode, d, w, a);
  Plan p;
  checkWorkspace(kDecode, a, decodeLayout(d, w, s, a, B, p));
  if (B == 0) return;
  DecodeCalls c = decodeCalls(d, w, s, a, p, B);
  c.inProj.workspace = c.outProj.workspace = floatsAt(a.workspace, p.linearOffset, (p.bytes - p.linearOffset) / 4);
  linear(c.inProj, stream);
  causal_conv1d_update(c.conv, stream);
  selective_state_update(c.ssu, stream);
  gated_rms_norm(c.norm, stream);
  linear(c.outProj, stream);
}

std::vector<Specialization> detail::mamba2LayerSpecializations(const Mamba2Dims& d, const Mamba2LayerWeights& w,
                                                               const Mamba2LayerState& s, const Mamba2LayerArgs& a,
                                                               bool prefill, const std::string& arch) {
  const int64_t T = checkLayer(prefill ? kPrefill : kDecode, d, w, a);
  Plan p;
  std::vector<Specialization> out;
  if (prefill) {
    prefillLayout(d, w, s, a, T, p);
    const PrefillCalls c = prefillCalls(d, w, s, a, p, T);
    out = opspec::conv(c.conv, arch);
    for (Specialization& sp : opspec::ssd(c.ssd, arch)) out.push_back(std::move(sp));
    out.push_back(detail::gatedRmsNormSpecialization(c.norm, arch));
  } else {
    decodeLayout(d, w, s, a, T, p);
    const DecodeCalls c = decodeCalls(d, w, s, a, p, T);
    out = {opspec::convUpdate(c.conv, arch), opspec::ssu(c.ssu, false, arch),
           detail::gatedRmsNormSpecialization(c.norm, arch)};
  }
  return out;
}

}  // namespace ssmjit

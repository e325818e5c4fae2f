// The Mamba-2 mixer layer (mamba2.h): the ops in order, on views of in_proj's output, with the
// intermediates carved from the caller's workspace. The ops check their own arguments; the
// layer checks what only it knows (hidden, out, the weights' shapes against the dims), so an error
// names the layer's argument rather than an inner op's.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>

#include "runtime/OpSpecializations.h"
#include "runtime/model/Mamba2Kernels.h"
#include "runtime/model/Mamba2LayerHooks.h"
#include "runtime/model/Mamba2PrefillCalls.h"
#include "runtime/ops/ArgCheck.h"
#include "runtime/ops/Mamba2DecodeStepCheck.h"
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

// in_proj, the gated norm and out_proj over `rows` tokens: the same in every mode.
template <class Calls>
void setProjections(Calls& c, const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerArgs& a, const Plan& p,
                    int64_t rows) {
  c.inProj = linearCall(a.hidden, w.in_proj, w.in_proj_bias, p.zxbcdt);
  c.norm = normCall(d, w, p, rows);
  c.outProj = linearCall(p.yn, w.out_proj, w.out_proj_bias, a.out);
}

// The SSM's weights and dt's softplus and clamp, named alike by the SSD, the state update and
// the decode step's mixer weights.
template <class Ssm>
void setSsmWeights(Ssm& q, const Mamba2Dims& d, const Mamba2LayerWeights& w) {
  q.A = w.A;
  q.D = w.D;
  q.dt_bias = w.dt_bias;
  q.dt_softplus = true;
  q.dt_min = d.dt_min;
  q.dt_max = d.dt_max;
}

// A layer's calls: in_proj, the conv, the scan (ssd over a prefill row, the state update for a
// decode step), the gated norm and out_proj.
template <class Conv, class Scan>
struct LayerCalls {
  LinearArgs inProj, outProj;
  Conv conv;
  Scan scan;
  GatedRmsNormArgs norm;
};
using PrefillCalls = LayerCalls<CausalConv1dArgs, SsdArgs>;
using DecodeCalls = LayerCalls<CausalConv1dUpdateArgs, SelectiveStateUpdateArgs>;

PrefillCalls prefillCalls(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                          const Mamba2LayerArgs& a, const Plan& p, int64_t T) {
  const Views v = splitViews(d, p, T);
  const int64_t Dc = d.convDim();
  PrefillCalls c;
  setProjections(c, d, w, a, p, T);
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

  SsdArgs& q = c.scan;
  q.x = v.x;
  q.dt = v.dt;
  q.B = v.B;
  q.C = v.C;
  setSsmWeights(q, d, w);
  q.chunk_size = d.chunk_size;
  q.out = viewOf(p.y, 0, {1, T, d.heads, d.head_dim}, {T * d.dInner(), d.dInner(), d.head_dim, 1});
  q.cu_seqlens = a.cu_seqlens;
  if (a.initial_state_indices.defined()) {
    q.initial_states = s.ssm_state;
    q.initial_state_indices = a.initial_state_indices;
  }
  q.final_states = s.ssm_state;
  q.final_state_indices = a.state_indices;
  return c;
}

DecodeCalls decodeCalls(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                        const Mamba2LayerArgs& a, const Plan& p, int64_t B) {
  const int64_t R = d.inProjRows(), Dc = d.convDim(), Di = d.dInner(), GN = d.groups * d.state;
  DecodeCalls c;
  setProjections(c, d, w, a, p, B);
  c.conv.conv_state = s.conv_state;
  c.conv.x = viewOf(p.zxbcdt, Di, {B, 1, Dc}, {R, R, 1});
  c.conv.weight = w.conv_weight;
  c.conv.bias = w.conv_bias;
  c.conv.state_indices = a.state_indices;
  c.conv.out = viewOf(p.xbc, 0, {B, 1, Dc}, {Dc, Dc, 1});
  c.conv.silu = true;

  SelectiveStateUpdateArgs& u = c.scan;
  u.state = s.ssm_state;
  u.x = viewOf(p.xbc, 0, {B, d.heads, d.head_dim}, {Dc, d.head_dim, 1});
  u.dt = viewOf(p.zxbcdt, Di + Dc, {B, d.heads}, {R, 1});
  u.B = viewOf(p.xbc, Di, {B, d.groups, d.state}, {Dc, d.state, 1});
  u.C = viewOf(p.xbc, Di + GN, {B, d.groups, d.state}, {Dc, d.state, 1});
  setSsmWeights(u, d, w);
  u.state_batch_indices = a.state_indices;
  u.out = viewOf(p.y, 0, {B, d.heads, d.head_dim}, {Di, d.head_dim, 1});
  return c;
}

// A verify: B sequences of L tokens, rows b*L + i; the SSM part is one mamba2_decode_step.
struct VerifyCalls {
  LinearArgs inProj, outProj;
  Mamba2DecodeState state;
  Mamba2MixerWeights mixer;
  Mamba2DecodeStepArgs step;
  GatedRmsNormArgs norm;
};

VerifyCalls verifyCalls(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                        const Mamba2LayerArgs& a, const Plan& p, int64_t T) {
  const int64_t R = d.inProjRows(), Dc = d.convDim(), Di = d.dInner(), H = d.heads, P = d.head_dim;
  const int64_t L = a.tokens_per_sequence, B = T / L;
  VerifyCalls c;
  setProjections(c, d, w, a, p, T);
  c.state = detail::mamba2DecodeState(s);
  c.mixer = detail::mamba2MixerWeights(d, w);
  Mamba2DecodeStepArgs& st = c.step;
  st.state_indices = a.state_indices;
  st.num_accepted = a.num_accepted;
  st.xBC = viewOf(p.zxbcdt, Di, {B, L, Dc}, {L * R, R, 1});
  st.dt = viewOf(p.zxbcdt, Di + Dc, {B, L, H}, {L * R, R, 1});
  st.y = viewOf(p.y, 0, {B, L, H, P}, {L * Di, Di, P, 1});
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

int64_t prefillSsdFloats(const PrefillCalls& c) { return ssd_workspace_size(c.scan); }
int64_t decodeSsdFloats(const DecodeCalls&) { return 0; }
int64_t verifySsdFloats(const VerifyCalls&) { return 0; }

TensorView floatsAt(const TensorView& ws, int64_t byteOffset, int64_t floats) {
  return TensorView::contiguous(static_cast<char*>(ws.data) + byteOffset, DType::F32, {floats}, DeviceKind::CUDA,
                                ws.deviceId);
}

void checkWorkspace(const char* op, const Mamba2LayerArgs& a, int64_t need) {
  detail::checkWorkspace(op, a.workspace, a.hidden, "hidden", need, "mamba2_layer_workspace_size");
}

// Runs a layer's calls in every mode's order: in_proj, `mixer` (the conv and the scan), the gated
// norm, out_proj (through `outProj` when it is set). The two GEMMs run one after the other, so
// they share the GEMMs' workspace.
template <class Calls, class Mixer>
void runLayer(Calls& c, const Mamba2LayerArgs& a, const Plan& p, Stream stream, Mixer mixer,
              const std::function<void(const LinearArgs&)>& outProj = {}) {
  c.inProj.workspace = c.outProj.workspace = floatsAt(a.workspace, p.linearOffset, (p.bytes - p.linearOffset) / 4);
  linear(c.inProj, stream);
  mixer();
  gated_rms_norm(c.norm, stream);
  if (outProj)
    outProj(c.outProj);
  else
    linear(c.outProj, stream);
}

// The workspace plan of a prefill, decode or verify call of T tokens, in float32 elements.
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
constexpr const char* kVerify = "mamba2_layer_verify";

// The decode step's arguments (states, caches, counts) are checked here too, so that a bad one
// throws before the first GEMM is launched.
int64_t verifyLayout(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                     const Mamba2LayerArgs& a, int64_t T, Plan& p) {
  return layoutFloats<VerifyCalls>(
      d, a, T, p,
      [&](const Plan& q) {
        VerifyCalls c = verifyCalls(d, w, s, a, q, T);
        detail::checkDecodeStepArgs(c.state, c.mixer, c.step, DeviceKind::CUDA, kVerify);
        return c;
      },
      verifySsdFloats);
}

const char* opName(Mamba2LayerMode mode) {
  switch (mode) {
    case Mamba2LayerMode::Prefill: return kPrefill;
    case Mamba2LayerMode::Decode: return kDecode;
    case Mamba2LayerMode::Verify: return kVerify;
  }
  throw Error(Error::Kind::InvalidArgument, "mamba2_layer_workspace_size: mode is " +
                                                std::to_string(static_cast<int>(mode)) +
                                                ", expected Prefill, Decode or Verify");
}

// checkLayer, and for a verify its token count: T rows in sequences of tokens_per_sequence.
int64_t checkCall(Mamba2LayerMode mode, const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerArgs& a) {
  const char* op = opName(mode);
  const int64_t T = checkLayer(op, d, w, a);
  if (mode != Mamba2LayerMode::Verify) return T;
  const int64_t L = a.tokens_per_sequence;
  Checker c(op, DeviceKind::CUDA);
  if (L < 1 || L > kMaxTokens || T % L != 0)
    c.fail("tokens_per_sequence is " + std::to_string(L) + ", expected 1 <= L <= kMaxTokens (" +
           std::to_string(kMaxTokens) + ") dividing the " + std::to_string(T) + " rows of hidden");
  const Dim nb[] = {{T / L, "sequences"}};
  c.required("num_accepted", a.num_accepted);
  c.tensor("num_accepted", a.num_accepted, nb, 1, detail::kIndexTypes, false);
  return T;
}

int64_t layoutFor(Mamba2LayerMode mode, const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                  const Mamba2LayerArgs& a, int64_t T, Plan& p) {
  switch (mode) {
    case Mamba2LayerMode::Prefill: return prefillLayout(d, w, s, a, T, p);
    case Mamba2LayerMode::Decode: return decodeLayout(d, w, s, a, T, p);
    case Mamba2LayerMode::Verify: return verifyLayout(d, w, s, a, T, p);
  }
  return 0;
}

}  // namespace

int64_t mamba2_layer_workspace_size(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                                    const Mamba2LayerArgs& a, Mamba2LayerMode mode) {
  const int64_t T = checkCall(mode, d, w, a);
  Plan p;
  return layoutFor(mode, d, w, s, a, T, p);
}

detail::Mamba2PrefillCalls detail::mamba2PrefillCalls(const char* op, const Mamba2Dims& d, const Mamba2LayerWeights& w,
                                                      const Mamba2LayerState& s, const Mamba2LayerArgs& a) {
  const int64_t T = checkLayer(op, d, w, a);
  Plan p;
  Mamba2PrefillCalls out;
  out.tokens = T;
  out.workspaceFloats = prefillLayout(d, w, s, a, T, p);
  const PrefillCalls c = prefillCalls(d, w, s, a, p, T);
  out.inProj = c.inProj;
  out.outProj = c.outProj;
  out.conv = c.conv;
  out.ssd = c.scan;
  out.norm = c.norm;
  out.zxbcdt = p.zxbcdt;
  out.xbc = p.xbc;
  out.y = p.y;
  out.yn = p.yn;
  return out;
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
  c.scan.workspace = floatsAt(a.workspace, p.ssdOffset, (p.linearOffset - p.ssdOffset) / 4);
  runLayer(
      c, a, p, stream,
      [&] {
        if (hooks.beforeConv) hooks.beforeConv(c.conv, p.zxbcdt);
        causal_conv1d(c.conv, stream);
        if (hooks.ssd)
          hooks.ssd(c.scan);
        else
          ssd(c.scan, stream);
      },
      hooks.outProj);
}

void mamba2_layer_decode(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                         const Mamba2LayerArgs& a, Stream stream) {
  const int64_t B = checkLayer(kDecode, d, w, a);
  Plan p;
  checkWorkspace(kDecode, a, decodeLayout(d, w, s, a, B, p));
  if (B == 0) return;
  DecodeCalls c = decodeCalls(d, w, s, a, p, B);
  runLayer(c, a, p, stream, [&] {
    causal_conv1d_update(c.conv, stream);
    selective_state_update(c.scan, stream);
  });
}

void mamba2_layer_verify(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                         const Mamba2LayerArgs& a, Stream stream) {
  const int64_t T = checkCall(Mamba2LayerMode::Verify, d, w, a);
  Plan p;
  checkWorkspace(kVerify, a, verifyLayout(d, w, s, a, T, p));
  if (T == 0) return;
  VerifyCalls c = verifyCalls(d, w, s, a, p, T);
  runLayer(c, a, p, stream, [&] { mamba2_decode_step(c.state, c.mixer, c.step, stream); });
}

void mamba2_layer_commit(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                         const TensorView& state_indices, const TensorView& num_accepted, Stream stream) {
  Mamba2DecodeStepArgs st;
  st.state_indices = state_indices;
  st.num_accepted = num_accepted;
  st.parts = DecodeStepParts::ReplayOnly;
  mamba2_decode_step(detail::mamba2DecodeState(s), detail::mamba2MixerWeights(d, w), st, stream);
}

Mamba2DecodeState detail::mamba2DecodeState(const Mamba2LayerState& s) {
  Mamba2DecodeState st;
  st.conv_state = s.conv_state;
  st.ssm_state = s.ssm_state;
  st.xbc_cache = s.xbc_cache;
  st.dt_cache = s.dt_cache;
  st.cached_tokens = s.cached_tokens;
  st.arrivals = s.arrivals;
  return st;
}

Mamba2MixerWeights detail::mamba2MixerWeights(const Mamba2Dims& d, const Mamba2LayerWeights& w) {
  Mamba2MixerWeights m;
  m.conv_weight = w.conv_weight;
  m.conv_bias = w.conv_bias;
  setSsmWeights(m, d, w);
  return m;
}

std::vector<Specialization> detail::mamba2LayerSpecializations(const Mamba2Dims& d, const Mamba2LayerWeights& w,
                                                               const Mamba2LayerState& s, const Mamba2LayerArgs& a,
                                                               Mamba2LayerMode mode, const std::string& arch) {
  const int64_t T = checkCall(mode, d, w, a);
  Plan p;
  std::vector<Specialization> out;
  if (mode == Mamba2LayerMode::Verify) {
    verifyLayout(d, w, s, a, T, p);
    const VerifyCalls c = verifyCalls(d, w, s, a, p, T);
    out = {opspec::decodeStep(c.state, c.mixer, c.step, arch), detail::gatedRmsNormSpecialization(c.norm, arch)};
  } else if (mode == Mamba2LayerMode::Prefill) {
    prefillLayout(d, w, s, a, T, p);
    const PrefillCalls c = prefillCalls(d, w, s, a, p, T);
    out = opspec::conv(c.conv, arch);
    for (Specialization& sp : opspec::ssd(c.scan, arch)) out.push_back(std::move(sp));
    out.push_back(detail::gatedRmsNormSpecialization(c.norm, arch));
  } else {
    decodeLayout(d, w, s, a, T, p);
    const DecodeCalls c = decodeCalls(d, w, s, a, p, T);
    out = {opspec::convUpdate(c.conv, arch), opspec::ssu(c.scan, false, arch),
           detail::gatedRmsNormSpecialization(c.norm, arch)};
  }
  return out;
}

}  // namespace ssmjit

#include "tools/DecodeStepCall.h"

#include "runtime/OpSpecializations.h"
#include "ssmjit/error.h"
#include "tools/ToolSupport.h"

namespace ssmjit::tool {
namespace {

const char* partsName(DecodeStepParts p) {
  return p == DecodeStepParts::ReplayOnly ? "replay" : p == DecodeStepParts::VerifyOnly ? "verify" : "fused";
}

}  // namespace

std::string decodeStepCallLabel(const DecodeStepCall& c) {
  const std::string ring = c.ringDepth > 0 ? strf(" R=%lld", static_cast<long long>(c.ringDepth)) : "";
  std::string l = strf("decode-step H%lld P%lld N%lld G%lld W%lld b=%lld L=%lld Lc=%lld%s %s state %s drafts %s",
                       static_cast<long long>(c.H), static_cast<long long>(c.P), static_cast<long long>(c.N),
                       static_cast<long long>(c.G), static_cast<long long>(c.W), static_cast<long long>(c.batch),
                       static_cast<long long>(c.L), static_cast<long long>(c.cacheTokens), ring.c_str(),
                       partsName(c.parts), dtypeName(c.state), dtypeName(c.drafts));
  if (!c.convBias) l += " no-conv-bias";
  l += absentInputsLabel(c.hasD, c.hasZ, c.dtBias, c.softplus);
  if (!c.stateIndices) l += " no-state-indices";
  return l;
}

Specialization decodeStepCallSpecialization(const DecodeStepCall& c) {
  const int64_t B = c.batch, S = c.batch, Dc = c.H * c.P + 2 * c.G * c.N, Lc = c.cacheTokens;
  Mamba2DecodeState s;
  s.conv_state = fakeDeviceView(1, c.drafts, {S, Dc, c.W - 1});
  s.ssm_state = fakeDeviceView(2, c.state, {S, c.H, c.P, c.N});
  s.xbc_cache = fakeDeviceView(3, c.drafts, {S, Lc, Dc});
  s.dt_cache = fakeDeviceView(4, c.drafts, {S, Lc, c.H});
  s.cached_tokens = fakeDeviceView(5, DType::I32, {S});
  s.arrivals = fakeDeviceView(6, DType::I32, {S});
  if (c.ringDepth > 0) {
    s.xbc_ring = fakeDeviceView(18, c.drafts, {S, c.ringDepth, Dc});
    s.dt_ring = fakeDeviceView(19, c.drafts, {S, c.ringDepth, c.H});
    s.ring_tokens = fakeDeviceView(20, DType::I32, {S});
  }
  Mamba2MixerWeights w;
  w.conv_weight = fakeDeviceView(7, DType::F32, {Dc, c.W});
  if (c.convBias) w.conv_bias = fakeDeviceView(8, DType::F32, {Dc});
  w.A = fakeDeviceView(9, DType::F32, {c.H});
  if (c.hasD) w.D = fakeDeviceView(10, DType::F32, {c.H});
  if (c.dtBias) w.dt_bias = fakeDeviceView(11, DType::F32, {c.H});
  w.dt_softplus = c.softplus;
  Mamba2DecodeStepArgs a;
  a.parts = c.parts;
  if (c.stateIndices) a.state_indices = fakeDeviceView(12, DType::I32, {B});
  if (c.parts != DecodeStepParts::VerifyOnly) a.num_accepted = fakeDeviceView(13, DType::I32, {B});
  if (c.parts != DecodeStepParts::ReplayOnly) {
    a.xBC = fakeDeviceView(14, c.drafts, {B, c.L, Dc});
    a.dt = fakeDeviceView(15, c.drafts, {B, c.L, c.H});
    a.y = fakeDeviceView(16, c.drafts, {B, c.L, c.H, c.P});
    if (c.hasZ) a.z = fakeDeviceView(17, c.drafts, {B, c.L, c.H, c.P});
  }
  return invalidCallIsUsageError("decode-step", [&] { return opspec::decodeStep(s, w, a, c.arch); });
}

}  // namespace ssmjit::tool

// mamba2_decode_step: the arguments are checked once, here at the edge (Mamba2DecodeStepCheck),
// then bound to the generic kernel (kernels_dsl/decode/Mamba2DecodeStep.h), specialised and launched on
// the caller's stream: one launch per step, whatever the parts. A call with a ring runs the
// deferred-commit twin of the kernel (kDecodeStepDeferred: the same arguments, then the ring's).
#include <cuda.h>

#include "kernels_dsl/decode/Mamba2DecodeStep.h"
#include "runtime/DeviceStatus.h"
#include "runtime/ops/HeadBinding.h"
#include "runtime/ops/KernelCall.h"
#include "runtime/ops/Mamba2DecodeStepCheck.h"
#include "runtime/ops/Mamba2DecodeStepSpec.h"
#include "ssmjit/ops.h"

namespace ssmjit {
namespace {

using detail::KernelCall;
using kernels::kDecodeStep;
using kernels::kDecodeStepDeferred;

template <const dsl::Signature& S>
void bind(KernelCall& c, const Mamba2DecodeState& s, const Mamba2MixerWeights& w, const Mamba2DecodeStepArgs& a,
          const detail::DecodeStepDims& d, void* err) {
  // One token: the time strides are never stepped, 0 binds them out of the code.
  const int t = d.L > 1 ? 1 : detail::kNoAxis;
  c.tensor(S.tensor("conv_state"), s.conv_state);
  c.tensor(S.tensor("ssm_state"), s.ssm_state);
  c.tensor(S.tensor("xbc_cache"), s.xbc_cache);
  c.tensor(S.tensor("dt_cache"), s.dt_cache);
  c.tensor(S.tensor("conv_w"), w.conv_weight);
  c.tensor(S.tensor("conv_b"), w.conv_bias);
  c.tensor(S.tensor("A"), w.A);
  c.tensor(S.tensor("D"), w.D);
  c.tensor(S.tensor("dt_bias"), w.dt_bias);
  c.tensor(S.tensor("xbc"), a.xBC, {0, t, 2});
  c.tensor(S.tensor("dt"), a.dt, {0, t, 2});
  c.tensor(S.tensor("z"), a.z, {0, t, 2, 3});
  c.tensor(S.tensor("y"), a.y, {0, t, 2, 3});
  c.tensor(S.tensor("state_idx"), a.state_indices);
  c.tensor(S.tensor("accepted"), a.num_accepted);
  c.tensor(S.tensor("cached"), s.cached_tokens);
  c.tensor(S.tensor("arrivals"), s.arrivals);
  c.pointer(S.tensor("err"), err, DType::I64);
  detail::bindHeads<S>(c, d, {w.D, w.dt_bias, a.z, a.state_indices, w.dt_softplus, w.dt_min, w.dt_max});
  c.size(S.size("Lc"), d.Lc);
  c.size(S.size("hpp"), 1);  // set at launch (kernels::decodeHeadsPerProgram)
  c.flag(S.flag("has_conv_bias"), w.conv_bias.defined());
  c.flag(S.flag("replay"), d.replay);
  c.flag(S.flag("verify"), d.verify);
  c.meta("meta:width", d.W);
  c.meta("meta:large_batch", d.batch * d.H >= kernels::kDecodeLargeBatchHeads);
  c.meta("meta:index_bits", detail::fits32({&s.conv_state, &s.ssm_state, &s.xbc_cache, &s.dt_cache, &w.conv_weight,
                                            &a.xBC, &a.dt, &a.z, &a.y, &s.xbc_ring, &s.dt_ring})
                                ? 32
                                : 64);
  if constexpr (&S == &kDecodeStepDeferred) {
    c.tensor(S.tensor("xbc_ring"), s.xbc_ring);
    c.tensor(S.tensor("dt_ring"), s.dt_ring);
    c.tensor(S.tensor("ring"), s.ring_tokens);
    c.size(S.size("R"), d.R);
  }
}

// Binds and launches on kernel S.
template <const dsl::Signature& S>
void launch(const Mamba2DecodeState& s, const Mamba2MixerWeights& w, const Mamba2DecodeStepArgs& a,
            const detail::DecodeStepDims& d, Stream stream) {
  KernelCall c(S);
  bind<S>(c, s, w, a, d, deviceStatusRecord());
  const int64_t bp = c.metaValue("meta:BLOCK_P"),
                hpp = kernels::decodeHeadsPerProgram(d.batch, d.H, d.G, (d.P + bp - 1) / bp,
                                                     c.metaValue("meta:large_batch") != 0);
  c.value(S.size("hpp")).i64 = hpp;
  const unsigned grid[3] = {static_cast<unsigned>((d.P + bp - 1) / bp), static_cast<unsigned>(d.H / hpp),
                            static_cast<unsigned>(d.batch)};
  c.launch(grid, static_cast<CUstream>(stream));
}

template <const dsl::Signature& S>
Specialization specialization(const Mamba2DecodeState& s, const Mamba2MixerWeights& w, const Mamba2DecodeStepArgs& a,
                              const detail::DecodeStepDims& d, const std::string& arch) {
  KernelCall c(S);
  bind<S>(c, s, w, a, d, nullptr);
  return c.specialization(arch);
}

}  // namespace

void mamba2_decode_step(const Mamba2DecodeState& s, const Mamba2MixerWeights& w, const Mamba2DecodeStepArgs& a,
                        Stream stream) {
  const detail::DecodeStepDims d = detail::checkDecodeStepArgs(s, w, a, DeviceKind::CUDA, "mamba2_decode_step");
  if (d.batch == 0) return;
  if (d.deferred())
    launch<kDecodeStepDeferred>(s, w, a, d, stream);
  else
    launch<kDecodeStep>(s, w, a, d, stream);
}

Specialization detail::decodeStepSpecialization(const Mamba2DecodeState& s, const Mamba2MixerWeights& w,
                                                const Mamba2DecodeStepArgs& a, const std::string& arch) {
  const DecodeStepDims d = checkDecodeStepArgs(s, w, a, s.ssm_state.device, "mamba2_decode_step");
  return d.deferred() ? specialization<kDecodeStepDeferred>(s, w, a, d, arch)
                      : specialization<kDecodeStep>(s, w, a, d, arch);
}

}  // namespace ssmjit

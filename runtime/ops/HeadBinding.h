// The heads that selective_state_update and mamba2_decode_step declare under the same names: the
// sizes batch, nslots, H, P, N, G and L, dt's clamp, and the flags of the optional per-head inputs
// D and dt_bias, of z, of dt's softplus and of the state slot indices. Internal to the runtime.
#pragma once
#include "kernels_dsl/Signature.h"
#include "runtime/ops/KernelCall.h"
#include "ssmjit/tensor.h"

namespace ssmjit::detail {

struct HeadInputs {
  const TensorView& D;
  const TensorView& dtBias;
  const TensorView& z;
  const TensorView& stateIdx;
  bool softplus;
  float dtMin, dtMax;
};

// Dims: SsuDims or DecodeStepDims (batch, S slots, H, P, N, G, L).
template <const dsl::Signature& S, class Dims>
inline void bindHeads(KernelCall& c, const Dims& d, const HeadInputs& in) {
  c.size(S.size("batch"), d.batch);
  c.size(S.size("nslots"), d.S);
  c.size(S.size("H"), d.H);
  c.size(S.size("P"), d.P);
  c.size(S.size("N"), d.N);
  c.size(S.size("G"), d.G);
  c.size(S.size("L"), d.L);
  c.scalar(S.scalar("dt_min"), in.dtMin);
  c.scalar(S.scalar("dt_max"), in.dtMax);
  c.flag(S.flag("has_D"), in.D.defined());
  c.flag(S.flag("has_z"), in.z.defined());
  c.flag(S.flag("has_dt_bias"), in.dtBias.defined());
  c.flag(S.flag("dt_softplus"), in.softplus);
  c.flag(S.flag("has_clamp"), in.dtMax > in.dtMin);
  c.flag(S.flag("has_state_idx"), in.stateIdx.defined());
}

}  // namespace ssmjit::detail

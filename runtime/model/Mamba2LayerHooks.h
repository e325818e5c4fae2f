// The Mamba-2 layer's prefill (mamba2.h) with two points where a caller steps in between its ops:
// context parallelism (mamba2_parallel.h) sets the conv's initial states from a halo of the
// previous rank and runs a states-only SSD pass before the real one. Internal to the runtime.
#pragma once
#include <functional>

#include "ssmjit/mamba2.h"

namespace ssmjit::detail {

struct Mamba2PrefillHooks {
  // After in_proj (its output `zxbcdt`, (T, inProjRows)), before the conv.
  std::function<void(CausalConv1dArgs& conv, const TensorView& zxbcdt)> beforeConv;
  // Before the SSD (its workspace set).
  std::function<void(SsdArgs& ssd)> beforeSsd;
};

void mamba2LayerPrefill(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                        const Mamba2LayerArgs& a, Stream stream, const Mamba2PrefillHooks& hooks);

}  // namespace ssmjit::detail

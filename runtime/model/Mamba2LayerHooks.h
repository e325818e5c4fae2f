// The Mamba-2 layer's prefill (mamba2.h) with points where a caller steps in between its ops:
// context parallelism (mamba2_parallel.h) sets the conv's initial states from a halo of the
// previous rank and runs the SSD in two phases around the exchange of the parts' states; tensor parallelism runs
// out_proj in row pieces whose all-reduces overlap the next piece's GEMM. Internal to the runtime.
#pragma once
#include <cstdint>
#include <functional>

#include "ssmjit/mamba2.h"

namespace ssmjit::detail {

struct Mamba2PrefillHooks {
  // After in_proj (its output `zxbcdt`, (T, inProjRows)), before the conv.
  std::function<void(CausalConv1dArgs& conv, const TensorView& zxbcdt)> beforeConv;
  // Runs the SSD (its workspace set) in place of ssd().
  std::function<void(SsdArgs& ssd)> ssd;
  // Runs out_proj (y (T, hidden) = x (T, d_inner) W^T, its workspace set) in place of linear().
  std::function<void(const LinearArgs& outProj)> outProj;
};

void mamba2LayerPrefill(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                        const Mamba2LayerArgs& a, Stream stream, const Mamba2PrefillHooks& hooks);

// The layer's backward (Mamba2LayerBackward.cpp) with the same kind of points: context
// parallelism runs the conv's backward around the exchange of the halo's gradient and the SSD's
// context-parallel backward.
struct Mamba2BackwardHooks {
  // Runs the conv's backward (its workspace set) in place of causal_conv1d_backward().
  std::function<void(CausalConv1dBackwardArgs& conv)> conv;
  // Runs the SSD's backward (its workspace set, at least ssdWorkspaceFloats()) in place of
  // ssd_backward().
  std::function<void(SsdBackwardArgs& ssd)> ssd;
  std::function<int64_t(const SsdBackwardArgs& ssd)> ssdWorkspaceFloats;
};

int64_t mamba2LayerBackwardWorkspaceSize(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                                         const Mamba2LayerBackwardArgs& a, const Mamba2BackwardHooks& hooks);
void mamba2LayerBackward(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                         const Mamba2LayerBackwardArgs& a, Stream stream, const Mamba2BackwardHooks& hooks);

}  // namespace ssmjit::detail

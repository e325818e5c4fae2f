// The ops one Mamba-2 layer prefill runs, with their views into the call's workspace: what the
// prefill launches and what its backward (Mamba2LayerBackward.cpp) reads again, the
// intermediates included. Internal to the runtime.
#pragma once
#include <cstdint>

#include "ssmjit/mamba2.h"

namespace ssmjit::detail {

struct Mamba2PrefillCalls {
  LinearArgs inProj, outProj;
  CausalConv1dArgs conv;
  SsdArgs ssd;
  GatedRmsNormArgs norm;
  // The intermediates, (T, cols) in the activations' dtype: in_proj's output, the conv's output,
  // the SSD's y and the normed y.
  TensorView zxbcdt, xbc, y, yn;
  int64_t tokens = 0;
  int64_t workspaceFloats = 0;  // mamba2_layer_workspace_size of the call
};

// Checks the layer's arguments as the prefill does (errors lead with `op`) and returns its calls.
// Without a workspace the views sit at a stand-in address and are only for checking.
Mamba2PrefillCalls mamba2PrefillCalls(const char* op, const Mamba2Dims& d, const Mamba2LayerWeights& w,
                                      const Mamba2LayerState& s, const Mamba2LayerArgs& a);

}  // namespace ssmjit::detail

// Each tensor of a layer's weights (mamba2.h's Mamba2LayerWeights) with its name, in the struct's
// order: what walks the weights and their gradients side by side (the backward's check, the
// benchmarks' and tests' gradient buffers). Internal to the runtime.
#pragma once
#include <array>
#include <utility>

#include "ssmjit/mamba2.h"

namespace ssmjit::detail {

template <class Weights>  // Mamba2LayerWeights, const or not
auto mamba2WeightFields(Weights& w) {
  using Field = std::pair<const char*, decltype(&w.in_proj)>;
  return std::array<Field, 10>{Field{"in_proj", &w.in_proj},
                               Field{"in_proj_bias", &w.in_proj_bias},
                               Field{"conv_weight", &w.conv_weight},
                               Field{"conv_bias", &w.conv_bias},
                               Field{"A", &w.A},
                               Field{"D", &w.D},
                               Field{"dt_bias", &w.dt_bias},
                               Field{"norm_weight", &w.norm_weight},
                               Field{"out_proj", &w.out_proj},
                               Field{"out_proj_bias", &w.out_proj_bias}};
}

}  // namespace ssmjit::detail

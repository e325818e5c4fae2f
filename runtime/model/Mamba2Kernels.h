// The kernels a Mamba-2 layer or model compiles, named without a GPU (`ssmjit prewarm --model`):
// each op call the layer and model make, built on stand-in device addresses and specialised as
// the op would specialise it. Internal to the runtime; exported for the tool.
#pragma once
#include <string>
#include <vector>

#include "compiler/Specialization.h"
#include "runtime/model/Mamba2Config.h"
#include "ssmjit/mamba2_model.h"

namespace ssmjit::detail {

// The model's sizes from a checkpoint's config.
Mamba2ModelConfig mamba2ModelConfig(const model::Mamba2Config& c);

// A layer's state and weights as mamba2_decode_step takes them (verify and commit).
Mamba2DecodeState mamba2DecodeState(const Mamba2LayerState& s);
Mamba2MixerWeights mamba2MixerWeights(const Mamba2Dims& d, const Mamba2LayerWeights& w);

// One layer call's kernels (the GEMMs run in cuBLASLt and compile nothing).
std::vector<Specialization> mamba2LayerSpecializations(const Mamba2Dims& dims, const Mamba2LayerWeights& w,
                                                       const Mamba2LayerState& s, const Mamba2LayerArgs& args,
                                                       Mamba2LayerMode mode, const std::string& arch);

// Every kernel a model of `dir`'s config.json runs with `options`: prefills of any number of
// tokens up to max_prefill_tokens in any number of sequences up to max_batch (one count of each
// divisibility class the kernels specialise on), decode steps (and with max_draft_tokens, verify
// steps of max_draft_tokens + 1 tokens) at every power-of-two batch up to max_batch, greedy and
// sampled tokens. Distinct specialisations, in first-use order.
// tensorParallel > 1: one rank's kernels of the model split over that many GPUs (the same on
// every rank); throws naming G, H and t when they do not split.
std::vector<Specialization> mamba2ModelSpecializations(const std::string& dir, const Mamba2ModelOptions& options,
                                                       const std::string& arch, int tensorParallel = 1);

}  // namespace ssmjit::detail

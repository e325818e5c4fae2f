// The tensors of a Mamba-2 language model, as CPU views into a checkpoint's mapped files, checked
// all at once against its config: every expected name present with its shape and a float dtype
// (F32, BF16 or F16; each tensor may have its own), and no tensor left over. Internal to the
// runtime.
#pragma once
#include <string>
#include <vector>

#include "runtime/model/CheckpointDir.h"
#include "runtime/model/Mamba2Config.h"
#include "ssmjit/tensor.h"

namespace ssmjit::model {

// One layer (backbone.layers.{i}.): the block's RMSNorm and the mixer's tensors. Optional ones
// (biases the config turns off) are undefined views.
struct Mamba2LayerWeights {
  TensorView norm;             // norm.weight (hidden)
  TensorView in_proj_weight;   // (in_proj_rows, hidden): rows [z | x | B | C | dt]
  TensorView in_proj_bias;     // (in_proj_rows) with use_bias
  TensorView conv1d_weight;    // (conv_dim, 1, W)
  TensorView conv1d_bias;      // (conv_dim) with use_conv_bias
  TensorView dt_bias;          // (H)
  TensorView A_log;            // (H): A = -exp(A_log)
  TensorView D;                // (H), or (H*P) with d_has_hdim
  TensorView gated_norm;       // mixer.norm.weight (d_inner)
  TensorView out_proj_weight;  // (hidden, d_inner)
  TensorView out_proj_bias;    // (hidden) with use_bias
};

struct Mamba2Weights {
  TensorView embedding;  // (vocab_rows, hidden)
  std::vector<Mamba2LayerWeights> layers;
  TensorView norm_f;     // (hidden)
  TensorView lm_head;    // (vocab_rows, hidden); the embedding when tied
};

// The checkpoint's tensor names for `cfg.naming` (embedding: backbone.embeddings.weight for
// transformers, backbone.embedding.weight for mamba_ssm).
std::string mamba2EmbeddingName(const Mamba2Config& cfg);

// Every tensor of the model from `dir`, checked against `cfg`; the views live as long as `dir`.
// Throws ssmjit::Error(InvalidArgument) naming the directory and listing every missing tensor,
// wrong shape or dtype (expected vs got) and unexpected tensor. With tie_embeddings, an
// lm_head.weight in the checkpoint must have the embedding's shape and is not used.
Mamba2Weights loadMamba2Weights(const CheckpointDir& dir, const Mamba2Config& cfg);

// A model directory opened whole: config.json, its safetensors files and the checked weights
// (views into `files`, which owns the mappings).
struct Mamba2Checkpoint {
  Mamba2Config config;
  CheckpointDir files;
  Mamba2Weights weights;
  explicit Mamba2Checkpoint(const std::string& dir);
};

}  // namespace ssmjit::model

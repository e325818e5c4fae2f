// The config.json of a Mamba-2 language model, in either of its two spellings: Hugging Face's
// Mamba2Config (model_type "mamba2") or mamba_ssm's MambaConfig (d_model, n_layer, ssm_cfg with
// layer "Mamba2"). Absent fields take the defaults of the class that wrote the file. Internal to
// the runtime.
#pragma once
#include <cstdint>
#include <string>

namespace ssmjit::model {

// Which library's tensor names the checkpoint uses (they differ in the embedding's name).
enum class CheckpointNaming { HuggingFace, MambaSsm };

struct Mamba2Config {
  CheckpointNaming naming = CheckpointNaming::HuggingFace;
  int64_t hidden_size = 0;  // d_model
  int64_t num_layers = 0;
  int64_t vocab_size = 0;   // as the config gives it
  int64_t vocab_rows = 0;   // rows of the embedding and lm_head: vocab_size, padded up to a
                            // multiple of pad_vocab_size_multiple for mamba_ssm
  int64_t num_heads = 0;    // H
  int64_t head_dim = 0;     // P
  int64_t state_size = 0;   // N
  int64_t n_groups = 0;     // G (H % G == 0)
  int64_t conv_kernel = 0;  // W
  int64_t chunk_size = 0;
  bool use_bias = false;       // in_proj and out_proj biases
  bool use_conv_bias = true;
  bool d_has_hdim = false;     // D is (H*P) rather than (H)
  bool norm_before_gate = false;
  bool residual_in_fp32 = true;
  bool tie_embeddings = false;  // lm_head is the embedding
  double norm_eps = 1e-5;        // the block norms, norm_f and the gated norm
  double dt_min = 0.0, dt_max = 0.0;  // time_step_limit / dt_limit: dt' clamped to [dt_min, dt_max]
                                      // (dt_max may be +inf)

  int64_t d_inner() const { return num_heads * head_dim; }
  int64_t conv_dim() const { return d_inner() + 2 * n_groups * state_size; }
  int64_t in_proj_rows() const { return 2 * d_inner() + 2 * n_groups * state_size + num_heads; }
};

// Parses config.json text; `source` names it in errors. Throws ssmjit::Error(InvalidArgument)
// naming the field for a missing or mistyped value, an unsupported architecture (not Mamba-2,
// MLP or attention layers, LayerNorm instead of RMSNorm) or inconsistent sizes.
Mamba2Config parseMamba2Config(const std::string& text, const std::string& source);
// parseMamba2Config of dir/config.json.
Mamba2Config loadMamba2Config(const std::string& dir);

}  // namespace ssmjit::model

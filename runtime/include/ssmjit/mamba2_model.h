// A Mamba-2 language model on one GPU (the current context's device, else device 0): loads a checkpoint directory, prefills a batch of prompts
// as one packed row, decodes with CUDA graphs, and samples on the device.
//
//   hidden = embedding[ids]
//   per layer: residual = hidden (+ residual); hidden = mixer(rms_norm(residual) * norm.weight)
//   logits = lm_head(rms_norm(hidden + residual) * norm_f.weight)
//
// The residual stream is kept in fp32 (residual_in_fp32, as Mamba-2 checkpoints are trained).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ssmjit/mamba2.h"
#include "ssmjit/parallel.h"

namespace ssmjit {

struct Mamba2ModelConfig {
  Mamba2Dims dims;
  int64_t layers = 0;
  int64_t vocab = 0;  // rows of the embedding (padded vocabularies included)
  bool tied_embeddings = true;
};

struct Mamba2ModelOptions {
  DType dtype = DType::BF16;        // activations and GEMM weights (checkpoints are converted)
  DType state_dtype = DType::F32;   // the SSM state per slot
  int64_t max_batch = 64;           // decode slots: sequences generated at once
  int64_t max_prefill_tokens = 16384;
  // Tensor parallelism (mamba2_parallel.h): each rank of this communicator (not owned; it must
  // outlive the model) loads only its shard of every layer and sums the layers' outputs with one
  // all-reduce. Every rank then holds the same hidden states and logits, so each makes the same
  // calls with the same prompts. nullptr: one GPU.
  Communicator* tensor_parallel = nullptr;
};

class Mamba2Model {
 public:
  // Loads config.json and the safetensors of `dir` (Hugging Face or mamba_ssm naming, sharded or
  // not) onto the device. Throws ssmjit::Error naming the file, tensor or field at fault; on an
  // error nothing stays allocated.
  static std::unique_ptr<Mamba2Model> load(const std::string& dir, const Mamba2ModelOptions& options = {});
  ~Mamba2Model();
  Mamba2Model(const Mamba2Model&) = delete;
  Mamba2Model& operator=(const Mamba2Model&) = delete;

  const Mamba2ModelConfig& config() const;
  const Mamba2ModelOptions& options() const;

  // Runs `prompts` (each non-empty, together at most max_prefill_tokens) as one packed row from
  // zero states, keeping sequence i's states in slot slots[i] (distinct, in [0, max_batch)).
  // logits: (nseq, vocab) fp32 on the device, each prompt's last token.
  void prefill(const std::vector<std::vector<int32_t>>& prompts, const std::vector<int32_t>& slots,
               const TensorView& logits, Stream stream = nullptr);
  // One token per sequence: token_ids (B,) int32 and slots (B,) int32 (-1: a pad row) on the
  // device, B <= max_batch; logits (B, vocab) fp32 (pad rows unspecified). Advances each slot's
  // states by its token. Allocates nothing, so it can be captured in a CUDA graph.
  void decode(const TensorView& token_ids, const TensorView& slots, const TensorView& logits, Stream stream = nullptr);

  struct Impl;

 private:
  explicit Mamba2Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct GenerateOptions {
  int64_t max_new_tokens = 32;
  float temperature = 0.0f;  // <= 0: greedy
  int top_k = 0;             // 0: all
  float top_p = 1.0f;
  uint64_t seed = 0;
  int64_t eos_token = -1;  // a sequence stops after emitting it; -1: none
  bool cuda_graphs = true;
  // Called after the prefill (step 0) and after each decode step with the tokens made so far.
  std::function<void(int64_t step, int64_t tokens)> progress;
};

struct GenerateResult {
  std::vector<std::vector<int32_t>> tokens;  // the new tokens of each prompt
  double prefill_ms = 0;                     // wall time of the prefill and first sampling
  double decode_ms = 0;                      // wall time of the decode steps
  int64_t decode_steps = 0;
};

// Generates from `prompts` (at most max_batch of them) in slots 0..n-1: one packed prefill, then
// decode steps for all sequences at once, graphs captured per power-of-two batch bucket. Under
// tensor parallelism every rank calls it with the same prompts and options and gets the same
// tokens; steps run without graphs and each wait is the communicator's bounded one.
GenerateResult generate(Mamba2Model& model, const std::vector<std::vector<int32_t>>& prompts,
                        const GenerateOptions& options = {});

}  // namespace ssmjit

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
  int64_t max_draft_tokens = 0;     // speculative decoding: drafts a verify takes (0: none; at
                                    // most kMaxTokens - 1); sizes each layer's verify cache
  // Tensor parallelism (mamba2_parallel.h): each rank of this communicator (not owned; it must
  // outlive the model) loads only its shard of every layer and sums the layers' outputs with an
  // all-reduce (a prefill's in row pieces overlapping out_proj: mamba2_parallel.h). Every rank then
  // holds the same hidden states and logits, so each makes the same calls with the same prompts.
  // nullptr: one GPU.
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

  // Speculative decoding (needs max_draft_tokens >= L - 1). token_ids (B, L) int32, contiguous:
  // each sequence's last accepted token (not yet run) then L - 1 drafts; slots (B,) int32 (-1: a
  // pad row); num_accepted (B,) int32: how many of the slot's previous verify tokens were
  // accepted (0 after a prefill or commit); all on the device. logits (B*L, vocab) fp32: row b*L
  // + i after token i of sequence b, as plain decoding of those tokens would give. The states
  // advance by num_accepted; the L tokens are cached until the next verify or commit. Allocates
  // nothing: capturable in a CUDA graph for a fixed (B, L).
  void verify(const TensorView& token_ids, const TensorView& slots, const TensorView& num_accepted,
              const TensorView& logits, Stream stream = nullptr);
  // Commits num_accepted (B,) of each slot's last verify tokens, so that the slots' states are
  // those of plain decoding (before decode(), or to read them); their next verify takes 0.
  void commit(const TensorView& slots, const TensorView& num_accepted, Stream stream = nullptr);
  // Layer l's per-slot states (and verify caches) on the device: to read, save or restore them.
  const Mamba2LayerState& layer_state(int64_t layer) const;

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
  // Speculative decoding: with draft_tokens = K > 0 (the model's max_draft_tokens >= K), each step
  // asks `draft` for up to K tokens to follow each live sequence's `context` (prompt then the
  // tokens made so far), verifies them in one verify() and keeps the longest prefix the model
  // itself would have produced (greedy, or the draw with plain decoding's keys and counters),
  // plus the model's next token. The tokens equal plain decoding's. prompt_lookup_draft is a
  // drafter needing no second model.
  int64_t draft_tokens = 0;
  std::function<std::vector<int32_t>(int64_t sequence, const std::vector<int32_t>& context)> draft;
  // Called after the prefill (step 0) and after each decode step with the tokens made so far.
  std::function<void(int64_t step, int64_t tokens)> progress;
};

struct GenerateResult {
  std::vector<std::vector<int32_t>> tokens;  // the new tokens of each prompt
  double prefill_ms = 0;                     // wall time of the prefill and first sampling
  double decode_ms = 0;                      // wall time of the decode steps
  int64_t decode_steps = 0;
  int64_t drafted = 0;   // speculative decoding: drafts verified
  int64_t accepted = 0;  // of them, kept
};

// Speculative decoding's bookkeeping for one sequence, on the host. `drafts` (at most the verify's
// L - 1 are read) against `choices` (L: the model's token after the last accepted one and after
// each draft): the tokens to emit, the longest prefix of drafts equal to the model's own choices
// then the model's next token (1 to L tokens); the verify's num_accepted for the next step is
// their count.
std::vector<int32_t> accepted_tokens(const std::vector<int32_t>& drafts, const std::vector<int32_t>& choices);

// A drafter from the sequence's own history (prompt lookup): the tokens that followed the latest
// earlier occurrence of the context's last `ngram` tokens (else of fewer, down to 1), at most
// `max_tokens` of them; none when no suffix recurs.
std::vector<int32_t> prompt_lookup_draft(const std::vector<int32_t>& context, int64_t max_tokens, int64_t ngram = 3);

// Generates from `prompts` (at most max_batch of them) in slots 0..n-1: one packed prefill, then
// decode steps for all sequences at once, graphs captured per power-of-two batch bucket. Under
// tensor parallelism every rank calls it with the same prompts and options and gets the same
// tokens; the graphs hold the step's all-reduces and each wait is the communicator's bounded one.
GenerateResult generate(Mamba2Model& model, const std::vector<std::vector<int32_t>>& prompts,
                        const GenerateOptions& options = {});

}  // namespace ssmjit

// Float64 CPU reference of the Mamba-2 mixer layer and of the whole language model, on the
// weights of a checkpoint (runtime/model): every weight read as the value it stores, every
// intermediate kept in double. Slow and simple; for tests and for checking the GPU model.
//
// Layer, per token u (hidden) of a sequence, with d_inner = H*P, Dc = d_inner + 2*G*N:
//   [z | xBC | dt] = in_proj_weight u (+ in_proj_bias)            (d_inner, Dc, H)
//   xBC' = silu(conv1d_bias + sum_k conv1d_weight[c, 0, k] * win[k]), win = the W-1 conv-state
//          columns then xBC; the state then drops its oldest column and takes xBC
//   x = xBC'[0, d_inner) (head h: h*P + p), B = xBC'[d_inner + g*N + n], C = xBC'[d_inner + G*N
//   + g*N + n], head h in group g = h / (H/G)
//   dt' = min(max(softplus(dt[h] + dt_bias[h]), dt_min), dt_max)   (softplus(v) = v above 20)
//   S[h, p, n] = exp(-exp(A_log[h]) dt') S + dt' x[h, p] B[g, n];  y = sum_n C[g, n] S + D x
//   gated RMSNorm over groups of d_inner / G channels, weight gated_norm, eps norm_eps:
//     norm_before_gate=false (transformers, mamba_ssm default): rms(y * silu(z)) * w
//     norm_before_gate=true: rms(y) * w * silu(z)
//   out = out_proj_weight (normed) (+ out_proj_bias)
// Model (mamba_ssm's MixerModel and transformers' Mamba2Model, in double):
//   h = embedding[token]; residual = 0
//   per layer: residual = h + residual; h = layer(RMSNorm(residual) * norm)
//   logits = lm_head RMSNorm(h + residual) * norm_f        (RMSNorm(v) = v / sqrt(mean v^2 + eps))
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/model/Mamba2Config.h"
#include "runtime/model/Mamba2Weights.h"

namespace ssmjit::reference {

// One sequence's state in one layer. Empty vectors: a fresh sequence (zeros).
struct Mamba2SequenceState {
  std::vector<double> conv;  // (Dc, W-1): column j holds the token at position len - (W-1) + j
  std::vector<double> ssm;   // (H, P, N)
};

// The layer over one packed row: hidden (T, hidden_size) row-major, sequence i the tokens
// [cu_seqlens[i], cu_seqlens[i+1]), starting from states[i] (states.size() = nseq) and leaving
// its state after its last token there. Returns (T, hidden_size). A decode step is the same call
// with one token per sequence (cu_seqlens = 0, 1, ..., batch). Throws ssmjit::Error
// (InvalidArgument) for a bad cu_seqlens, a hidden of the wrong size or a state of the wrong size.
std::vector<double> mamba2_layer(const model::Mamba2Config& cfg, const model::Mamba2LayerWeights& w,
                                 const std::vector<double>& hidden, const std::vector<int64_t>& cu_seqlens,
                                 std::vector<Mamba2SequenceState>& states);

// The gradients of mamba2_layer for the same call (hidden, cu_seqlens, initial_states as the
// states it starts from, left unchanged here) of the loss
//   sum(dout * out) + sum over sequences of dfinal.conv . (final conv state) + dfinal.ssm . (final ssm state),
// every intermediate and sum in double. Each member is d(loss)/d(that input), flattened row-major:
// hidden (T, hidden_size); a weight's gradient has the weight's shape (the weight's stored value
// is the point of differentiation), empty when the weight is absent; A_log's is of the
// checkpoint's parameter (A = -exp(A_log)); dt_bias's goes through the softplus and is zero
// where the dt clamp binds (softplus strictly outside [dt_min, dt_max]); initial_states[i] is
// d(initial conv state) (Dc, W-1) and d(initial ssm state) (H, P, N) of sequence i, always full.
// dfinal_states: empty (zero), or one per sequence whose empty members are zero. Throws
// ssmjit::Error (InvalidArgument) for what mamba2_layer refuses, a dout not shaped as hidden or a
// dfinal_states of the wrong count or sizes.
struct Mamba2LayerGradientsRef {
  std::vector<double> hidden;
  std::vector<double> in_proj_weight, in_proj_bias, conv1d_weight, conv1d_bias, dt_bias, A_log, D, gated_norm,
      out_proj_weight, out_proj_bias;
  std::vector<Mamba2SequenceState> initial_states;
};
Mamba2LayerGradientsRef mamba2_layer_backward(const model::Mamba2Config& cfg, const model::Mamba2LayerWeights& w,
                                              const std::vector<double>& hidden, const std::vector<int64_t>& cu_seqlens,
                                              const std::vector<Mamba2SequenceState>& initial_states,
                                              const std::vector<double>& dout,
                                              const std::vector<Mamba2SequenceState>& dfinal_states);

// The model over one packed row of token ids: logits (T, vocab_rows). states[l] holds layer l's
// states, one per sequence, as mamba2_layer takes them (all fresh when `states` is empty: it is
// sized num_layers x nseq). A token outside [0, vocab_rows) throws. Decode: one token per
// sequence, as for the layer.
std::vector<double> mamba2_model(const model::Mamba2Config& cfg, const model::Mamba2Weights& w,
                                 const std::vector<int64_t>& tokens, const std::vector<int64_t>& cu_seqlens,
                                 std::vector<std::vector<Mamba2SequenceState>>& states);

// Speculative decoding's verify as plain steps: tokens (B*L) holds L tokens for each of the B
// sequences of `states` (as mamba2_model takes them, num_layers x B, not empty), each run from
// its state as L decode steps; the states are left as they were. Logits (B*L, vocab_rows), row
// b*L + i after token i of sequence b. Committing k of a sequence's tokens is mamba2_model on
// those k tokens. Throws when tokens is not B*L values or L < 1.
std::vector<double> mamba2_model_verify(const model::Mamba2Config& cfg, const model::Mamba2Weights& w,
                                        const std::vector<int64_t>& tokens, int64_t L,
                                        const std::vector<std::vector<Mamba2SequenceState>>& states);

}  // namespace ssmjit::reference

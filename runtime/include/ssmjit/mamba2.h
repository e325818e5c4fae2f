// The Mamba-2 mixer layer, composed from ssmjit's ops (causal_conv1d, ssd, selective_state_update,
// gated_rms_norm) and cuBLASLt GEMMs (linear), for a packed prefill batch and for a decode step.
// Like the ops, the layer allocates nothing: the caller owns weights, states and the workspace.
//
//   zxbcdt = hidden in_proj^T (+ bias)            split by columns as [z | xBC | dt]
//   xBC    = silu(causal_conv1d(xBC) + conv_bias)  split as [x | B | C]
//   y      = SSD(x, dt, A, B, C, D; dt_bias, softplus, clamp)   per sequence, from its state
//   out    = gated_rms_norm(y, z; norm_weight, groups of d_inner / G) out_proj^T (+ bias)
#pragma once
#include <cstdint>

#include "ssmjit/ops.h"

namespace ssmjit {

// The sizes and constants of one Mamba-2 mixer layer.
struct Mamba2Dims {
  int64_t hidden = 0;      // d_model
  int64_t heads = 0;       // H
  int64_t head_dim = 0;    // P
  int64_t state = 0;       // N
  int64_t groups = 1;      // G: B/C groups and the gated norm's groups (H % G == 0)
  int64_t conv_width = 4;  // W
  int chunk_size = 256;    // the SSD's chunk: 64, 128 or 256
  float norm_eps = 1e-5f;
  bool norm_before_gate = false;  // false: norm(y * silu(z)), as Mamba-2 checkpoints use
  float dt_min = 0.0f;            // dt clamp (time_step_limit); dt_max <= dt_min: none
  float dt_max = 0.0f;

  int64_t dInner() const { return heads * head_dim; }
  int64_t convDim() const { return dInner() + 2 * groups * state; }
  int64_t inProjRows() const { return 2 * dInner() + 2 * groups * state + heads; }
};

// A layer's parameters on the device. GEMM weights and the norm weight in the activations'
// dtype (bf16/fp16/fp32); conv weight and bias in it or fp32; A, D, dt_bias fp32.
struct Mamba2LayerWeights {
  TensorView in_proj;        // (inProjRows, hidden)
  TensorView in_proj_bias;   // optional (inProjRows,)
  TensorView conv_weight;    // (convDim, W)
  TensorView conv_bias;      // optional (convDim,)
  TensorView A;              // (H,) fp32: -exp(A_log)
  TensorView D;              // optional (H,) or (H, P) fp32
  TensorView dt_bias;        // optional (H,) fp32
  TensorView norm_weight;    // (dInner,)
  TensorView out_proj;       // (hidden, dInner)
  TensorView out_proj_bias;  // optional (hidden,)
};

// A layer's recurrent state per slot: what a sequence carries from one call to the next.
struct Mamba2LayerState {
  TensorView conv_state;  // (S, convDim, W-1), fp32 or the activations' dtype
  TensorView ssm_state;   // (S, H, P, N), fp32/bf16/fp16 (math in fp32)
  // Speculative decoding only (mamba2_layer_verify, mamba2_layer_commit): mamba2_decode_step's
  // cache of each slot's last verified tokens (Mamba2DecodeState, ops.h). xbc_cache (S, Lc,
  // convDim) and dt_cache (S, Lc, H) in the activations' dtype, Lc >= the tokens of a verify;
  // cached_tokens (S,) int32, zero when a slot starts a sequence; arrivals (S,) int32, zeroed once.
  TensorView xbc_cache, dt_cache, cached_tokens, arrivals;
};

// What a call of the layer does (sizes its workspace and names its kernels).
enum class Mamba2LayerMode { Prefill, Decode, Verify };

// One call of the layer on T tokens. hidden and out (T, hidden) in the activations' dtype, unit
// stride on hidden; out must not alias hidden.
//   Prefill: a packed row of nseq sequences, cu_seqlens (nseq + 1,) on the device. Sequence i
//     starts from slot initial_state_indices[i] (-1 or no indices: from zeros) and leaves its
//     final states in slot state_indices[i] (-1: not kept).
//   Decode: one token for each of T = B sequences; sequence b reads and advances slot
//     state_indices[b] (-1: a pad row, skipped, its out row untouched). Capturable in a graph.
//   Verify (speculative decoding): L = tokens_per_sequence tokens for each of B sequences, T = B*L,
//     row b*L + i the i-th token of sequence b. First the num_accepted[b] tokens of slot
//     state_indices[b]'s previous verify are replayed and committed (0 <= num_accepted[b] <= that
//     verify's L; 0 after a prefill or a commit), then the L tokens run from the corrected state
//     without committing, each row's out as if the tokens before it had been decoded one by one;
//     they become the slot's cached tokens. One mamba2_decode_step launch for the SSM part, so
//     with a fixed L and the counts on the device, a verify is capturable in a graph. D must be
//     (H,) and L <= the caches' depth (at most kMaxTokens).
// workspace: float32, contiguous, on the device (any contents), at least
// mamba2_layer_workspace_size() elements; it holds the layer's intermediates (of every dtype).
struct Mamba2LayerArgs {
  TensorView hidden;
  TensorView out;
  TensorView cu_seqlens;             // prefill only
  TensorView initial_state_indices;  // prefill only, optional (nseq,) int32/int64
  TensorView state_indices;          // (nseq,) or (B,) int32/int64 on the device
  TensorView workspace;              // float32, contiguous
  TensorView num_accepted;           // verify only: (B,) int32/int64 on the device
  int64_t tokens_per_sequence = 1;   // verify only: L, with T = B*L
};

// The workspace a call needs, in float32 elements; checks every argument but the workspace. Monotone in T and
// nseq: the size for the largest call serves every smaller one.
int64_t mamba2_layer_workspace_size(const Mamba2Dims& dims, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                                    const Mamba2LayerArgs& args, Mamba2LayerMode mode);
void mamba2_layer_prefill(const Mamba2Dims& dims, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                          const Mamba2LayerArgs& args, Stream stream = nullptr);
void mamba2_layer_decode(const Mamba2Dims& dims, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                         const Mamba2LayerArgs& args, Stream stream = nullptr);
void mamba2_layer_verify(const Mamba2Dims& dims, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                         const Mamba2LayerArgs& args, Stream stream = nullptr);
// Replays and commits num_accepted[b] (B,) of slot state_indices[b]'s cached tokens, as the next
// verify would, and empties the cache (then the slot's next verify takes num_accepted 0). What
// makes the states those of plain decoding again, before a decode or to read them. Allocates
// nothing; capturable.
void mamba2_layer_commit(const Mamba2Dims& dims, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                         const TensorView& state_indices, const TensorView& num_accepted, Stream stream = nullptr);

// ---- Training: the layer's backward ---------------------------------------------------------
//
// The gradients of one mamba2_layer_prefill call. The prefill's workspace holds what the backward
// reads (in_proj's output, the conv's output, the SSD's y and the normed y): pass the prefill's
// args unchanged as `forward`, its workspace as the prefill left it. The backward reads the initial
// states from `s` at forward.initial_state_indices, so those slots must still hold what the prefill
// read (its final states written to other slots, or -1). The SSD's chunk states are recomputed.
// Gradients are written, not accumulated: dhidden (T, hidden) in hidden's dtype; each weight's
// gradient given exactly when the weight is, in its shape: in_proj and out_proj (and their biases)
// in their dtype or fp32, conv_weight and conv_bias fp32 or the conv weight's dtype, norm_weight fp32
// or its dtype, A, D and dt_bias fp32 (A's gradient is dL/dA: a checkpoint's A_log takes dA * A).
// Optional: the initial states' gradients (written at the slots the sequences read; distinct slots)
// and the final states' gradients (read at forward.state_indices' slots). Between the ops the
// gradients are kept in fp32 (but for in_proj's output's, which cuBLASLt reads in the activations'
// dtype). Deterministic: every sum runs in a fixed order.
struct Mamba2LayerGradients {
  TensorView dhidden;               // (T, hidden)
  Mamba2LayerWeights weights;       // dL/d each weight
  Mamba2LayerState initial_states;  // optional: conv_state, ssm_state gradients
};
struct Mamba2LayerBackwardArgs {
  Mamba2LayerArgs forward;         // the prefill call (its workspace holding the intermediates)
  TensorView dout;                 // (T, hidden), hidden's dtype: dL/d out
  Mamba2LayerState dfinal_states;  // optional: conv_state, ssm_state gradients of the final states
  Mamba2LayerGradients grads;
  TensorView workspace;  // float32, contiguous, mamba2_layer_backward_workspace_size()
};
int64_t mamba2_layer_backward_workspace_size(const Mamba2Dims& dims, const Mamba2LayerWeights& w,
                                             const Mamba2LayerState& s, const Mamba2LayerBackwardArgs& args);
void mamba2_layer_backward(const Mamba2Dims& dims, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                           const Mamba2LayerBackwardArgs& args, Stream stream = nullptr);

}  // namespace ssmjit

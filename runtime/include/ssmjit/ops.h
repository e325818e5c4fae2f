// The public ops of ssmjit. Each op checks its arguments once, at this edge, and throws
// ssmjit::Error (kind InvalidArgument) naming the argument, the expected and the actual value;
// on a bad argument nothing is launched and nothing is written. Ops launch on the caller's stream,
// allocate nothing, never synchronise, and can be captured into a CUDA graph.
#pragma once
#include <cstdint>

#include "ssmjit/tensor.h"

namespace ssmjit {

using Stream = void*;  // a CUstream / cudaStream_t; nullptr is the legacy default stream

// Where the multi-token update writes the state.
enum class StateWrite : int {
  Final = 0,     // the state after the last token, into its read slot (in place) — the default
  None = 1,      // nothing: verify only
  PerToken = 2,  // the state after token t into slot dst_state_indices[b, t] (-1: skip that token)
};

// Selective state update (Mamba decode). Two forms, told apart by state's rank:
//   Mamba-1: state (S, D, N); x, z, out (B, D); dt (B, D); A (D, N); B, C (B, N);
//            D, dt_bias (D,)
//   Mamba-2: state (S, H, P, N); x, z, out (B, H, P); dt (B, H); A (H,); B, C (B, G, N) with
//            H % G == 0; D, dt_bias (H,)
// The multi-token op takes the same tensors with a token axis after the batch axis:
//   x, z, out (B, L, ...), dt (B, L, ...), B, C (B, L, ...), 1 <= L <= kMaxTokens.
// S is the number of state slots: without state_batch_indices, S must equal B and sequence b uses
// slot b; with it (int32/int64, (B,)), sequence b uses slot state_batch_indices[b], and -1 marks a
// pad row that is skipped (its out rows are left untouched). The kernel bounds-checks every slot:
// a slot outside [0, S) skips that row and is reported by the next checkDeviceErrors().
// state: fp32, bf16 or fp16; x, dt, B, C, z, out: fp32, bf16 or fp16 (may differ);
// A, D, dt_bias: fp32. Math is fp32. The last axis of every tensor may have any stride but 0
// where an axis of size > 1 is broadcast only for D, dt_bias (a stride the kernel cannot take
// is rejected with its name).
struct SelectiveStateUpdateArgs {
  TensorView state;
  TensorView x, dt, A, B, C;
  TensorView D, z, dt_bias;          // optional: leave undefined (data == nullptr)
  TensorView state_batch_indices;    // optional (B,)
  TensorView dst_state_indices;      // StateWrite::PerToken only: (B, L) int32/int64
  TensorView out;
  bool dt_softplus = false;
  float dt_min = 0.0f;               // dt is clamped to [dt_min, dt_max] after bias and softplus
  float dt_max = 0.0f;               // dt_max <= dt_min (the default) means no clamp
  StateWrite state_write = StateWrite::Final;
};

constexpr int kMaxTokens = 32;

void selective_state_update(const SelectiveStateUpdateArgs& args, Stream stream = nullptr);
void selective_state_update_tokens(const SelectiveStateUpdateArgs& args, Stream stream = nullptr);

// Synchronises `stream` and throws if a kernel since the last check found a bad slot index.
void checkDeviceErrors(Stream stream = nullptr);

}  // namespace ssmjit

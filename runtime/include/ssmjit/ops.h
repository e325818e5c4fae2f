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

// Most tokens per sequence the multi-token op takes in one launch.
constexpr int kMaxTokens = 32;

// Selective state update (Mamba decode). Two forms, told apart by state's rank:
//   Mamba-1: state (S, D, N); x, z, out (B, D); dt (B, D); A (D, N); B, C (B, N);
//            D, dt_bias (D,)
//   Mamba-2: state (S, H, P, N); x, z, out (B, H, P); dt (B, H); A (H,); B, C (B, G, N) with
//            H % G == 0 (head h reads group h / (H / G)); D, dt_bias (H,)
// The multi-token op takes the same tensors with a token axis after the batch axis:
//   x, dt, B, C, z, out (B, L, ...), 1 <= L <= kMaxTokens; dst_state_indices (B, L).
// The one-token op takes dst_state_indices as (B,).
// Per token: dt' = dt (+ dt_bias), then softplus if dt_softplus, then the clamp; the state
// becomes state * exp(A * dt') + B * dt' * x; y = sum_n state * C (+ x * D), times silu(z) if z.
// The state is read once, kept in fp32 across the L tokens and written as state_write says.
//
// Slots: S is the number of state slots. Without state_batch_indices, S must equal B and sequence
// b uses slot b; with it (int32/int64, (B,)), sequence b uses slot state_batch_indices[b], and -1
// marks a pad row that is skipped (nothing read, its out rows left untouched). The kernel
// bounds-checks every slot it reads or writes: a slot outside [0, S) (other than -1) skips that
// row (or that token's write) and is reported by the next checkDeviceErrors().
//
// Dtypes: state fp32, bf16 or fp16; x, dt, B, C, z, out fp32, bf16 or fp16 (each may differ);
// A, D, dt_bias fp32; index tensors int32 or int64. Math is fp32.
// Strides (in elements, any layout): must be >= 0; a stride of 0 (broadcast) on an axis of size
// > 1 is accepted only for A, D and dt_bias; data pointers must be aligned to their element size.
// All tensors on one CUDA device. B <= 65535 and H <= 65535 (grid limits); B == 0 does nothing.
// Every argument is checked before anything is launched; a bad one throws Error(InvalidArgument)
// naming it, e.g. "selective_state_update: C has shape (4, 3, 128), expected (4, 2, 128) [batch,
// ngroups, dstate]: dim 1 (ngroups) is 3, expected 2 (Mamba-2 form: state has rank 4)".
// A float64 CPU reference taking the same arguments is in ssmjit/reference.h.
struct SelectiveStateUpdateArgs {
  TensorView state;                  // updated in place (slots), as state_write says
  TensorView x, dt, A, B, C;
  TensorView D, z, dt_bias;          // optional: leave undefined (data == nullptr)
  TensorView state_batch_indices;    // optional (B,)
  TensorView dst_state_indices;      // required with StateWrite::PerToken, else leave undefined
  TensorView out;                    // written for every token of every row but pad rows
  bool dt_softplus = false;
  float dt_min = 0.0f;               // dt is clamped to [dt_min, dt_max] after bias and softplus
  float dt_max = 0.0f;               // dt_max <= dt_min (the default) means no clamp; not NaN
  StateWrite state_write = StateWrite::Final;
};

void selective_state_update(const SelectiveStateUpdateArgs& args, Stream stream = nullptr);
void selective_state_update_tokens(const SelectiveStateUpdateArgs& args, Stream stream = nullptr);

// Synchronises `stream` and throws if a kernel since the last check found a bad slot index.
void checkDeviceErrors(Stream stream = nullptr);

}  // namespace ssmjit

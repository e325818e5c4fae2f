// The public ops of ssmjit. Each op checks its arguments once, at this edge, and throws
// ssmjit::Error (kind InvalidArgument) naming the argument, the expected and the actual value;
// on a bad argument nothing is launched and nothing is written. Ops launch on the caller's stream,
// allocate nothing, never synchronise, and can be captured into a CUDA graph. A first call compiles
// the kernels this process does not have yet (from the disk cache, else NVRTC), all of a call's at
// once on a thread per core, before it launches any.
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
  TensorView state;  // updated in place (slots), as state_write says
  TensorView x, dt, A, B, C;
  TensorView D, z, dt_bias;        // optional: leave undefined (data == nullptr)
  TensorView state_batch_indices;  // optional (B,)
  TensorView dst_state_indices;    // required with StateWrite::PerToken, else leave undefined
  TensorView out;                  // written for every token of every row but pad rows
  bool dt_softplus = false;
  float dt_min = 0.0f;  // dt is clamped to [dt_min, dt_max] after bias and softplus
  float dt_max = 0.0f;  // dt_max <= dt_min (the default) means no clamp; not NaN
  StateWrite state_write = StateWrite::Final;
};

void selective_state_update(const SelectiveStateUpdateArgs& args, Stream stream = nullptr);
void selective_state_update_tokens(const SelectiveStateUpdateArgs& args, Stream stream = nullptr);

// ---- Causal depthwise conv1d (the conv of every Mamba block) ----------------------------------

// Widest conv the ops take (weight (D, W), 2 <= W <= kMaxConvWidth).
constexpr int kMaxConvWidth = 8;

// How x and out lay out their axes (any strides either way; the kernel follows the memory order).
enum class ConvLayout : int {
  ChannelFirst = 0,  // (B, D, L)
  ChannelLast = 1,   // (B, L, D)
};

// Forward: out[b, d, t] = act(bias[d] + sum_{k<W} weight[d, k] * x[b, d, t - (W-1) + k]) with act
// SiLU (silu = true) or identity, and x before a sequence's first token read from its initial
// state (zeros without one). Shapes by layout: x, out (B, D, L) or (B, L, D); weight (D, W);
// bias (D,). Without packing, each row b is one sequence (nseq = B).
//
// Packed variable-length input: B == 1 and the row of L = T tokens holds several sequences, told
// apart by exactly one of
//   cu_seqlens (nseq + 1,): sequence i is tokens [cu[i], cu[i+1]), with 0 = cu[0] < cu[1] < ... <
//     cu[nseq] = T. It lives on the device, so the kernel checks it: a violation is reported by the
//     next checkDeviceErrors() (and out is then unspecified, but nothing is read or written out of
//     bounds);
//   seq_pos (1, T): each token's position in its sequence, 0 at each start (PackMamba): 0, or one
//     more than the token before (checked by the kernel, reported like cu_seqlens). Conv states
//     need cu_seqlens (positions do not say which sequence a token belongs to).
// The window never reaches into the previous sequence: out equals running each sequence alone.
//
// Dtypes: x, out fp32, bf16 or fp16; weight and bias fp32 or x's dtype; states fp32, bf16 or fp16;
// index tensors int32 or int64. Math is fp32. 64-bit offsets are used where a tensor needs them.
struct CausalConv1dArgs {
  TensorView x, weight;
  TensorView bias;  // optional (D,)
  TensorView out;   // x's shape
  ConvLayout layout = ConvLayout::ChannelFirst;
  bool silu = false;
  TensorView cu_seqlens;  // optional (nseq + 1,), int32/int64, on the device
  TensorView seq_pos;     // optional (1, T), int32/int64
  // Initial states (S, D, W-1): column j is the token at position j - (W-1) of the sequence
  // (just before its first token). Sequence i reads slot initial_state_indices[i] (-1: zeros), or
  // slot i without indices (then S must be >= nseq).
  TensorView initial_states;
  TensorView initial_state_indices;  // optional (nseq,), int32/int64
  // Final states (S, D, W-1): column j is the token at position len - (W-1) + j (the last W-1
  // tokens; for a sequence shorter than W-1, the older columns come from its initial state, or
  // are zeros). Written to slot final_state_indices[i] (-1: not written), or slot i. The same
  // tensor and slots as the initial states may be given (in-place update).
  TensorView final_states;
  TensorView final_state_indices;  // optional (nseq,), int32/int64
  // The caller will train: the first call of these arguments also compiles the kernels of their
  // backward (every gradient of a given input, dout like out, no state gradients), in parallel
  // with its own, so that the first backward finds them compiled (docs/performance.md, first
  // calls). Later calls are unaffected; errors compiling the backward's kernels are the
  // backward's to report.
  bool compile_backward = false;
};
void causal_conv1d(const CausalConv1dArgs& args, Stream stream = nullptr);

// Backward of causal_conv1d: given dout (the gradient of out) and, optionally, the gradient of
// the final states, the gradients of x, weight, bias and the initial states. The forward's inputs
// are given again, as they were (initial_states as the forward read them: not overwritten by an
// in-place forward); the pre-activation is recomputed when silu is set.
//   dx[t] = sum_{s<W} weight[d, W-1-s] * g[t + s], over the tokens t + s of t's own sequence,
//           plus dfinal_states where t is one of the last W-1 tokens of its sequence;
//   g = dout * act'(pre);  dweight[d, k] = sum_t g[t] * xx(t - (W-1) + k);  dbias[d] = sum_t g[t];
//   dinitial_states[slot, d, j] = the gradient of initial column j (position j - (W-1)).
// No gradient crosses a sequence boundary (dx of packed sequences equals each sequence's alone).
// Deterministic: dweight and dbias are summed in a fixed order, in two stages through the
// caller's workspace (float32, at least causal_conv1d_backward_workspace_size(args) elements;
// its contents on entry do not matter). Nothing is accumulated into the outputs: each is written.
struct CausalConv1dBackwardArgs {
  TensorView x, weight;
  TensorView bias;  // optional, as in the forward
  TensorView dout;  // x's shape
  ConvLayout layout = ConvLayout::ChannelFirst;
  bool silu = false;
  TensorView cu_seqlens;             // optional, as in the forward (checked by the kernels)
  TensorView seq_pos;                // optional, as in the forward
  TensorView initial_states;         // optional, as in the forward
  TensorView initial_state_indices;  // optional, as in the forward
  // Optional (S, D, W-1): the gradient of the forward's final states, read from slot
  // final_state_indices[i] (-1: none), or slot i. Needs cu_seqlens or dense rows.
  TensorView dfinal_states;
  TensorView final_state_indices;  // optional (nseq,), int32/int64
  TensorView dx;                   // x's shape and dtype family (fp32/bf16/fp16); not dout
  TensorView dweight;              // (D, W), fp32 or x's dtype
  TensorView dbias;                // optional (D,), only with bias
  // Optional, only with initial_states, its shape: written at the slots the sequences read
  // (slots no sequence reads are left as they are; sequences must read distinct slots).
  TensorView dinitial_states;
  TensorView workspace;  // float32, contiguous, on the device
};
// The workspace the call needs, in float32 elements (checks every argument but the workspace).
int64_t causal_conv1d_backward_workspace_size(const CausalConv1dBackwardArgs& args);
void causal_conv1d_backward(const CausalConv1dBackwardArgs& args, Stream stream = nullptr);

// Decode update: L new tokens per sequence against its conv state, in one launch (L = 1: the
// ordinary decode step; L > 1: the verify pass of speculative decoding).
//   conv_state (S, D, W-1), column j = the token W-1-j places before the next one;
//   x, out (B, L, D) with 1 <= L <= kMaxTokens; weight (D, W); bias (D,).
// Sequence b uses slot state_indices[b] (-1: a pad row, skipped, its out rows untouched), or slot
// b without indices (then S must equal B). With commit, the state advances by the L tokens; without,
// it is left as it was (verify only). A slot outside [0, S) (other than -1) skips that row and is
// reported by the next checkDeviceErrors().
struct CausalConv1dUpdateArgs {
  TensorView conv_state;
  TensorView x, weight;
  TensorView bias;           // optional (D,)
  TensorView state_indices;  // optional (B,), int32/int64
  TensorView out;
  bool silu = false;
  bool commit = true;
};
void causal_conv1d_update(const CausalConv1dUpdateArgs& args, Stream stream = nullptr);

// ---- Mamba-1 selective scan (training forward, prefill) ------------------------------------
//
// Per sequence, channel d and state n, over the sequence's tokens t = 0, 1, ... in order:
//   dt = delta[d, t] (+ delta_bias[d]); if delta_softplus: dt = dt > 20 ? dt : log1p(exp(dt));
//   h[n] = exp(dt * A[d, n]) * h[n] + dt * B[n, t] * u[d, t]   (h starts at the initial state, or 0)
//   y = sum_n C[n, t] * h[n] (+ D[d] * u[d, t]);   out[d, t] = y (* z * sigmoid(z) with z).
// Shapes (mamba_ssm's selective_scan_fn layout, channel-first): u, delta, z, out (Bt, D, L);
// A (D, N) fp32 with 1 <= N <= kMaxScanState; B and C each either constant (D, N) or
// time-varying (Bt, G, N, L) with D % G == 0 (channel d reads group d / (D / G)); D and
// delta_bias (D,) fp32. Without packing, each row b is one sequence (nseq = Bt).
//
// Packed variable-length input: Bt == 1 and the row of L = T tokens holds the sequences
// [cu_seqlens[i], cu_seqlens[i+1]) (int32/int64 on the device, 0 = cu[0] < cu[1] < ... < cu[nseq]
// = T, checked by the kernel and reported by checkDeviceErrors()). The scan restarts at each
// sequence: out equals running each sequence alone, bitwise. max_seqlen (optional, > 0): no
// sequence is longer (checked by the kernel); it bounds the launch grid (0: T).
//
// States (S, D, N), fp32/bf16/fp16: sequence i starts from slot initial_state_indices[i] of
// initial_states (-1: zeros), or slot i without indices; its final h goes to slot
// final_state_indices[i] of final_states (-1: not written), or slot i. The same tensor may be
// both (in-place update); two sequences must not share a slot.
//
// Long sequences are split into spans scanned in parallel and joined by a state-passing step
// (the decomposition of context parallelism): a first launch computes each span's end state
// from a zero start and its summed dt into the caller's workspace, the second combines them and
// scans every span from its true start. The span length depends only on D, N and the dtypes,
// never on the batch or the packing, so results do not depend on how sequences are batched.
// Workspace: float32, contiguous, at least selective_scan_workspace_size(args) elements (0 when
// no sequence can span more than one span and N <= 16; contents on entry do not matter).
//
// Dtypes: u, delta, z, out fp32, bf16 or fp16 (each may differ); B, C fp32, bf16 or fp16 when
// time-varying, fp32 when constant; A, D, delta_bias fp32; index tensors int32 or int64. Math is
// fp32; h stays in fp32 registers across the whole sequence. Strides >= 0 (u, delta, z, out, B,
// C time-varying: the token axis must have stride 1); 64-bit offsets where sizes need them.
// A program keeps up to 16 states of a channel in registers: beyond 16 the call runs once per chunk
// of states (N 256: sixteen chunks of 16), the chunks summing y in an fp32 plane of the workspace
// (Bt x D x L more elements).
constexpr int kMaxScanState = 256;
struct SelectiveScanArgs {
  TensorView u, delta;    // (Bt, D, L)
  TensorView A;           // (D, N) fp32
  TensorView B, C;        // (D, N) fp32 or (Bt, G, N, L)
  TensorView D;           // optional (D,) fp32
  TensorView z;           // optional (Bt, D, L)
  TensorView delta_bias;  // optional (D,) fp32
  bool delta_softplus = false;
  TensorView out;                    // (Bt, D, L); not u, delta or z
  TensorView cu_seqlens;             // optional (nseq + 1,), int32/int64, on the device
  int64_t max_seqlen = 0;            // optional bound on the packed sequences' lengths
  TensorView initial_states;         // optional (S, D, N)
  TensorView initial_state_indices;  // optional (nseq,), int32/int64
  TensorView final_states;           // optional (S, D, N)
  TensorView final_state_indices;    // optional (nseq,), int32/int64
  TensorView workspace;              // float32, contiguous, on the device
  // Sequences of at most serial_seqlen tokens are scanned serially (each state's plain recurrence
  // walked by one thread; a channel's states over 1, 2 or 4 threads as the call's sequences x
  // channels are many or few), longer ones by lanes in parallel (0, the default: every sequence).
  // The serial form's tiles sit on a packed row's grid wherever its sequences start, so a packed
  // row of many sequences runs at dense speed; calls of few sequences run slower than in parallel
  // (docs/performance.md). Which form scans a sequence follows from its length and this bound only,
  // so a packed sequence equals its own call bit for bit when both pass the same bound. With more
  // than 16 states it applies to each chunk of states.
  int64_t serial_seqlen = 0;
  // The caller will train: the first call of these arguments also compiles the kernels of their
  // backward (every gradient of a given input, dout like out, no state gradients), in parallel
  // with its own, so that the first backward finds them compiled (docs/performance.md, first
  // calls). Later calls are unaffected; errors compiling the backward's kernels are the
  // backward's to report.
  bool compile_backward = false;
};
// The workspace the call needs, in float32 elements (checks every argument but the workspace).
int64_t selective_scan_workspace_size(const SelectiveScanArgs& args);
void selective_scan(const SelectiveScanArgs& args, Stream stream = nullptr);

// ---- Mamba-1 selective scan backward (training) ---------------------------------------------
//
// The gradients of selective_scan for the same call: every input of `forward` as the forward
// read it (forward.out, forward.final_states and forward.workspace are not read;
// forward.final_state_indices maps dfinal_states' slots). Packed rows keep every gradient inside
// its sequence: the per-token gradients of a sequence equal running it alone, bitwise.
// Deterministic: no atomics; the sums over channels (dB, dC) and over tokens and sequences (dA,
// dD, ddelta_bias, constant dB/dC) run in a fixed order.
//
// How: a first launch re-runs the forward scan and keeps each channel's state every BLOCK_T
// tokens in the workspace. Sequences are split into spans (as the forward's, from each sequence's
// start; the span length depends only on D): when a sequence can have more than one, an adjoint
// pass runs the adjoint scan backwards over every span but the first from a zero end; the
// backward then runs one program per block of channels, sequence and span, which joins the later
// spans' adjoints to its end, walks its tiles from the last, recomputes each tile's states from
// the kept one and runs the adjoint scan backwards in time. A last launch sums the partial dB/dC
// (per block of channels) and dA/dD/ddelta_bias (per span). Over 16 states all of it runs once per
// chunk of 16 states, the per-token sums over states (du, ddelta, and y for dz) carried from
// chunk to chunk in three fp32 planes of the workspace.
//
// Dtypes: dout, du, ddelta, dz, time-varying dB/dC fp32, bf16 or fp16 (each may differ); dA, dD,
// ddelta_bias, constant dB/dC fp32; dinitial_states / dfinal_states fp32, bf16 or fp16. Every
// gradient is overwritten (not accumulated into). Outputs may not alias any input or each other.
struct SelectiveScanBackwardArgs {
  SelectiveScanArgs forward;   // the forward call (out, final_states, workspace,
                               // serial_seqlen and compile_backward unused)
  TensorView dout;             // (Bt, D, L): the gradient of out
  TensorView dfinal_states;    // optional (S, D, N): the gradient of the final states
  TensorView du, ddelta;       // (Bt, D, L)
  TensorView dA;               // (D, N) fp32
  TensorView dB, dC;           // B's / C's shape: (Bt, G, N, L), or (D, N) fp32
  TensorView dD;               // (D,) fp32: exactly when forward.D is given
  TensorView dz;               // (Bt, D, L): exactly when forward.z is given
  TensorView ddelta_bias;      // (D,) fp32: exactly when forward.delta_bias is given
  TensorView dinitial_states;  // optional (S, D, N), with forward.initial_states: slots as
                               // forward.initial_state_indices (-1: not written). Each
                               // sequence needs its own slot: the indices live on the device
                               // and are not checked, and a shared slot gets one sequence's
                               // gradient, not their sum (the reference throws on it).
  TensorView workspace;        // float32, contiguous, on the device
};
// The workspace the backward needs, in float32 elements (checks every argument but the workspace).
int64_t selective_scan_backward_workspace_size(const SelectiveScanBackwardArgs& args);
void selective_scan_backward(const SelectiveScanBackwardArgs& args, Stream stream = nullptr);

// ---- Mamba-2 SSD chunked scan (prefill, training forward) --------------------------------------
//
// Per sequence, head h (group g = h / (H / G)), head channel p, state n, tokens t in order:
//   dt' = dt[t, h] (+ dt_bias[h]); if dt_softplus: dt' = dt' > 20 ? dt' : log1p(exp(dt'));
//   if dt_max > dt_min: dt' = min(max(dt', dt_min), dt_max);
//   S[p, n] = exp(dt' A[h]) S[p, n] + dt' x[t, h, p] B[t, g, n]   (S starts at the initial state, or 0)
//   y = sum_n C[t, g, n] S[p, n] (+ D[h] or D[h, p] times x[t, h, p]);
//   out = y (* z sigmoid(z) with z).
// Shapes (mamba_ssm's mamba_chunk_scan_combined layout): x, z, out (Bt, L, H, P); dt (Bt, L, H);
// A (H,) fp32; B, C (Bt, L, G, N) with H % G == 0; D (H,) or (H, P) fp32; dt_bias (H,) fp32;
// 1 <= P <= kMaxSsdHeadDim, 1 <= N <= kMaxSsdState. Without packing each row b is one sequence.
//
// How: the state-space-duality form. Each sequence is cut into chunks of chunk_size tokens from
// its own start (64, 128 or 256); within a chunk the output is a masked matrix product on tensor
// cores, across chunks the states are passed on in fp32. Results do not depend on how sequences
// are batched or packed: a packed sequence equals its own call bitwise, and two runs are equal.
//
// Packed variable-length input: Bt == 1 and the row of L = T tokens holds the sequences
// [cu_seqlens[i], cu_seqlens[i+1]) (int32/int64 on the device, 0 = cu[0] < cu[1] < ... < cu[nseq]
// = T, checked by the kernel and reported by checkDeviceErrors()). No chunk straddles two
// sequences.
//
// States (S, H, P, N), fp32/bf16/fp16: sequence i starts from slot initial_state_indices[i] of
// initial_states (-1: zeros), or slot i without indices; its final state goes to slot
// final_state_indices[i] of final_states (-1: not written), or slot i. The same tensor may be
// both (in-place update). No two writes (final or block states) may target one slot of one
// tensor, and where tensors are shared no sequence may read a slot another writes; several
// sequences may read one initial slot (not with the backward's dinitial_states). A slot outside
// [0, S) other than -1, or a sequence with more blocks than kmax, is skipped and reported by the
// next checkDeviceErrors(); block_state_indices entries past a sequence's block count are not read.
// Without out, at least one of final_states, block_states or sequence_decay is required.
//
// Prefix caching: with block_state_tokens = K > 0 (a multiple of chunk_size), the state after
// token (k + 1) K of sequence i, for every k with (k + 1) K <= its length, goes to slot
// block_state_indices[i, k] of block_states (-1: not written; (nseq, kmax) with kmax at least the
// longest sequence's count of blocks).
//
// Context parallelism by state passing: a sequence cut over ranks is run per rank from a zero
// start without `out` (then only the states are computed), with sequence_decay, which takes
// exp(sum over the sequence's tokens of dt' A[h]) per (sequence, head) in fp32. The ranks combine
// (decay, final state) pairs by an exclusive scan, S_in(r) = decay(r-1) S_in(r-1) + S_final(r-1),
// and each rank runs the call again with S_in as its initial state to produce out.
//
// Dtypes: x, dt, B, C, z, out fp32, bf16 or fp16 (each may differ); A, D, dt_bias fp32; index
// tensors int32 or int64; states as above. Math is fp32 (tensor-core products of 16-bit inputs
// exact; fp32 operands split into 16-bit terms). Strides >= 0; the last axis of x, z, out, B and
// C must have stride 1 (a column slice of in_proj's output qualifies). 64-bit offsets where sizes
// need them. Workspace: float32, contiguous, at least ssd_workspace_size(args) elements.
constexpr int kMaxSsdHeadDim = 256;
constexpr int kMaxSsdState = 256;
struct SsdArgs {
  TensorView x;        // (Bt, L, H, P)
  TensorView dt;       // (Bt, L, H), raw (before dt_bias, softplus and the clamp)
  TensorView A;        // (H,) fp32
  TensorView B, C;     // (Bt, L, G, N)
  TensorView D;        // optional (H,) or (H, P) fp32
  TensorView z;        // optional (Bt, L, H, P)
  TensorView dt_bias;  // optional (H,) fp32
  bool dt_softplus = false;
  float dt_min = 0.0f;  // dt' clamp after bias and softplus; dt_max <= dt_min: none
  float dt_max = 0.0f;
  int chunk_size = 256;              // 64, 128 or 256
  TensorView out;                    // (Bt, L, H, P), not x or z; optional: states only
  TensorView y;                      // optional (Bt, L, H, P) fp32, with out: y before the gate
                                     // (D x included), kept for ssd_backward (forward.y), which
                                     // then does not recompute it
  TensorView cu_seqlens;             // optional (nseq + 1,), int32/int64, on the device
  TensorView initial_states;         // optional (S, H, P, N)
  TensorView initial_state_indices;  // optional (nseq,), int32/int64
  TensorView final_states;           // optional (S, H, P, N)
  TensorView final_state_indices;    // optional (nseq,), int32/int64
  int64_t block_state_tokens = 0;    // prefix-cache block K (a multiple of chunk_size); 0: none
  TensorView block_states;           // (S', H, P, N) with K > 0
  TensorView block_state_indices;    // (nseq, kmax) int32/int64 with K > 0
  TensorView sequence_decay;         // optional (nseq, H) fp32 output
  TensorView workspace;              // float32, contiguous, on the device
  // The caller will train: the first call of these arguments also compiles the kernels of their
  // backward (every gradient of a given input, dout like out, no state gradients), in parallel
  // with its own, so that the first backward finds them compiled (docs/performance.md, first
  // calls). Later calls are unaffected; errors compiling the backward's kernels are the
  // backward's to report.
  bool compile_backward = false;
};
// The workspace the call needs, in float32 elements (checks every argument but the workspace).
int64_t ssd_workspace_size(const SsdArgs& args);
void ssd(const SsdArgs& args, Stream stream = nullptr);

// The gradients of ssd for the same call: every input of `forward` as the forward read it
// (forward.out, final_states, block_states, sequence_decay and workspace are not read;
// forward.final_state_indices maps dfinal_states' slots). forward.y, where given, is read as the
// y that forward call wrote: the backward then runs every forward kernel but the output pass
// again (a training step saves that pass at the cost of keeping y, 4 bytes an element). Packed rows keep every gradient
// inside its sequence. Deterministic: no float atomics; sums over heads of a group (dB, dC), tokens and sequences (dA,
// dD, ddt_bias) run in a fixed order. ddt is the gradient of the raw dt: zero where dt' before the clamp lies strictly
// outside [dt_min, dt_max]. dout, dx, dz, dB and dC have their last axis with stride 1, as the forward's tensors.
// dinitial_states is written only at slots some sequence reads. Dtypes: dx, ddt, dB, dC, dz fp32, bf16 or fp16; dA, dD,
// ddt_bias fp32; dinitial_states fp32/bf16/fp16. Every gradient is overwritten. Outputs alias nothing.
struct SsdBackwardArgs {
  SsdArgs forward;             // the forward call
  TensorView dout;             // (Bt, L, H, P): the gradient of out
  TensorView dfinal_states;    // optional (S, H, P, N)
  TensorView dx;               // (Bt, L, H, P)
  TensorView ddt;              // (Bt, L, H)
  TensorView dA;               // (H,) fp32
  TensorView dB, dC;           // (Bt, L, G, N)
  TensorView dD;               // D's shape: exactly when forward.D is given
  TensorView dz;               // (Bt, L, H, P): exactly when forward.z is given
  TensorView ddt_bias;         // (H,) fp32: exactly when forward.dt_bias is given
  TensorView dinitial_states;  // optional (S, H, P, N), with forward.initial_states; slots as
                               // forward.initial_state_indices (-1: not written)
  TensorView workspace;        // float32, contiguous, on the device
};
int64_t ssd_backward_workspace_size(const SsdBackwardArgs& args);
void ssd_backward(const SsdBackwardArgs& args, Stream stream = nullptr);

// ---- Mamba-2 speculative decoding: activation replay with fused replay-and-verify ------------
//
// One Mamba-2 mixer layer's decode state, per sequence slot (Algorithm 2 of the speculative-
// decoding design). The verify pass runs L draft tokens from the committed state without
// committing, and caches each draft's pre-conv xBC and raw dt. Once c of those drafts are
// accepted, the replay runs only those c tokens through the conv and SSM state updates and
// commits both (post-conv x and B are recomputed from the cached pre-conv values: the same
// arithmetic as the verify, so the same values, and no post-conv cache to write and read). Each
// program of the launch runs the B and C conv of its heads' group itself (several heads a
// program at large batches), so no program waits for another.
// mamba2_decode_step does both in one launch: replay c_b tokens (c_b per sequence), commit, then
// verify the new drafts from the corrected state, writing y per draft and refilling the cache.
//
// Deferred commit (given a ring in the state): conv_state and ssm_state are a checkpoint, and a
// ring holds the r tokens accepted since it. Each step replays the ring's r tokens and the c newly
// accepted drafts from the checkpoint without writing the states, verifies the new drafts from
// there, and appends the c drafts to the ring; only when r + c would overflow the ring (depth R)
// are the states after the r + c tokens written and the ring emptied. Most steps then write no
// state; each replays up to R + Lc tokens. Results equal the commit-every-step mode's (the same
// per-token math in the same order; with a 16-bit state, rounded to it only at the commits).
//
// Sizes: H heads of P channels, state size N, G groups (H % G == 0; head h reads group h/(H/G)),
// conv width W (2..kMaxConvWidth), Dc = H*P + 2*G*N conv channels in in_proj's xBC order
// (x: channel h*P + p; B: H*P + g*N + n; C: H*P + G*N + g*N + n), S slots, cache depth Lc.
// Every tensor lives on the device; the caller allocates them (the op allocates nothing).
struct Mamba2DecodeState {
  TensorView conv_state;     // (S, Dc, W-1), as causal_conv1d_update's; fp32/bf16/fp16
  TensorView ssm_state;      // (S, H, P, N); fp32/bf16/fp16 (math in fp32)
  TensorView xbc_cache;      // (S, Lc, Dc): pre-conv xBC of the last verified drafts; xBC's dtype
  TensorView dt_cache;       // (S, Lc, H): their raw dt; dt's dtype
  TensorView cached_tokens;  // (S,) int32: how many drafts each slot's cache holds. Zero it when a
                             // slot starts a sequence; the step keeps it (verify sets L, replay 0)
  TensorView arrivals;       // (S,) int32, contiguous: the kernel's per-slot counter (a row's last
                             // program commits what all read). Zero it once at allocation; every
                             // step leaves it zero.
  // Deferred commit: all three, or none (commit every step). Ring depth R = xbc_ring.size(1) >= 1.
  TensorView xbc_ring;     // (S, R, Dc): pre-conv xBC of the tokens accepted since the checkpoint;
                           // xbc_cache's dtype
  TensorView dt_ring;      // (S, R, H): their raw dt; dt_cache's dtype
  TensorView ring_tokens;  // (S,) int32: tokens each slot's ring holds, 0..R. Zero it when a slot
                           // starts a sequence (or its states are set); the step keeps it
};

// The layer's parameters (unchanged between steps).
struct Mamba2MixerWeights {
  TensorView conv_weight;  // (Dc, W), fp32 or xBC's dtype
  TensorView conv_bias;    // optional (Dc,), like conv_weight
  TensorView A;            // (H,) fp32
  TensorView D;            // optional (H,) fp32
  TensorView dt_bias;      // optional (H,) fp32
  bool dt_softplus = true;
  float dt_min = 0.0f;  // dt clamp after bias and softplus; dt_max <= dt_min: none
  float dt_max = 0.0f;
};

// Which parts of the step run. With a ring (deferred commit), "the committed state" is the
// checkpoint followed by the ring's tokens.
enum class DecodeStepParts : int {
  ReplayAndVerify = 0,  // replay num_accepted[b] cached drafts and commit, then verify the new ones
  ReplayOnly = 1,       // replay and commit; the cache is then empty (cached_tokens = 0). With a
                        // ring: its tokens too; the states are written and the ring emptied
  VerifyOnly = 2,       // verify from the committed state; nothing committed
};

// One step for a batch of B sequences.
//   replay: c = num_accepted[b] (0 <= c <= cached_tokens[slot]) of the cached drafts, in order:
//     conv: window = the W-1 state columns then the token; post = silu(bias + sum_k w[k] window[k])
//     SSM (post-conv x, B of the token): dt' = softplus?(dt + dt_bias), clamped; state =
//     state * exp(A dt') + B dt' x. The conv and SSM states after the c tokens are committed
//     (stored in their slot; c = 0 stores nothing).
//   deferred (a ring given): r = ring_tokens[slot]; the replay runs the ring's r tokens, then the
//     c cached drafts, from the stored (checkpoint) states. If r + c > R, or with ReplayOnly (and
//     r + c > 0), the states after them are stored and ring_tokens[slot] = 0; else the c drafts
//     are copied to ring rows r..r+c-1 (xbc_ring, dt_ring) and ring_tokens[slot] = r + c.
//   verify: the L drafts of xBC / dt from the (corrected) state, the same per-token math, and
//     y = sum_n state * C (+ D x), times silu(z) with z; states not committed; xbc_cache and
//     dt_cache take the drafts, cached_tokens[slot] = L.
// Sequence b uses slot state_indices[b] (-1: pad row, skipped, y untouched), or b (then S == B).
// Distinct rows must use distinct slots. A slot outside [0, S), a count outside
// [0, cached_tokens[slot]] or a ring count outside [0, R] skips that row (nothing written for it)
// and is reported by the next checkDeviceErrors(). Fixed L and device-side counts: a step is
// capturable in a CUDA graph (in either mode).
struct Mamba2DecodeStepArgs {
  TensorView state_indices;  // optional (B,), int32/int64
  TensorView num_accepted;   // (B,) int32/int64, on the device; required unless VerifyOnly
  TensorView xBC;            // (B, L, Dc) pre-conv drafts, 1 <= L <= min(Lc, kMaxTokens); not ReplayOnly
  TensorView dt;             // (B, L, H) raw dt; not ReplayOnly
  TensorView z;              // optional (B, L, H, P); not ReplayOnly
  TensorView y;              // (B, L, H, P) output; not ReplayOnly
  DecodeStepParts parts = DecodeStepParts::ReplayAndVerify;
};
void mamba2_decode_step(const Mamba2DecodeState& state, const Mamba2MixerWeights& weights,
                        const Mamba2DecodeStepArgs& args, Stream stream = nullptr);

// ---- RMSNorm: the block's pre-norm with its residual add, and Mamba-2's gated grouped norm ----
//
// Both normalise each of T rows over its last axis (or over groups of it), in fp32, one read and
// one write of each element. Shapes: x, residual, residual_out, z, out (T, D) with a unit stride
// along D and any row stride (no broadcast: stride 0 only where T == 1); weight (D,), any stride.
// Dtypes: x fp32, bf16 or fp16; every other tensor fp32 or x's dtype. A group (D for rms_norm)
// holds at most kMaxNormGroup channels; D / group_size <= 65535 groups. All tensors on one CUDA
// device; T == 0 or D == 0 does nothing. Outputs are rounded once, to their dtype.
// In place: out may be x itself and residual_out residual itself (the same data, dtype, shape and
// strides); otherwise no output may share memory (the address range its view spans) with an input
// or with the other output.
constexpr int64_t kMaxNormGroup = 16384;

// rms_norm, mamba_ssm's rms_norm_fn with prenorm (residual_in_fp32: an fp32 residual_out):
//   r = x (+ residual);  residual_out = r (if given, with or without residual);
//   out = r * rsqrt(mean_D(r^2) + eps) * weight.
struct RmsNormArgs {
  TensorView x;             // (T, D)
  TensorView residual;      // optional (T, D)
  TensorView residual_out;  // optional (T, D); may be residual itself
  TensorView weight;        // (D,)
  TensorView out;           // (T, D); may be x itself
  float eps = 1e-5f;        // > 0 and finite
};
void rms_norm(const RmsNormArgs& args, Stream stream = nullptr);

// gated_rms_norm, Mamba-2's gated RMSNorm (mamba_ssm's RMSNormGated), normalised per group of
// group_size channels (group_size 0: D; D % group_size == 0):
//   norm_before_gate = false: g = x * silu(z); out = g * rsqrt(mean_group(g^2) + eps) * weight;
//   norm_before_gate = true:  out = x * rsqrt(mean_group(x^2) + eps) * weight * silu(z);
// without z, a plain grouped RMSNorm. silu(v) = v * sigmoid(v), with the hardware's exp2 and
// reciprocal (a few ulp).
struct GatedRmsNormArgs {
  TensorView x;       // (T, D)
  TensorView z;       // optional (T, D)
  TensorView weight;  // (D,)
  TensorView out;     // (T, D); may be x itself
  int64_t group_size = 0;
  bool norm_before_gate = false;
  float eps = 1e-5f;  // > 0 and finite
};
void gated_rms_norm(const GatedRmsNormArgs& args, Stream stream = nullptr);

// The gradients of gated_rms_norm (of a plain grouped RMSNorm without z) for the same call, in
// fp32 with rstd recomputed: with s = silu(z), h = x (norm first) or x * s (gate first), n = h *
// rsqrt(mean_group(h^2) + eps) and gn = dout (* s, norm first), dweight = sum over tokens of gn * n,
// and dx, dz the exact transposes. dout, dx and dz are (T, D) in x's dtype or fp32 with a unit
// stride along D (dz exactly when forward.z is given); dweight (D,) fp32 or the weight's dtype,
// summed in a fixed order (deterministic). Outputs are written, not accumulated, and alias no
// input or each other. Workspace: float32, contiguous, on the device, at least
// gated_rms_norm_backward_workspace_size(args) elements. Capturable after its first call.
struct GatedRmsNormBackwardArgs {
  GatedRmsNormArgs forward;  // the forward call; forward.out is not read
  TensorView dout;           // (T, D)
  TensorView dx;             // (T, D)
  TensorView dz;             // (T, D), exactly when forward.z is given
  TensorView dweight;        // (D,)
  TensorView workspace;      // float32, contiguous
};
int64_t gated_rms_norm_backward_workspace_size(const GatedRmsNormBackwardArgs& args);
void gated_rms_norm_backward(const GatedRmsNormBackwardArgs& args, Stream stream = nullptr);

// ---- Linear layers and the token embedding (in_proj, out_proj, lm_head) --------------------------

// y = x W^T (+ bias), through cuBLASLt (the CUDA toolkit's libcublasLt, loaded at the first call:
// without it the op throws Error(Unavailable) with the reason). Shapes: x (M, K); weight (N, K),
// row-major as PyTorch's nn.Linear stores it; bias (N,); y (M, N). M = 0 does nothing.
// Dtypes: x and weight both bf16 or both fp16 (products exact, fp32 accumulation), or both fp32
// (fp32 math, TF32 off); y in x's dtype or fp32; bias in y's dtype (contiguous, 16-byte aligned),
// added in fp32 before y's rounding. Split-K partial sums, where cuBLASLt picks them, are kept in fp32.
// Strides (elements): unit inner strides; row strides >= the row's length (K for x and weight, N
// for y: a padded row or a column slice of a wider tensor), any value for a single row; data
// pointers aligned to the element size. 16-byte-aligned pointers and row strides give cuBLASLt its
// fastest kernels. y may not overlap x, weight or bias. All tensors on one CUDA device.
// Workspace (optional): float32, contiguous, its start 256-byte aligned; split-K and some other
// algorithms need one, and cuBLASLt picks among the algorithms that fit in it. A call with a bias
// does not use it (cuBLASLt's split-K kernels with a bias epilogue are wrong for some shapes).
// The first call for a shape, dtypes, strides, alignment and workspace size (per thread and
// context) asks cuBLASLt's heuristic for the algorithm and keeps it with the call's descriptors;
// later calls cost one cublasLtMatmul. The first call in a context also creates its cuBLASLt
// handle: make both outside a CUDA graph capture; later calls are capturable (nothing allocated,
// no synchronisation).
struct LinearArgs {
  TensorView x, weight;
  TensorView bias;  // optional (N,)
  TensorView y;
  TensorView workspace;  // optional, float32
};
// A workspace that lets cuBLASLt choose among all its algorithms, in float32 elements (32 MiB:
// cuBLAS's own for Hopper). The same for every call; checks every argument but the workspace.
int64_t linear_workspace_size(const LinearArgs& args);
void linear(const LinearArgs& args, Stream stream = nullptr);

// The gradients of linear for the same x and weight: dx = dy W, dweight = dy^T x, dbias = the sum
// of dy's rows, each optional, each written (not accumulated), fp32 accumulation over N (dx) or M
// (dweight, dbias), through cuBLASLt like linear. dy (M, N) in x's dtype, unit inner stride. dx
// (M, K) in x's dtype or fp32; dweight (N, K) in weight's dtype or fp32; both with unit inner
// strides and row strides as linear's. dbias (N,) fp32 or dy's dtype, contiguous. Outputs alias no
// input and no other output. M = 0 writes zeros to dweight and dbias. Workspace: float32,
// contiguous, 256-byte aligned, at least linear_backward_workspace_size(args) elements (the GEMMs'
// share, and with dbias a column of M ones, refilled by every call). Capturable after the first
// call of a shape, as linear.
struct LinearBackwardArgs {
  TensorView x, weight;  // as given to linear
  TensorView dy;         // (M, N): the gradient of y
  TensorView dx;         // optional (M, K)
  TensorView dweight;    // optional (N, K)
  TensorView dbias;      // optional (N,)
  TensorView workspace;  // float32
};
int64_t linear_backward_workspace_size(const LinearBackwardArgs& args);
void linear_backward(const LinearBackwardArgs& args, Stream stream = nullptr);

// out[t, :] = table[ids[t], :]. ids (T,) int32/int64 on the device; table (V, D) fp32, bf16 or
// fp16; out (T, D) in table's dtype (an exact copy) or fp32. Any strides >= 0, no broadcast axis
// (stride 0 on an axis of size > 1). An id outside [0, V) writes zeros to its row of out and is
// reported by the next checkDeviceErrors(). T = 0 does nothing. Capturable in a CUDA graph after
// its first call (which compiles the kernel).
struct EmbeddingArgs {
  TensorView ids, table, out;
};
void embedding(const EmbeddingArgs& args, Stream stream = nullptr);

// ---- Token sampling (the generation loop's next token, on the device) -------------------------

// Picks one token per row of logits (B, V) into token_ids (B,), without leaving the device.
//   temperature <= 0: greedy, the arg max: the lowest index among equal maxima; NaN never wins; a
//     row of all NaN gives 0. step is neither read nor advanced.
//   temperature > 0: p = softmax(logits / temperature) over the drawable entries (NaN, -inf and
//     entries whose logit / temperature is at most -3e38 / log2(e) are never drawn; +inf counts
//     as 3e38 / log2(e)), restricted to the top_k largest (top_k <= 0 or >= V: all; ties at the
//     k-th value are all kept), then to the smallest set of largest p whose mass reaches top_p of
//     what top-k kept (top_p >= 1: all; ties at the threshold all kept), renormalised. The draw is
//     the first index v, in index order, where the running kept mass exceeds u times the kept
//     mass, with u in [0, 1) from Philox-4x32-10 keyed by (seed, key, step): key =
//     row_state_indices[b] (or b), step = the row's counter (reference::sample_uniform gives u;
//     reference::sample_probabilities the renormalised distribution). A row with nothing drawable
//     gives 0.
//   The sets are found by threshold searches (a fixed number of passes over the row, each a
//   masked count or sum, in float32): exact but for values of logit / temperature within 2^-24
//   of the search's bracket below the threshold, which are kept too. The bracket is at most
//   87 (= 126 ln 2: below that, float32 probabilities are 0) wide: top-k's the row's range,
//   top-p's usually ln(V / (1 - top_p)). Entries that close count as ties.
//   Passes over the row: greedy 1; temperature only 2; top-k 2 + 13; top-p 2 + 12; both 2 + 25.
// Deterministic (no atomics, sums in a fixed order): the same inputs, seed and steps give the same
// tokens. Capturable in a CUDA graph: the counter lives on the device and the op advances it
// (step (B,): each drawn row's own entry, by 1; step (1,): shared by every row, by 1 per call,
// in a second launch), so each replay of a graph draws fresh numbers.
// Shapes: logits (B, V), V >= 1, fp32/bf16/fp16, unit stride along V, any row stride (> 0 when
// B > 1); token_ids (B,) int32/int64; step (1,) or (B,) int64; row_state_indices (B,)
// int32/int64, -1 marks a pad row (skipped: token_ids[b] and step[b] left as they are). All on one
// CUDA device. B == 0 does nothing.
struct SampleArgs {
  TensorView logits;         // (B, V)
  TensorView token_ids;      // (B,) int32/int64, output
  float temperature = 0.0f;  // <= 0: greedy, else >= 1e-30; not NaN
  int top_k = 0;             // <= 0: no top-k restriction
  float top_p = 1.0f;        // 0 < top_p; >= 1: no top-p restriction
  uint64_t seed = 0;
  TensorView step;               // required when temperature > 0: (1,) or (B,) int64 device counter
  TensorView row_state_indices;  // optional (B,) int32/int64: the RNG key per row; -1 = pad row
};
void sample_tokens(const SampleArgs& args, Stream stream = nullptr);

// Synchronises `stream` and throws if a kernel since the last check found a bad index (a slot, a
// token id, cu_seqlens).
void checkDeviceErrors(Stream stream = nullptr);

}  // namespace ssmjit

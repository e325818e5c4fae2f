// Float64 CPU references of the ops, for tests, the demo and host programs that check results.
// Slow and simple: they index every tensor by its documented layout and share nothing with the
// GPU path except the argument check, so that a mistake in one is not repeated in the other.
#pragma once
#include <cstdint>
#include <vector>

#include "ssmjit/ops.h"

namespace ssmjit::reference {

// Selective state update, one token / L tokens: the arguments, shapes, layouts, write modes and
// checks of ssmjit::selective_state_update(_tokens) (ops.h), on CPU tensors (device CPU) of any
// supported dtype and strides. Updates state and out in place.
//
// Per sequence b (slot s = state_batch_indices[b], or b; -1: pad, skipped, out untouched) and per
// token t, with every input read as the value it stores (bf16/fp16/fp32 exactly in double):
//   dt' = dt (+ dt_bias);  if dt_softplus: dt' = dt' > 20 ? dt' : log1p(exp(dt'));
//   if dt_max > dt_min: dt' = min(max(dt', dt_min), dt_max);
//   state = state * exp(A * dt') + (B * dt') * x;  y = sum_n state * C;
//   if D: y += x * D;  if z: y *= z * sigmoid(z);  out = y (rounded to out's dtype).
// Mamba-2: head h reads group g = h / (H / G) of B and C, and dt, A, D, dt_bias per head.
//
// The running state is kept in float64 across the L tokens and rounded to state's storage dtype
// only when written: after the last token (StateWrite::Final) or as each token's snapshot
// (PerToken; the running state itself stays unrounded). The GPU kernel does the same in fp32
// registers, so the two differ by fp32 arithmetic only, not by extra 16-bit roundings.
//
// A slot outside [0, S) in state_batch_indices (other than -1), or in dst_state_indices of a
// row that is not a pad (other than -1), throws ssmjit::Error(InvalidArgument) before anything is
// written. (The GPU kernel skips such a row or write and reports it through checkDeviceErrors();
// its result equals this reference with that index set to -1.) Rows whose write slots overlap
// other rows' read slots are a race on the GPU; here rows run in order b = 0, 1, ...
void selective_state_update(const SelectiveStateUpdateArgs& args);
void selective_state_update_tokens(const SelectiveStateUpdateArgs& args);

// Causal depthwise conv1d: the arguments, shapes, layouts, packing, states and checks of
// ssmjit::causal_conv1d (ops.h), on CPU tensors (device CPU) of any supported dtype and strides.
// Writes out and the final states.
//
// Per sequence (a row b, or the tokens [cu[i], cu[i+1]) of the packed row), channel d and
// position t in the sequence, with every input read as the value it stores (in double):
//   out[t] = act(bias[d] + sum_{k<W} weight[d, k] * xx(t - (W-1) + k)),  act = SiLU (v / (1 +
//   exp(-v))) with silu, else identity;
//   xx(p) = x at position p for p >= 0; for p < 0, column (W-1) + p of the sequence's initial
//   state (slot initial_state_indices[i], or i), or 0 without initial states or with slot -1.
// With seq_pos, a token at position p reads at most p tokens before it (0 in their place); no
// states. The final state of sequence i, column j, is xx(len - (W-1) + j), written (rounded to
// final_states' dtype) to slot final_state_indices[i], or i; slot -1 or no final_states: not
// written. Outputs are rounded once, to out's dtype.
//
// Everything is computed from the inputs before anything is written, so initial_states and
// final_states may be the same tensor (in-place update). cu_seqlens is read here (a CPU tensor):
// cu[0] != 0, a step that does not increase, or cu[nseq] != T throws
// ssmjit::Error(InvalidArgument) naming cu_seqlens; so does a seq_pos entry that is neither 0
// nor one more than the token before, and a slot outside [0, S) other than -1 in
// initial_state_indices or final_state_indices. All throw before anything is written. (The
// GPU op reports these through checkDeviceErrors() instead.)
void causal_conv1d(const CausalConv1dArgs& args);

// Causal conv1d backward: the arguments and checks of ssmjit::causal_conv1d_backward (ops.h) on
// CPU tensors, but for the workspace (ignored). Writes dx, dweight, dbias (if given) and
// dinitial_states (if given). The exact transpose of causal_conv1d above, inputs read as stored,
// every sum in double: per token, g = dout * act'(pre) with pre recomputed as the forward does
// (SiLU'(v) = s (1 + v (1 - s)), s = sigmoid(v); identity: 1); each tap k of the token's window
// adds g * weight[d, k] to the gradient of what it read (dx of a token of the same sequence, or
// dinitial_states at the initial state's column; nothing for a zero) and g * (what it read) to
// dweight[d, k]; dbias[d] = sum g. Then dfinal_states[f, d, j] (slot f = final_state_indices[i],
// or i; -1: none) goes to what final column j of sequence i read (position len - (W-1) + j: a
// token, or an initial-state column for a sequence shorter than W-1). With seq_pos, a token at
// position p reaches p tokens back. Every output is rounded once to its dtype; dx, dweight and
// dbias are written whole, dinitial_states only at the slots the sequences read (others are left
// as they are).
//
// cu_seqlens and the slot indices are checked as causal_conv1d checks them; with dinitial_states,
// two sequences reading the same initial slot also throw ssmjit::Error(InvalidArgument) naming
// initial_state_indices (ops.h asks for distinct slots). All before anything is written.
void causal_conv1d_backward(const CausalConv1dBackwardArgs& args);

// Causal conv1d decode update: the arguments and checks of ssmjit::causal_conv1d_update (ops.h)
// on CPU tensors. Per row b (slot s = state_indices[b], or b; -1: pad, skipped, out untouched),
// per channel d, for each of the L tokens in order: the window is the W-1 state columns then the
// token; out = act(bias[d] + sum_k weight[d, k] * window[k]) (rounded to out's dtype); the
// state shifts left by one and takes the token in its last column. With commit the state after
// the last token is stored into slot s (rounded to conv_state's dtype), else the state is left
// as it was. A slot outside [0, S) other than -1 throws ssmjit::Error(InvalidArgument) before
// anything is written. Rows run in order b = 0, 1, ... (rows sharing a slot are a race on the
// GPU).
void causal_conv1d_update(const CausalConv1dUpdateArgs& args);

// Mamba-2 decode step (replay and/or verify): the arguments, shapes and checks of
// ssmjit::mamba2_decode_step (ops.h) on CPU tensors, every value in double: per row b (slot s;
// -1: skipped), the replay runs c = num_accepted[b] cached drafts (conv window then the SSM
// update, states kept unrounded in double) and, for c > 0, stores both states into slot s
// (rounded to their dtypes); the verify runs the L drafts from the state the replay left (the
// unrounded double state and window, as the GPU keeps them in registers), writes y (rounded),
// copies the drafts into xbc_cache / dt_cache and sets cached_tokens[s] = L; replay alone sets it
// to 0. With a ring (deferred commit) the replay runs the ring's r = ring_tokens[s] tokens before
// the c drafts, stores the states only if r + c > R (or with replay only, r + c > 0) and then
// sets ring_tokens[s] = 0, else copies the c drafts to ring rows r.. and sets it to r + c. A slot
// outside [0, S) other than -1, c outside [0, cached_tokens[s]] or r outside [0, R] throws
// ssmjit::Error(InvalidArgument) before anything is written (the GPU skips the row and reports
// it). arrivals is not touched.
void mamba2_decode_step(const Mamba2DecodeState& state, const Mamba2MixerWeights& weights,
                        const Mamba2DecodeStepArgs& args);

// Linear layer: the arguments and checks of ssmjit::linear (ops.h) on CPU tensors, but for the
// workspace (ignored). y[m, n] = sum_k x[m, k] weight[n, k] (+ bias[n]), summed in double from the
// stored values and rounded once to y's dtype.
void linear(const LinearArgs& args);
// Its gradients: the checks of ssmjit::linear_backward but for the workspace (ignored); dx, dweight
// and dbias as sums in double of the inputs as stored, each rounded once.
void linear_backward(const LinearBackwardArgs& args);

// Token embedding: the arguments and checks of ssmjit::embedding (ops.h) on CPU tensors. out[t, :]
// = table[ids[t], :], converted to out's dtype. An id outside [0, V) throws
// ssmjit::Error(InvalidArgument) naming it before anything is written (the GPU op writes zeros to
// that row and reports it through checkDeviceErrors()).
void embedding(const EmbeddingArgs& args);

// IEEE binary16 and bfloat16 conversions from and to double: round to nearest, ties to even,
// in one step from double (no double rounding through float); overflow gives ±inf, NaN stays
// NaN (quiet), signed zeros and subnormals are kept.
uint16_t toHalfBits(double v);
uint16_t toBFloat16Bits(double v);
double fromHalfBits(uint16_t bits);
double fromBFloat16Bits(uint16_t bits);

// Selective scan (Mamba-1): the arguments, shapes, packing, states and checks of
// ssmjit::selective_scan (ops.h), on CPU tensors of any supported dtype and strides. Writes out
// and the final states. Per sequence, channel d, token t, in double, from every input as stored:
//   dt = delta (+ delta_bias); softplus: dt > 20 ? dt : log1p(exp(dt));
//   h[n] = exp(dt A[d, n]) h[n] + dt B[n, t] u;  y = sum_n C[n, t] h[n] (+ D u) (* z sigmoid(z)).
// h starts at the sequence's initial state (slot -1 or none: zeros) and stays in double; out
// and the final states are rounded once. All initial states are read before any final state is
// written (in-place updates). cu_seqlens is read here: a bad entry, a sequence longer than
// max_seqlen (when > 0) or a slot outside [0, S) other than -1 throws
// ssmjit::Error(InvalidArgument) before anything is written (the GPU op reports these through
// checkDeviceErrors() instead). The workspace is not used.
void selective_scan(const SelectiveScanArgs& args);

// The gradients of selective_scan (ssmjit::selective_scan_backward's contract and checks), in
// double from every input as stored: the forward recomputed per sequence, then the adjoint
// g[n] (of h[n]) walked from the sequence's end (starting at dfinal_states' slot, or 0):
//   dy = dout (* silu(z)); dz = dout y' dsilu(z) (y' = y before gating); g[n] += C[n, t] dy;
//   du = dy D + sum_n g[n] dt B[n, t]; ddt = sum_n g[n] (B[n, t] u + A[d, n] exp(dt A) h_prev[n]);
//   dA += g dt exp(dt A) h_prev; dB += g dt u; dC += dy h; dD += dy u;
//   ddelta = ddt (* sigmoid(delta + delta_bias) with softplus where delta + delta_bias <= 20,
//   else 1: softplus passes larger values through); ddelta_bias += ddelta; g[n] = exp(dt A) g[n] before the previous
//   token; dinitial_states = g at the sequence's start.
// Sums over channels (dB, dC of a group), tokens and sequences are in double, rounded once.
void selective_scan_backward(const SelectiveScanBackwardArgs& args);

// Mamba-2 SSD chunked scan: the arguments, shapes, packing, states and checks of ssmjit::ssd
// (ops.h), on CPU tensors of any supported dtype and strides. Writes out (when given), the final
// states, the block states and sequence_decay. Not chunked: the plain recurrence per sequence,
// head h (group g = h / (H / G)) and channel p, in double from every input as stored:
//   dt' = dt (+ dt_bias); softplus: dt' > 20 ? dt' : log1p(exp(dt')); clamp when dt_max > dt_min;
//   S[n] = exp(dt' A[h]) S[n] + dt' x B[g, n];  y = sum_n C[g, n] S[n] (+ D x) (* z sigmoid(z)).
// S starts at the sequence's initial state (slot -1 or none: zeros). The state after token
// (k + 1) K goes to block_state_indices[i, k] (-1: not written); sequence_decay[i, h] =
// exp(sum over the sequence of dt' A[h]). chunk_size does not change the result. Every output
// is rounded once; all initial states are read before anything is written (in-place updates).
// cu_seqlens and every slot index are read here: a bad cu_seqlens entry, a slot outside [0, S)
// other than -1, a sequence with more blocks than block_state_indices has columns, two writes
// to one slot of a tensor, or a slot one sequence reads and another writes (same tensor) throws
// ssmjit::Error(InvalidArgument) before anything is written (the GPU op reports cu_seqlens
// through checkDeviceErrors() instead). The workspace is not used.
void ssd(const SsdArgs& args);

// The gradients of ssd (ssmjit::ssd_backward's contract and checks), in double from every input
// as stored: per sequence, head and channel the forward recomputed, then the adjoint g[n] (of
// the state after token t) from the sequence's end, starting at dfinal_states' slot
// (forward.final_state_indices[i], or i; -1 or none: 0):
//   dy = dout (* silu(z)); dz = dout y' dsilu(z) (y' before the gate); g[n] += C[g, n] dy;
//   dx = dy D + sum_n g[n] dt' B[g, n]; d dt' = sum_{p, n} g[n] (B[g, n] x + A exp(dt' A) S_prev[n]);
//   dA += g dt' exp(dt' A) S_prev; dB += g dt' x; dC += dy S; dD += dy x (per head, or (h, p));
//   g[n] *= exp(dt' A) before the previous token; dinitial_states = g at the sequence's start.
// ddt = d dt' times sigmoid(dt + dt_bias) through the softplus where dt + dt_bias <= 20 (else
// 1), and 0 where the clamp binds (dt' before the clamp outside [dt_min, dt_max]); ddt_bias =
// sum of ddt. Sums over a group's heads (dB, dC), channels, tokens and sequences run in double
// and are rounded once. dinitial_states is written only at the slots sequences read (two
// sequences reading one slot throw, as do the forward's bad cu_seqlens and slots).
void ssd_backward(const SsdBackwardArgs& args);

// RMSNorm and gated RMSNorm: the arguments and checks of ssmjit::rms_norm / gated_rms_norm
// (ops.h), on CPU tensors of any supported dtype and strides. Per row, in double from every
// input as stored: r = x (+ residual); residual_out = r; out = r / sqrt(mean(r^2) + eps) *
// weight; gated: g = x * silu(z) (norm_before_gate off) or x, out = g / sqrt(mean_group(g^2) +
// eps) * weight (* silu(z) with norm_before_gate), silu(v) = v / (1 + exp(-v)). Each output is
// rounded once, to its dtype. A row's inputs are all read before its outputs are written, so the
// in-place calls the ops allow give the ops' results here too.
void rms_norm(const RmsNormArgs& args);
void gated_rms_norm(const GatedRmsNormArgs& args);
// The gradients of gated_rms_norm: the checks of ssmjit::gated_rms_norm_backward but for the
// workspace (ignored); dx, dz and dweight in double from the inputs as stored, each rounded once.
void gated_rms_norm_backward(const GatedRmsNormBackwardArgs& args);

// Token sampling: the arguments, checks and result of ssmjit::sample_tokens (ops.h) on CPU
// tensors, in double. Writes token_ids and advances step as the op does (each drawn row's entry
// of a (B,) step; a (1,) step once per call). Each row's token is sample_draw(p, u) of
// p = sample_probabilities(its logits as stored, ...) and u = sample_uniform(seed, key, step) with
// key = row_state_indices[b] (or b); pad rows (-1) are left untouched. The GPU op makes the same
// choice but where u falls within its float32 rounding of a boundary of the running mass, and its
// kept sets may also hold values within its search resolution below a threshold (ops.h).
void sample_tokens(const SampleArgs& args);

// The uniform in [0, 1) that sampling draws for (seed, key, step): the first word w of
// Philox-4x32-10 on counter (step's low, high word, key's low, high word) with key (seed's low,
// high word), as (w / 256) * 2^-24.
double sample_uniform(uint64_t seed, int64_t key, int64_t step);

// The distribution a row of logits is drawn from (ops.h's sample_tokens): zero outside the kept
// set, summing to 1 (all zeros when nothing is drawable). temperature <= 0: one-hot at the arg max
// (the lowest index among equal maxima, NaN never; all NaN: index 0).
std::vector<double> sample_probabilities(const std::vector<double>& logits, double temperature, int top_k,
                                         double top_p);

// The first index where the running sum of p exceeds u (the last index with p > 0 when rounding
// leaves the sum short; 0 when p is all zeros).
int64_t sample_draw(const std::vector<double>& p, double u);

}  // namespace ssmjit::reference

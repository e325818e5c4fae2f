// Float64 CPU references of the ops, for tests, the demo and host programs that check results.
// Slow and simple: they index every tensor by its documented layout and share nothing with the
// GPU path except the argument check, so that a mistake in one is not repeated in the other.
#pragma once
#include <cstdint>

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

// IEEE binary16 and bfloat16 conversions from and to double: round to nearest, ties to even,
// in one step from double (no double rounding through float); overflow gives ±inf, NaN stays
// NaN (quiet), signed zeros and subnormals are kept.
uint16_t toHalfBits(double v);
uint16_t toBFloat16Bits(double v);
double fromHalfBits(uint16_t bits);
double fromBFloat16Bits(uint16_t bits);

}  // namespace ssmjit::reference

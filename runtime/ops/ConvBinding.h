// The bindings the causal-conv1d forward and backward kernels share: the forward's inputs (x,
// weight, bias, initial states, packing) under the same declarations in both kernels' signatures
// (kernels_dsl/conv/CausalConv1d.h). Internal to the runtime.
#pragma once
#include <cstdint>

#include "compiler/IntMath.h"
#include "kernels_dsl/Signature.h"
#include "runtime/ops/CausalConv1dCheck.h"
#include "runtime/ops/KernelCall.h"
#include "runtime/ops/SequenceBinding.h"

namespace ssmjit::detail {

inline unsigned gridDim(int64_t v) { return static_cast<unsigned>(v); }

// A tensor shaped like x, as the kernels index it: [b, t, d] whatever the memory order, the row
// stride 0 for a single row.
inline Axes convRows(const ConvDims& d) {
  return {d.batch > 1 ? 0 : kNoAxis, d.channelLast ? 1 : 2, d.channelLast ? 2 : 1};
}

// S: kConvFwd or kConvBwd; Args: CausalConv1dArgs or CausalConv1dBackwardArgs (the same input
// fields).
template <const dsl::Signature& S, class Args>
void bindConvInputs(KernelCall& c, const Args& a, const ConvDims& d, void* err) {
  c.tensor(S.tensor("x"), a.x, convRows(d));
  c.tensor(S.tensor("weight"), a.weight);
  c.tensor(S.tensor("bias"), a.bias);
  c.tensor(S.tensor("init"), a.initial_states);
  c.tensor(S.tensor("cu"), a.cu_seqlens);
  c.tensor(S.tensor("pos"), a.seq_pos, {1});
  c.tensor(S.tensor("init_idx"), a.initial_state_indices);
  c.pointer(S.tensor("err"), err, DType::I64);
  c.size(S.size("D"), d.D);
  c.size(S.size("L"), d.L);
  c.size(S.size("nseq"), d.nseq);
  c.size(S.size("nslots"), d.initSlots);
  c.size(S.size("search_steps"), log2Ceil(d.nseq) + 1);
  c.flag(S.flag("has_bias"), a.bias.defined());
  c.flag(S.flag("silu"), a.silu);
  c.flag(S.flag("has_cu"), d.packedCu);
  c.flag(S.flag("has_pos"), d.packedPos);
  c.flag(S.flag("has_init"), a.initial_states.defined());
  c.flag(S.flag("has_init_idx"), a.initial_state_indices.defined());
  c.meta("meta:width", d.W);
  c.meta("meta:channel_last", d.channelLast);
}

// The per-sequence launches' sequences: their rows and state slots (`finalSlots`: final_states' or
// dfinal_states' slots).
template <const dsl::Signature& S, class Args>
void bindConvSequences(KernelCall& c, const Args& a, const ConvDims& d, int64_t finalSlots, void* err) {
  bindSequences<S>(c,
                   {d.D, d.L, d.nseq, d.packedCu, a.cu_seqlens, a.initial_state_indices, d.initSlots,
                    a.final_state_indices, finalSlots},
                   err);
}

}  // namespace ssmjit::detail

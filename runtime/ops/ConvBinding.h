// The bindings the causal-conv1d forward and backward kernels share: the forward's inputs (x,
// weight, bias, initial states, packing) under the same argument names in both kernels'
// contracts (kernels_dsl/CausalConv1d.h). Internal to the runtime.
#pragma once
#include <cstdint>

#include "compiler/IntMath.h"
#include "kernels_dsl/Dsl.h"
#include "runtime/ops/CausalConv1dCheck.h"
#include "runtime/ops/KernelCall.h"

namespace ssmjit::detail {

// x and its companions are indexed [b, t, d] whatever the memory order.
inline int convTimeAxis(const ConvDims& d) { return d.channelLast ? 1 : 2; }
inline int convChanAxis(const ConvDims& d) { return d.channelLast ? 2 : 1; }
inline unsigned gridDim(int64_t v) { return static_cast<unsigned>(v); }

// The row, time and channel strides of a tensor shaped like x (the names are literals).
inline void bindConvRows(KernelCall& c, const ArgIndex& A, const TensorView& t, const ConvDims& d,
                         const char* sb, const char* st, const char* sd) {
  c.stride(A(sb), d.batch > 1 ? t.strides[0] : 0);
  c.stride(A(st), t.strides[convTimeAxis(d)]);
  c.stride(A(sd), t.strides[convChanAxis(d)]);
}

// The slot, channel and column strides of a states tensor (0 when absent).
inline void bindStateStrides(KernelCall& c, const ArgIndex& A, const TensorView& t, const char* ss,
                             const char* sd, const char* sk) {
  c.stride(A(ss), strideOr0(t, 0));
  c.stride(A(sd), strideOr0(t, 1));
  c.stride(A(sk), strideOr0(t, 2));
}

// Args: CausalConv1dArgs or CausalConv1dBackwardArgs (the same input fields).
template <class Args>
void bindConvInputs(KernelCall& c, const ArgIndex& A, const Args& a, const ConvDims& d, void* err) {
  const TensorView& is = a.initial_states;
  c.pointer(A("x"), a.x, DType::F32, true);
  c.pointer(A("weight"), a.weight, DType::F32, true);
  c.pointer(A("bias"), a.bias, DType::F32, true);
  c.pointer(A("init"), is, DType::F32, true);
  c.pointer(A("cu"), a.cu_seqlens, DType::I32, false);
  c.pointer(A("pos"), a.seq_pos, DType::I32, false);
  c.pointer(A("init_idx"), a.initial_state_indices, DType::I32, false);
  c.pointer(A("err"), err, DType::I64);
  c.size(A("D"), d.D, true);
  c.size(A("L"), d.L, false);
  c.count(A("nseq"), d.nseq);
  c.count(A("nslots"), d.initSlots);
  c.count(A("search_steps"), log2Ceil(d.nseq) + 1);
  bindConvRows(c, A, a.x, d, "s_x_b", "s_x_t", "s_x_d");
  c.stride(A("s_w_d"), a.weight.strides[0]);
  c.stride(A("s_w_k"), a.weight.strides[1]);
  c.stride(A("s_bias_d"), strideOr0(a.bias, 0));
  bindStateStrides(c, A, is, "s_init_slot", "s_init_d", "s_init_k");
  c.stride(A("s_cu"), strideOr0(a.cu_seqlens, 0));
  c.stride(A("s_pos_t"), strideOr0(a.seq_pos, 1));
  c.stride(A("s_init_idx"), strideOr0(a.initial_state_indices, 0));
  c.flag(A("has_bias"), a.bias.defined());
  c.flag(A("silu"), a.silu);
  c.flag(A("has_cu"), d.packedCu);
  c.flag(A("has_pos"), d.packedPos);
  c.flag(A("has_init"), is.defined());
  c.flag(A("has_init_idx"), a.initial_state_indices.defined());
  c.meta("meta:width", d.W);
  c.meta("meta:channel_last", d.channelLast);
}

}  // namespace ssmjit::detail

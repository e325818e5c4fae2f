// The argument checks of the causal-conv1d ops, shared by the GPU ops and the float64 CPU
// reference so that both accept exactly the same calls. Internal to the runtime.
#pragma once
#include <cstdint>

#include "ssmjit/ops.h"

namespace ssmjit::detail {

// The sizes of one causal_conv1d call, as the check derived them.
struct ConvDims {
  int64_t batch = 0;  // x's batch (1 when packed)
  int64_t D = 0, L = 0, W = 0;
  int64_t nseq = 0;          // sequences: batch, or cu_seqlens.size(0) - 1
  bool channelLast = false;  // args.layout == ChannelLast
  bool packedCu = false;     // cu_seqlens given
  bool packedPos = false;    // seq_pos given
  int64_t initSlots = 0;     // initial_states.size(0) (0 without)
  int64_t finalSlots = 0;    // final_states.size(0) (0 without)
};

// Checks every argument (ranks, shapes across tensors, dtypes, devices, strides >= 0 and no
// broadcast axis on x/out/states, alignment to the element size, the packing and state options
// and their consistency) and returns the sizes. `op` leads every message; every tensor must be
// on `device`. Throws ssmjit::Error(InvalidArgument) naming the argument, the expected and the
// actual value. Reads no tensor data (cu_seqlens' values are checked by the kernel, or by the
// reference on the CPU).
ConvDims checkConv1dArgs(const CausalConv1dArgs& args, DeviceKind device, const char* op);

// The sizes of one causal_conv1d_backward call (initSlots from initial_states; finalSlots 0).
struct ConvBackwardDims : ConvDims {
  int64_t dfinalSlots = 0;  // dfinal_states.size(0) (0 without)
};
// Checks every argument of causal_conv1d_backward except `workspace` (the op checks it against
// the size its launch plan needs), as checkConv1dArgs does: the forward's inputs by the same
// rules (dfinal_states and final_state_indices as final_states and its indices), dout as out;
// dx required, x's shape, fp32/bf16/fp16, no broadcast axis, and not x's or dout's data; dweight
// required and dbias (only with bias) as weight and bias but without broadcast; dinitial_states
// only with initial_states, of its shape (fp32/bf16/fp16, no broadcast).
ConvBackwardDims checkConv1dBackwardArgs(const CausalConv1dBackwardArgs& args, DeviceKind device, const char* op);

// The sizes of one causal_conv1d_update call.
struct ConvUpdateDims {
  int64_t batch = 0, L = 0, D = 0, W = 0;
  int64_t S = 0;  // conv_state slots
};
ConvUpdateDims checkConv1dUpdateArgs(const CausalConv1dUpdateArgs& args, DeviceKind device, const char* op);

}  // namespace ssmjit::detail

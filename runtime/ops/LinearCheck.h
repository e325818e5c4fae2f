// The argument checks of linear and linear_backward, shared by the GPU op and the float64 CPU reference so that both
// accept exactly the same calls. Internal to the runtime.
#pragma once
#include <cstdint>

#include "ssmjit/ops.h"

namespace ssmjit::detail {

// y (M, N) = x (M, K) weight (N, K)^T.
struct LinearDims {
  int64_t M = 0, N = 0, K = 0;
};

// Checks every argument of one linear call but the workspace (ranks, shapes across tensors,
// dtypes, devices, unit inner strides, row strides, alignment to the element size, y overlapping
// an input) and returns the sizes. `op` leads every message; every tensor must be on `device`.
// Throws ssmjit::Error(InvalidArgument) naming the argument, the expected and the actual value.
LinearDims checkLinearArgs(const LinearArgs& args, DeviceKind device, const char* op);

// The workspace, when given: float32, contiguous, on x's device, 256-byte aligned (cuBLASLt's
// requirement for its workspace).
void checkLinearWorkspace(const LinearArgs& args, const char* op);

// linear_backward's arguments but the workspace: x and weight as linear's, dy, and each gradient
// given.
LinearDims checkLinearBackwardArgs(const LinearBackwardArgs& args, DeviceKind device, const char* op);

// A workspace given to cuBLASLt: its start 256-byte aligned.
void checkGemmWorkspaceAlignment(const TensorView& workspace, const char* op);

}  // namespace ssmjit::detail

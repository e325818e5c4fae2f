// The argument checks of linear and embedding, shared by the GPU ops and the float64 CPU
// references so that both accept exactly the same calls. Internal to the runtime.
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

// out (T, D) = table (V, D) rows at ids (T,).
struct EmbeddingDims {
  int64_t T = 0, V = 0, D = 0;
};
EmbeddingDims checkEmbeddingArgs(const EmbeddingArgs& args, DeviceKind device, const char* op);

}  // namespace ssmjit::detail

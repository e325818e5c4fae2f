// The argument check of the selective-state-update ops, shared by the GPU ops and the float64 CPU
// reference so that both accept exactly the same calls. Internal to the runtime.
#pragma once
#include <cstdint>

#include "ssmjit/ops.h"

namespace ssmjit::detail {

// The sizes of one call, as the check derived them. Mamba-1 is the case H = G = 1, P = dim.
struct SsuDims {
  bool mamba2 = false;
  bool tokens = false;  // the multi-token form: x, dt, B, C, z, out, dst carry a token axis
  int64_t batch = 0;    // x.size(0)
  int64_t L = 1;        // tokens per sequence (1 for the one-token op)
  int64_t S = 0;        // state slots: state.size(0)
  int64_t H = 1, P = 0, N = 0, G = 1;
};

// Checks every argument of one call (ranks, shapes across tensors, dtypes, devices, strides,
// alignment to the element size, the write mode and its index tensors) and returns the sizes.
// `op` leads every message; every tensor must be on `device` (CUDA for the ops, CPU for the
// reference). Throws ssmjit::Error(InvalidArgument) naming the argument, the expected and the
// actual value. Reads no tensor data, so it runs before anything touches the GPU.
SsuDims checkSsuArgs(const SelectiveStateUpdateArgs& args, bool tokens, DeviceKind device, const char* op);

}  // namespace ssmjit::detail

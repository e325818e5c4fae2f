// The argument check of embedding, shared by the GPU op and the float64 CPU reference so that both
// accept exactly the same calls. Internal to the runtime.
#pragma once
#include <cstdint>

#include "ssmjit/ops.h"

namespace ssmjit::detail {

// out (T, D) = table (V, D) rows at ids (T,).
struct EmbeddingDims {
  int64_t T = 0, V = 0, D = 0;
};
// Checks every argument (ranks, shapes, dtypes, devices, strides, alignment to the element size)
// and returns the sizes. Reads no tensor data: the ids are checked by the kernel (or the reference).
EmbeddingDims checkEmbeddingArgs(const EmbeddingArgs& args, DeviceKind device, const char* op);

}  // namespace ssmjit::detail

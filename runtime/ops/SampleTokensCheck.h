// The argument check of sample_tokens, shared by the GPU op and the float64 CPU reference so that
// both accept exactly the same calls. Internal to the runtime.
#pragma once
#include <cstdint>

#include "ssmjit/ops.h"

namespace ssmjit::detail {

// The sizes and mode of one call, as the check derived them.
struct SampleDims {
  int64_t batch = 0, V = 0;
  bool greedy = false;   // temperature <= 0
  bool topK = false;     // 0 < top_k < V (otherwise top-k keeps everything)
  bool topP = false;     // top_p < 1
  bool perRow = false;   // step is (B,) (else (1,), shared); sampling only
};

// Checks every argument (ranks, shapes, dtypes, devices, strides, alignment; temperature, top_p;
// step required when sampling) and returns the sizes. `op` leads every message; every tensor
// must be on `device`. Throws ssmjit::Error(InvalidArgument) naming the argument, the expected
// and the actual value. Reads no tensor data.
SampleDims checkSampleArgs(const SampleArgs& args, DeviceKind device, const char* op);

}  // namespace ssmjit::detail

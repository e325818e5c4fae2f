// The argument checks of rms_norm, gated_rms_norm and its backward, shared by the GPU ops and the float64 CPU
// references so that both accept exactly the same calls. Internal to the runtime.
#pragma once
#include <cstdint>

#include "ssmjit/ops.h"

namespace ssmjit::detail {

// The sizes of one call, as the check derived them.
struct NormDims {
  int64_t T = 0, D = 0;
  int64_t groupSize = 0;  // D for rms_norm and for group_size 0
  int64_t groups() const { return groupSize ? D / groupSize : 0; }
};

// Checks every argument (ranks, shapes, dtypes, devices, strides >= 0 with a unit stride along D,
// alignment to the element size, eps, the group size, outputs apart from the inputs or exactly
// one of them) and returns the sizes. `op` leads every message; every tensor must be on `device`.
// Throws ssmjit::Error(InvalidArgument) naming the argument, the expected and the actual value.
NormDims checkRmsNormArgs(const RmsNormArgs& args, DeviceKind device, const char* op);
NormDims checkGatedRmsNormArgs(const GatedRmsNormArgs& args, DeviceKind device, const char* op);
// The forward's arguments but its out (not read), then dout, dx, dz and dweight; the workspace is
// the op's to check.
NormDims checkGatedRmsNormBackwardArgs(const GatedRmsNormBackwardArgs& args, DeviceKind device, const char* op);

}  // namespace ssmjit::detail

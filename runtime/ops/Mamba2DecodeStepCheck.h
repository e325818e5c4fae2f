// The argument check of mamba2_decode_step, shared by the GPU op and the float64 CPU reference so
// that both accept exactly the same calls. Internal to the runtime.
#pragma once
#include <cstdint>

#include "ssmjit/ops.h"

namespace ssmjit::detail {

// The sizes of one call, as the check derived them.
struct DecodeStepDims {
  int64_t batch = 0;  // rows B (num_accepted.size(0), or xBC.size(0))
  int64_t L = 0;      // drafts verified this step (0 with ReplayOnly)
  int64_t S = 0;      // slots
  int64_t Lc = 0;     // cache depth (xbc_cache.size(1))
  int64_t R = 0;      // ring depth (xbc_ring.size(1)); 0: no ring, commit every step
  int64_t H = 0, P = 0, N = 0, G = 0, W = 0;
  int64_t Dc = 0;  // conv channels H*P + 2*G*N
  bool replay = false, verify = false;
  bool deferred() const { return R > 0; }
};

// Checks every argument (ranks, shapes across tensors, dtypes, devices, strides >= 0 and no
// broadcast axis on per-row or per-slot tensors, alignment to the element size, the parts and the
// tensors they need, the ring: all three tensors or none) and returns the sizes. `op` leads every
// message; every tensor must be on `device`. Throws ssmjit::Error(InvalidArgument) naming the
// argument, the expected and the actual value. Reads no tensor data (slots and counts are checked
// by the kernel, or by the reference on the CPU).
DecodeStepDims checkDecodeStepArgs(const Mamba2DecodeState& state, const Mamba2MixerWeights& weights,
                                   const Mamba2DecodeStepArgs& args, DeviceKind device, const char* op);

}  // namespace ssmjit::detail

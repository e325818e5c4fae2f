// A problem's tensors on the GPU: the same bytes as the host problem (gaps and poison included)
// and the same strides, with the call's arguments pointing at them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/DeviceBuffer.h"
#include "ssmjit/ops.h"
#include "tools/problems/SsuProblem.h"

namespace ssmjit::testing {

struct DeviceProblem {
  std::vector<DeviceBuffer> bufs;  // SsuTensor order; empty for undefined tensors
  SelectiveStateUpdateArgs args;   // p.args() with CUDA views into bufs

  explicit DeviceProblem(const SsuProblem& p);
  // Copies every tensor's bytes from `p` (resets the state, re-poisons out) and waits for the
  // copies: pageable uploads may still be in flight on the legacy stream, and ops may run on
  // another stream.
  void upload(const SsuProblem& p);
  std::vector<uint8_t> download(size_t k) const;  // the bytes of tensor k (an SsuTensor)
};

}  // namespace ssmjit::testing

// The device status record: how a kernel reports a bad argument it can only see on the device (a
// state slot index out of range) without trapping, which would poison the whole context.
// Internal to the runtime; the public check is ssmjit::checkDeviceErrors (ssmjit/ops.h).
#pragma once
#include <cstdint>
#include <string>

namespace ssmjit {

// Layout of the record (int64[4], zero = no error); the first error wins:
//   [0] code (kernels::kErr*), [1] row b, [2] offending value, [3] bound.
inline constexpr int kDeviceStatusWords = 4;

// The record of the current context (made current with driver::ensureContext()), allocated with
// cuMemAlloc and zeroed on first use, then reused by every op and stream in that context and never
// freed (32 bytes per context). The ops pass it as the kernel argument "err".
// The first call in a context allocates and so must not happen inside a CUDA graph capture; the
// ops' first (compiling) call is outside capture anyway. Thread-safe.
void* deviceStatusRecord();

// Text of the error a non-zero record describes ("selective_state_update: state_batch_indices[3]
// = 7 is out of range [0, 4) and not -1 (padding); that row was skipped"). Pure; no GPU needed.
std::string deviceStatusMessage(const int64_t record[kDeviceStatusWords]);

}  // namespace ssmjit

// The swizzled shared-memory layouts of Hopper's tensor cores as the DSL's buffers take them
// (sj.shared_buffer's `swizzle`), shared by the IR's checks, the emitter's carving and the kernels'
// schedules.
#pragma once
#include <cstdint>

namespace ssmjit {

// The row widths, in bytes, of the swizzled layouts wgmma reads.
constexpr bool isSwizzleBytes(int64_t bytes) { return bytes == 32 || bytes == 64 || bytes == 128; }

// Where a dynamic shared buffer starts in the kernel's one extern array: at a multiple of a
// 128-byte line, so that its bank pattern is the one its offsets say; a swizzled one at a multiple
// of 1024 bytes, where its pattern begins.
constexpr int64_t dynamicBufferAlignment(bool swizzled) { return swizzled ? 1024 : 128; }
// The byte offset of the next dynamic buffer after `used` bytes of those before it.
constexpr int64_t dynamicBufferStart(int64_t used, bool swizzled) {
  const int64_t a = dynamicBufferAlignment(swizzled);
  return (used + a - 1) / a * a;
}

}  // namespace ssmjit

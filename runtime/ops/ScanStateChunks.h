// How the selective-scan ops cut a call's N states into chunks that one program holds in
// registers: the kernels run once per chunk on the chunk's A, B, C and states (every state's
// recurrence is independent of the others'; only the sums over states, y and the backward's
// per-token gradients, cross chunks: the ops carry those in fp32 workspace planes). Internal to
// the runtime.
#pragma once
#include <algorithm>
#include <cstdint>

#include "ssmjit/ops.h"

namespace ssmjit::detail {

// The most states one program of the scan kernels holds: they keep a channel's states (and the
// backward its per-state sums) in registers, unrolled over the states. The forward takes 16 too:
// against chunks of 32, the second pass over the inputs costs dense rows of 17-32 states a few
// percent, while one long sequence runs faster (the tiles of 16 states) and the kernels compile in
// under half the time (docs/performance.md, first calls).
inline constexpr int64_t kScanStateChunk = 16;  // the serial form's limit too (SelectiveScan.h)
inline constexpr int64_t kScanBwdStateChunk = 16;

// N states as `count` chunks of `size` (the last of N - (count - 1) * size) within `bound`: as
// even as multiples of 4 allow (chunks then start 16-byte aligned in A and fp32 states, one
// alignment class for all), so few specialisations of a kernel serve a call.
struct ScanStateChunks {
  int64_t count = 1, size = 0;
  int64_t first(int64_t k) const { return k * size; }
  int64_t length(int64_t k, int64_t N) const { return k + 1 < count ? size : N - k * size; }
};
inline ScanStateChunks scanStateChunks(int64_t N, int64_t bound) {
  ScanStateChunks c;
  c.count = (N + bound - 1) / bound;
  c.size = c.count == 1 ? N : std::min(bound, ((N + c.count - 1) / c.count + 3) / 4 * 4);
  return c;
}

// `a` on states [n0, n0 + nc): A, B, C, initial and final states narrowed along their state axis.
SelectiveScanArgs narrowStates(const SelectiveScanArgs& a, bool bVarying, bool cVarying, int64_t n0, int64_t nc);

}  // namespace ssmjit::detail

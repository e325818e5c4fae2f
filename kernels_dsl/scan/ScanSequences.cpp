#include "kernels_dsl/scan/ScanSequences.h"

#include "kernels_dsl/conv/ConvTiles.h"

#include <algorithm>
#include <vector>

namespace ssmjit::kernels {
using namespace dsl;

ScanSequence scanSequence(KernelBuilder& k, Value hasCu, Value cu, Value sCu, Value L, Value nseq, Value i) {
  Value zeroI = k.constInt(0);
  std::vector<Value> se = k.ifElse(
      hasCu,
      [&] {
        return std::vector<Value>{k.load(cu, i * sCu), k.load(cu, (i + 1) * sCu), zeroI};
      },
      [&] {
        return std::vector<Value>{zeroI, L, i};
      });
  Value start = se[0], end = se[1];
  Value bad = hasCu && badCuSeqlensEntry(i, start, end, nseq, L);
  return {start, end, se[2], bad};
}

Value firstScanKey(KernelBuilder& k, const ScanSequence& s, Value perRow, int64_t unit, Value hasCu, Value i) {
  return s.row * perRow + s.start / unit + k.select(hasCu, i, k.constInt(0));
}

Value programSequence(KernelBuilder& k, const Specialization& spec, Value cu, Value sCu, Value nseq, Value z) {
  if (spec.get("meta:longest_first") == 0 || spec.get("has_cu", 0) == 0) return z;
  const int64_t ranked = std::max<int64_t>(64, spec.get("meta:BLOCK_D")), lanes = spec.get("meta:time_lanes");
  return k.ifElse(
      nseq <= ranked,
      [&] {
        Value zeroI = k.constInt(0), oneI = k.constInt(1);
        // [ranked, lanes]: a few sequences a thread rather than all, the same in each lane.
        Value r = k.broadcastTo(k.expandDims(k.range(ranked), 1), {ranked, lanes}), in = r < nseq;
        Value len = k.load(cu, (r + 1) * sCu, in, zeroI) - k.load(cu, r * sCu, in, zeroI);
        // rank_r = #{j : len_j > len_r, or len_j == len_r and j < r}
        std::vector<Value> rank =
            k.forLoop(zeroI, nseq, oneI, {k.splat(zeroI, {ranked, lanes})}, [&](Value j, const std::vector<Value>& c) {
              Value lj = k.load(cu, (j + 1) * sCu) - k.load(cu, j * sCu);
              Value before = (lj > len) || ((lj == len) && (j < r));
              return std::vector<Value>{c[0] + k.select(before, oneI, zeroI)};
            });
        return std::vector<Value>{k.reduce(k.reduce(k.select(in && (rank[0] == z), r, zeroI), 1, "max"), 0, "sum")};
      },
      [&] { return std::vector<Value>{z}; })[0];
}

bool scanTilesWhole(const Specialization& spec, int64_t BT) {
  return spec.get("has_cu", 1) == 0 && spec.provesMultiple("L", BT) && spec.get("meta:span") % BT == 0;
}

int64_t scanSpanForWidth(int64_t D) {
  int64_t span = 256;
  while (span < 2048 && span * 5 <= D) span *= 2;
  return span;
}

}  // namespace ssmjit::kernels

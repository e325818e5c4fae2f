#include "kernels_dsl/ScanSequences.h"

#include "kernels_dsl/ConvTiles.h"

#include <vector>

namespace ssmjit::kernels {
using namespace dsl;

ScanSequence scanSequence(KernelBuilder& k, Value hasCu, Value cu, Value sCu, Value L, Value nseq, Value i) {
  Value zeroI = k.constInt(0);
  std::vector<Value> se = k.ifElse(hasCu, [&] {
    return std::vector<Value>{k.load(cu, i * sCu), k.load(cu, (i + 1) * sCu), zeroI};
  }, [&] { return std::vector<Value>{zeroI, L, i}; });
  Value start = se[0], end = se[1];
  Value bad = hasCu && badCuSeqlensEntry(i, start, end, nseq, L);
  return {start, end, se[2], bad};
}

Value firstScanKey(KernelBuilder& k, const ScanSequence& s, Value perRow, int64_t unit, Value hasCu, Value i) {
  return s.row * perRow + s.start / unit + k.select(hasCu, i, k.constInt(0));
}

int64_t scanSpanForWidth(int64_t D) {
  int64_t span = 256;
  while (span < 2048 && span * 5 <= D) span *= 2;
  return span;
}

}  // namespace ssmjit::kernels

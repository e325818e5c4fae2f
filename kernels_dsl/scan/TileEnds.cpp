#include "kernels_dsl/scan/TileEnds.h"

namespace ssmjit::kernels {
using namespace dsl;

TileEnds scanTileEnds(KernelBuilder& k, Value dt, const std::vector<Value>& A2, const std::vector<Value>& carries,
                      const std::function<Value(int64_t)>& term, bool reverse) {
  // Forward: sum_{s>t} dt_s (the reverse inclusive sum less dt_t); reverse: sum_{s<=t} dt_s.
  std::vector<Value> sums = k.cumulativeSum(dt, 1, !reverse);
  Value decayExp = reverse ? sums[0] : sums[0] - dt;
  TileEnds e;
  e.dtSum = sums[1];
  for (size_t n = 0; n < A2.size(); ++n) {
    Value w = k.exp2(decayExp * k.expandDims(A2[n], 1));
    e.carries.push_back(k.exp2(e.dtSum * A2[n]) * carries[n] + k.reduce(term(int64_t(n)) * w, 1, "sum"));
  }
  return e;
}

}  // namespace ssmjit::kernels

// The conv backward's rounding of dx, for the bounds its tests hold it to (Tolerance.h).
#pragma once
#include <algorithm>
#include <cstdint>

#include "tools/problems/ConvProblem.h"

namespace ssmjit::testing {

// The fraction of dx's elements the backward rounds twice: with d(final states), the W - 1 tokens
// before each sequence's end get dfinal added by a second kernel, after the first stored dx.
inline double dxTwiceRounded(const ConvBackwardCase& c) {
  if (!c.dfinalStates || c.xType == DType::F32) return 0;
  int64_t tokens = 0, tail = 0;
  for (int64_t len : c.lens) {
    tokens += len;
    tail += std::min<int64_t>(len, c.W - 1);
  }
  return tokens ? double(tail) / double(tokens) : 0;
}

}  // namespace ssmjit::testing

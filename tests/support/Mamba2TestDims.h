// A layer's dims from the five sizes the tests vary; the rest keep Mamba2Dims's defaults.
#pragma once
#include <cstdint>

#include "ssmjit/mamba2.h"

namespace ssmjit::testing {

inline Mamba2Dims mamba2Dims(int64_t hidden, int64_t heads, int64_t headDim, int64_t state, int64_t groups) {
  Mamba2Dims d;
  d.hidden = hidden;
  d.heads = heads;
  d.head_dim = headDim;
  d.state = state;
  d.groups = groups;
  return d;
}

}  // namespace ssmjit::testing

// The five sizes of a Mamba-2 layer that the tests vary, set on either struct that names them
// alike (Mamba2Dims, TinyMamba2); every other member keeps its default.
#pragma once
#include <cstdint>

#include "ssmjit/mamba2.h"

namespace ssmjit::testing {

template <class Sizes>
Sizes withLayerSizes(int64_t hidden, int64_t heads, int64_t headDim, int64_t state, int64_t groups) {
  Sizes s;
  s.hidden = hidden;
  s.heads = heads;
  s.head_dim = headDim;
  s.state = state;
  s.groups = groups;
  return s;
}

inline Mamba2Dims mamba2Dims(int64_t hidden, int64_t heads, int64_t headDim, int64_t state, int64_t groups) {
  return withLayerSizes<Mamba2Dims>(hidden, heads, headDim, state, groups);
}

}  // namespace ssmjit::testing

// Fake CUDA tensors for the CPU tests of the checks and the specialisations: tensor k starts at
// 0x10000 + k * 16 MiB (16-byte aligned, far apart) and is never dereferenced; only its
// alignment class is read.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "ssmjit/tensor.h"

namespace ssmjit::testing {

inline void* fakeAddress(int k) { return reinterpret_cast<void*>(uintptr_t{0x10000} + uintptr_t(k) * 0x1000000); }

inline TensorView fakeView(int k, DType t, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(fakeAddress(k), t, shape);
}

}  // namespace ssmjit::testing

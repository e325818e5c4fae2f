// Filling benchmark tensors on the device with random values, fast: one random block of up to
// 1 Mi elements, uploaded repeatedly. Drawing every element of hundreds of MB on the host would
// take longer than the benchmark (the scan bench's tensors took about a minute); the values only
// need to be finite and in range.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <random>

#include "runtime/DeviceBuffer.h"
#include "ssmjit/tensor.h"

namespace ssmjit::tool {

// Fills `count` elements at byte `offset` of `buf` with U(lo, hi) in `dtype`.
void fillDeviceUniform(DeviceBuffer& buf, size_t offset, DType dtype, int64_t count, double lo, double hi,
                       std::mt19937_64& rng);

// A contiguous device tensor of `shape` filled with U(lo, hi) (zeros when lo == hi == 0).
struct DeviceTensor {
  DeviceBuffer buf;
  TensorView view;
  DeviceTensor(DType t, std::initializer_list<int64_t> shape, double lo, double hi, std::mt19937_64& rng);
  // A contiguous tensor of `like`'s dtype and shape.
  DeviceTensor(const TensorView& like, double lo, double hi, std::mt19937_64& rng);

 private:
  void fill(double lo, double hi, std::mt19937_64& rng);
};

}  // namespace ssmjit::tool

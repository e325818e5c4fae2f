// One element of a tensor as a double, and back: the reference's only way of reading and writing
// tensor data, shared with the test and benchmark drivers (tools/problems) so that every host-side
// producer and reader of 16-bit floats goes through the conversions of ssmjit/reference.h. Inline:
// the reference calls these for every element. Internal to the runtime.
#pragma once
#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "ssmjit/error.h"
#include "ssmjit/reference.h"
#include "ssmjit/tensor.h"

namespace ssmjit::reference {

// The element `offset` elements past t.data (offset = sum of index * stride), exactly as stored.
inline double loadElement(const TensorView& t, int64_t offset) {
  const char* p = static_cast<const char*>(t.data) + offset * dtypeBytes(t.dtype);
  switch (t.dtype) {
    case DType::F32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::F16:
    case DType::BF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return t.dtype == DType::F16 ? fromHalfBits(h) : fromBFloat16Bits(h);
    }
    case DType::I32: {
      int32_t i;
      std::memcpy(&i, p, 4);
      return i;
    }
    case DType::I64: {
      int64_t i;
      std::memcpy(&i, p, 8);
      return static_cast<double>(i);
    }
  }
  throw Error(Error::Kind::Internal, "reference: unknown dtype");
}

// Stores `v` there in t's dtype: floats rounded to nearest even (16-bit floats in one step from
// double), integers truncated.
inline void storeElement(const TensorView& t, int64_t offset, double v) {
  char* p = static_cast<char*>(t.data) + offset * dtypeBytes(t.dtype);
  switch (t.dtype) {
    case DType::F32: {
      const auto f = static_cast<float>(v);  // round to nearest even
      std::memcpy(p, &f, 4);
      return;
    }
    case DType::F16:
    case DType::BF16: {
      const uint16_t h = t.dtype == DType::F16 ? toHalfBits(v) : toBFloat16Bits(v);
      std::memcpy(p, &h, 2);
      return;
    }
    case DType::I32: {
      const auto i = static_cast<int32_t>(v);
      std::memcpy(p, &i, 4);
      return;
    }
    case DType::I64: {
      const auto i = static_cast<int64_t>(v);
      std::memcpy(p, &i, 8);
      return;
    }
  }
  throw Error(Error::Kind::Internal, "reference: unknown dtype");
}

// The offset of element idx of t, and the element itself.
inline int64_t offsetOf(const TensorView& t, std::initializer_list<int64_t> idx) {
  int64_t off = 0, k = 0;
  for (int64_t i : idx) off += i * t.strides[k++];
  return off;
}
inline double el(const TensorView& t, std::initializer_list<int64_t> idx) { return loadElement(t, offsetOf(t, idx)); }
inline void put(const TensorView& t, std::initializer_list<int64_t> idx, double v) {
  storeElement(t, offsetOf(t, idx), v);
}

// An index tensor's element (int32 or int64) exactly.
inline int64_t loadIndex(const TensorView& t, int64_t off) {
  const char* p = static_cast<const char*>(t.data) + off * dtypeBytes(t.dtype);
  if (t.dtype == DType::I32) {
    int32_t i;
    std::memcpy(&i, p, 4);
    return i;
  }
  int64_t i;
  std::memcpy(&i, p, 8);
  return i;
}

}  // namespace ssmjit::reference

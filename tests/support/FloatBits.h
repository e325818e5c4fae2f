// The bits of floats as the DSL's tests build inputs and check outputs bitwise: f32's, bf16's
// (rounded to nearest even, as the device's cvt.rn) and f16's of small integers (exact).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "ssmjit/dtype.h"

namespace ssmjit::testing {

inline uint32_t bitsOf(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}
inline float fromBits(uint32_t u) {
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}
// Round to nearest even, as the device's cvt.rn does (finite inputs).
inline uint16_t toBf16(float v) {
  const uint32_t u = bitsOf(v);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline uint16_t toF16Exact(float v) {  // v an integer of magnitude below 2048: exact in f16
  if (v == 0) return std::signbit(v) ? 0x8000 : 0;
  int e;
  const float m = std::frexp(std::fabs(v), &e);  // |v| = m 2^e, m in [0.5, 1)
  const uint32_t mant = static_cast<uint32_t>(std::ldexp(m, 11)) & 0x3ffu;
  return static_cast<uint16_t>((v < 0 ? 0x8000u : 0u) | (static_cast<uint32_t>(e - 1 + 15) << 10) | mant);
}
// A small integer's bits in `dtype` (bf16 or f16), exact in either.
inline uint16_t smallIntegerBits(float v, DType dtype) { return dtype == DType::F16 ? toF16Exact(v) : toBf16(v); }

}  // namespace ssmjit::testing

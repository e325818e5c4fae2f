// Integer arithmetic for block sizes, grids and index widths, shared by the kernels' schedules
// (kernels_dsl) and the ops that launch them (runtime).
#pragma once
#include <cstdint>

namespace ssmjit {

inline bool isPow2(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }
inline int64_t nextPow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}
inline int64_t log2Ceil(int64_t n) {  // smallest k with 2^k >= n
  int64_t k = 0;
  while ((int64_t(1) << k) < n) ++k;
  return k;
}
inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace ssmjit

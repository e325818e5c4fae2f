// The check of the DSL's dot tests: with small-integer operands every product and sum is exact in
// f32, so out [M, N] must equal the integer product a . b bit for bit; the first five mismatches
// are reported.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "tests/support/FloatBits.h"

namespace ssmjit::testing {

inline void expectIntegerProduct(const std::vector<float>& out, int64_t M, int64_t N, int64_t K,
                                 const std::function<float(int64_t m, int64_t k)>& a,
                                 const std::function<float(int64_t k, int64_t n)>& b) {
  int bad = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double want = 0;
      for (int64_t k = 0; k < K; ++k) want += double(a(m, k)) * b(k, n);
      if (bitsOf(out[m * N + n]) != bitsOf(static_cast<float>(want)) && bad++ < 5)
        ADD_FAILURE() << "out[" << m << "][" << n << "] = " << out[m * N + n] << ", want " << want;
    }
  EXPECT_EQ(bad, 0);
}

}  // namespace ssmjit::testing

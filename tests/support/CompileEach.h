// NVRTC-compiles every kernel an op's call needs: the kernel tests' common check.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "kernels_dsl/CompileKernel.h"

namespace ssmjit::testing {

// Expects `count` specialisations, each compiling to a CUBIN; `check` then looks at each kernel
// (its resources, say). Failures name the specialisation.
inline void expectEachCompiles(const std::vector<Specialization>& specs, size_t count,
                               const std::function<void(const Specialization&, const CompiledKernel&)>& check = {}) {
  ASSERT_EQ(specs.size(), count);
  for (const Specialization& spec : specs) {
    SCOPED_TRACE(spec.canonical());
    const CompiledKernel k = compileKernel(spec);
    EXPECT_FALSE(k.cubin.empty());
    if (check) check(spec, k);
  }
}

}  // namespace ssmjit::testing

// The context-parallel state scan's kernel on the CPU: it goes through the whole pipeline and
// NVRTC for sm_90a and sm_80 without spilling, for Mamba-2 2.7B's state (P 64, N 128) and an odd
// one; the number of ranks is a loop bound, not part of the kernel.
#include <gtest/gtest.h>

#include <cstdint>

#include "GpuTest.h"  // SSMJIT_REQUIRE_NVRTC
#include "kernels_dsl/CompileKernel.h"
#include "runtime/parallel/CpStateScan.h"

using ssmjit::DType;
using ssmjit::TensorView;

namespace {

void* fake(int k) { return reinterpret_cast<void*>(uintptr_t{0x10000} + uintptr_t(k) * 0x1000000); }

ssmjit::Specialization spec(int64_t H, int64_t PN, int64_t ranks, int64_t rank, const char* arch) {
  const TensorView sum = TensorView::contiguous(fake(1), DType::F32, {ranks, H + H * PN});
  const TensorView out = TensorView::contiguous(fake(2), DType::F32, {H * PN});
  return ssmjit::detail::cpStateScanSpecialization(sum, rank, H, PN, out, arch);
}

}  // namespace

TEST(CpStateScanKernels, CompilesForEveryArchAndShape) {
  SSMJIT_REQUIRE_NVRTC();
  for (const char* arch : {"sm_90a", "sm_80"})
    for (auto [H, PN] : {std::pair<int64_t, int64_t>{80, 64 * 128}, std::pair<int64_t, int64_t>{3, 5 * 7}}) {
      const ssmjit::Specialization s = spec(H, PN, 4, 3, arch);
      SCOPED_TRACE(s.canonical());
      const ssmjit::CompiledKernel k = ssmjit::compileKernel(s);
      EXPECT_FALSE(k.cubin.empty());
      EXPECT_EQ(k.resources.spillStoreBytes, 0) << k.compileLog;
    }
  // Rank 1 of 2 and rank 7 of 8 share a kernel.
  EXPECT_EQ(spec(80, 8192, 2, 1, "sm_90a"), spec(80, 8192, 8, 7, "sm_90a"));
}

// The context-parallel kernels on the CPU, through the whole pipeline and NVRTC for sm_90a and
// sm_80 without spilling: the state scan for Mamba-2 2.7B's state (P 64, N 128), an odd one and
// Mamba-1 2.8B's (a decay each state), the number of ranks a loop bound, not part of the kernel;
// the Mamba-1 scan's decay over a part, with and without delta's bias and softplus, parts of any
// length and channel count one kernel.
#include <gtest/gtest.h>

#include <cstdint>
#include <tuple>

#include "GpuTest.h"  // SSMJIT_REQUIRE_NVRTC
#include "kernels_dsl/CompileKernel.h"
#include "runtime/parallel/CpStateScan.h"
#include "runtime/parallel/ScanCpDecay.h"

using ssmjit::DType;
using ssmjit::TensorView;

namespace {

void* fake(int k) { return reinterpret_cast<void*>(uintptr_t{0x10000} + uintptr_t(k) * 0x1000000); }

using ssmjit::detail::CpDecay;

ssmjit::Specialization spec(int64_t H, int64_t PN, int64_t ranks, int64_t rank, const char* arch,
                            CpDecay decay = CpDecay::PerHead) {
  const TensorView sum =
      TensorView::contiguous(fake(1), DType::F32, {ranks, ssmjit::detail::cpRowFloats(H, PN, decay)});
  const TensorView out = TensorView::contiguous(fake(2), DType::F32, {H * PN});
  return ssmjit::detail::cpStateScanSpecialization(sum, rank, H, PN, decay, out, arch);
}

}  // namespace

TEST(CpStateScanKernels, CompilesForEveryArchAndShape) {
  SSMJIT_REQUIRE_NVRTC();
  for (const char* arch : {"sm_90a", "sm_80"})
    for (auto [H, PN, decay] : {std::tuple<int64_t, int64_t, CpDecay>{80, 64 * 128, CpDecay::PerHead},
                                std::tuple<int64_t, int64_t, CpDecay>{3, 5 * 7, CpDecay::PerHead},
                                std::tuple<int64_t, int64_t, CpDecay>{1, 5120 * 16, CpDecay::PerState}}) {
      const ssmjit::Specialization s = spec(H, PN, 4, 3, arch, decay);
      SCOPED_TRACE(s.canonical());
      const ssmjit::CompiledKernel k = ssmjit::compileKernel(s);
      EXPECT_FALSE(k.cubin.empty());
      EXPECT_EQ(k.resources.spillStoreBytes, 0) << k.compileLog;
    }
  // Rank 1 of 2 and rank 7 of 8 share a kernel; a decay a state is a kernel of its own.
  EXPECT_EQ(spec(80, 8192, 2, 1, "sm_90a"), spec(80, 8192, 8, 7, "sm_90a"));
  EXPECT_FALSE(spec(80, 8192, 2, 1, "sm_90a") == spec(80, 8192, 2, 1, "sm_90a", CpDecay::PerState));
}

TEST(ScanCpDecayKernels, CompilesForEveryArchAndOption) {
  SSMJIT_REQUIRE_NVRTC();
  auto spec = [](int64_t D, int64_t N, int64_t L, bool bias, bool softplus, const char* arch) {
    ssmjit::SelectiveScanArgs a;
    a.delta = TensorView::contiguous(fake(1), DType::BF16, {1, D, L});
    a.A = TensorView::contiguous(fake(2), DType::F32, {D, N});
    if (bias) a.delta_bias = TensorView::contiguous(fake(3), DType::F32, {D});
    a.delta_softplus = softplus;
    return ssmjit::detail::scanCpDecaySpecialization(a, TensorView::contiguous(fake(4), DType::F32, {D, N}), arch);
  };
  for (const char* arch : {"sm_90a", "sm_80"})
    for (bool on : {false, true}) {
      const ssmjit::Specialization s = spec(5120, 16, 65536, on, on, arch);
      SCOPED_TRACE(s.canonical());
      const ssmjit::CompiledKernel k = ssmjit::compileKernel(s);
      EXPECT_FALSE(k.cubin.empty());
      EXPECT_EQ(k.resources.spillStoreBytes, 0) << k.compileLog;
    }
  // Parts of any length (of one stride class) and channel count share a kernel.
  EXPECT_EQ(spec(5120, 16, 65536, true, true, "sm_90a"), spec(64, 16, 4096 + 1024, true, true, "sm_90a"));
}

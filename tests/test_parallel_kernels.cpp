// The context-parallel kernels on the CPU, through the whole pipeline and NVRTC for sm_90a and
// sm_80 without spilling: the state scan for Mamba-2 2.7B's state (P 64, N 128), an odd one and
// Mamba-1 2.8B's (a decay each state), the number of ranks a loop bound, not part of the kernel;
// the Mamba-1 scan's decay over a part, with and without delta's bias and softplus, parts of any
// length and channel count one kernel; its correction of a part from the incoming state (the sums
// of dt' over chunks, then the correction, with final states when packed) and that state's
// gradient, with time-varying and constant C, with and without z, dense and packed.
#include <gtest/gtest.h>

#include <cstdint>
#include <tuple>

#include "GpuTest.h"  // SSMJIT_REQUIRE_NVRTC
#include "kernels_dsl/CompileKernel.h"
#include "runtime/parallel/CpStateScan.h"
#include "runtime/parallel/ScanCpCorrect.h"
#include "runtime/parallel/ScanCpDecay.h"
#include "runtime/parallel/ScanCpDtSums.h"
#include "runtime/parallel/ScanCpStateGrad.h"

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

namespace {

// A part of the Mamba-1 2.8B scan (D 5120, one 65536-token row) for the correction and the state
// gradient: C time-varying or constant, z or not, and packed (two sequences, final-state slots
// and their gradients) or not; dout like out.
ssmjit::SelectiveScanBackwardArgs scanPart(bool varying, bool gated, bool packed, int64_t N, DType t) {
  const int64_t D = 5120, L = 65536;
  ssmjit::SelectiveScanBackwardArgs b;
  ssmjit::SelectiveScanArgs& a = b.forward;
  a.delta = TensorView::contiguous(fake(1), t, {1, D, L});
  a.A = TensorView::contiguous(fake(2), DType::F32, {D, N});
  a.C =
      varying ? TensorView::contiguous(fake(3), t, {1, 1, N, L}) : TensorView::contiguous(fake(3), DType::F32, {D, N});
  a.delta_bias = TensorView::contiguous(fake(4), DType::F32, {D});
  a.delta_softplus = true;
  if (gated) a.z = TensorView::contiguous(fake(5), t, {1, D, L});
  a.out = TensorView::contiguous(fake(6), t, {1, D, L});
  b.dout = TensorView::contiguous(fake(7), t, {1, D, L});
  if (packed) {
    a.cu_seqlens = TensorView::contiguous(fake(8), DType::I32, {3});
    a.final_states = TensorView::contiguous(fake(9), t, {4, D, N});
    a.final_state_indices = TensorView::contiguous(fake(10), DType::I32, {2});
    b.dfinal_states = TensorView::contiguous(fake(11), t, {4, D, N});
  }
  a.workspace = TensorView::contiguous(fake(12), DType::F32, {ssmjit::detail::scanCpCorrectWorkspaceFloats(a)});
  return b;
}

void expectCompilesWithoutSpills(const ssmjit::Specialization& s) {
  SCOPED_TRACE(s.canonical());
  const ssmjit::CompiledKernel k = ssmjit::compileKernel(s);
  EXPECT_FALSE(k.cubin.empty());
  EXPECT_EQ(k.resources.spillStoreBytes, 0) << k.compileLog;
}

}  // namespace

// The sums of dt', the correction, and the state gradient's partial sums and their sum, N 16 and N 4.
TEST(ScanCpIncomingStateKernels, CompileForEveryArchAndOption) {
  SSMJIT_REQUIRE_NVRTC();
  for (const char* arch : {"sm_90a", "sm_80"})
    for (int v = 0; v < 5; ++v) {
      const ssmjit::SelectiveScanBackwardArgs b =
          scanPart(v & 1, v & 2, v == 3, v == 4 ? 4 : 16, v ? DType::BF16 : DType::F32);
      const TensorView state = TensorView::contiguous(fake(13), DType::F32, {5120, b.forward.A.shape[1]});
      const TensorView ws = TensorView::contiguous(fake(14), DType::F32,
                                                   {ssmjit::detail::scanCpStateGradWorkspaceFloats(b)}),
                       sums = TensorView::contiguous(fake(15), DType::F32, {64, 5120});
      expectCompilesWithoutSpills(ssmjit::detail::scanCpDtSumsSpecialization(b.forward, sums, arch));
      expectCompilesWithoutSpills(ssmjit::detail::scanCpCorrectSpecialization(b.forward, state, arch));
      expectCompilesWithoutSpills(ssmjit::detail::scanCpStateGradSpecialization(b, ws, arch));
      expectCompilesWithoutSpills(ssmjit::detail::scanCpStateGradSumSpecialization(b, state, ws, arch));
    }
}

// The RMSNorm kernel on the CPU: every variant the two ops build (each dtype, with and without the
// residual and residual_out, with and without the gate on either side of the norm, groups of
// every heuristic shape: several rows a program, one tile, several chunks) goes through the whole
// pipeline and NVRTC for sm_90a and sm_80 without spilling (a word at most), and reads and writes its rows as
// 16-byte vectors, every load before the reduction. Tensors are fake device addresses: only their
// alignment classes are read.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "GpuTest.h"  // SSMJIT_REQUIRE_NVRTC
#include "kernels_dsl/CompileKernel.h"
#include "runtime/ops/RmsNormSpec.h"
#include "ssmjit/ops.h"
#include "tests/support/Occurrences.h"

using ssmjit::DType;
using ssmjit::TensorView;
using ssmjit::testing::occurrences;

namespace {

void* fake(int k) { return reinterpret_cast<void*>(uintptr_t{0x10000} + uintptr_t(k) * 0x10000000); }
TensorView view(int k, DType t, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(fake(k), t, shape);
}

ssmjit::RmsNormArgs rmsArgs(DType dt, int64_t D, bool residual, bool residualOut, int64_t T = 1000) {
  ssmjit::RmsNormArgs a;
  a.x = view(1, dt, {T, D});
  if (residual) a.residual = view(2, DType::F32, {T, D});
  if (residualOut) a.residual_out = residual ? a.residual : view(3, DType::F32, {T, D});
  a.weight = view(4, dt, {D});
  a.out = view(5, dt, {T, D});
  return a;
}

ssmjit::GatedRmsNormArgs gatedArgs(DType dt, int64_t D, int64_t groups, bool z, bool beforeGate, int64_t T = 1000) {
  ssmjit::GatedRmsNormArgs a;
  a.x = view(1, dt, {T, D});
  if (z) a.z = view(2, dt, {T, D});
  a.weight = view(4, DType::F32, {D});
  a.out = view(5, dt, {T, D});
  a.group_size = D / groups;
  a.norm_before_gate = beforeGate;
  return a;
}

ssmjit::CompiledKernel expectCompiles(const ssmjit::Specialization& spec, int64_t spillBytes = 8) {
  SCOPED_TRACE(spec.canonical());
  ssmjit::CompiledKernel k = ssmjit::compileKernel(spec);
  EXPECT_FALSE(k.cubin.empty());
  // ptxas puts a word of some variants on the stack (4 bytes of the 8192-channel rows with
  // residual_out); more means the rows no longer fit the registers.
  EXPECT_LE(k.resources.spillStoreBytes, spillBytes) << k.compileLog;
  EXPECT_LE(k.resources.spillLoadBytes, spillBytes) << k.compileLog;
  return k;
}

// Every gated variant the tests compile: each dtype (fp16 only at 5120 channels: it shares bf16's
// code shape), 64 to 8192 channels, groups of 1 and 8, no gate or the gate on either side.
template <class F>
void forEachGatedVariant(F f) {
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (int64_t D : {64, 200, 5120, 8192})
      for (int64_t groups : {1, 8})
        for (bool z : {false, true})
          for (bool beforeGate : {false, true})
            if (!(dt == DType::F16 && D != 5120) && !(!z && beforeGate) && D % groups == 0)
              f(dt, D, groups, z, beforeGate);
}

}  // namespace

TEST(NormKernels, EveryRmsNormVariantCompiles) {
  SSMJIT_REQUIRE_NVRTC();
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (int64_t D : {int64_t{64}, int64_t{200}, int64_t{2560}, int64_t{5120}, int64_t{8192}, ssmjit::kMaxNormGroup})
      for (bool residual : {false, true})
        for (bool residualOut : {false, true}) {
          if (dt == DType::F16 && D != 5120) continue;  // fp16 shares bf16's code shape
          expectCompiles(ssmjit::detail::rmsNormSpecialization(rmsArgs(dt, D, residual, residualOut), "sm_90a"));
        }
  expectCompiles(ssmjit::detail::rmsNormSpecialization(rmsArgs(DType::BF16, 2560, true, true), "sm_80"));
}

TEST(NormKernels, EveryGatedVariantCompiles) {
  SSMJIT_REQUIRE_NVRTC();
  forEachGatedVariant([](DType dt, int64_t D, int64_t groups, bool z, bool beforeGate) {
    expectCompiles(ssmjit::detail::gatedRmsNormSpecialization(gatedArgs(dt, D, groups, z, beforeGate), "sm_90a"));
  });
  expectCompiles(ssmjit::detail::gatedRmsNormSpecialization(gatedArgs(DType::BF16, 5120, 8, true, false), "sm_80"));
}

// Bandwidth-bound: aligned bf16 rows move as 16-byte vectors (8 channels a load or store), and the
// 5120 channels of Mamba-2 2.7B take whole chunks, none masked.
TEST(NormKernels, RowsMoveAsVectors) {
  SSMJIT_REQUIRE_NVRTC();
  const ssmjit::Specialization spec =
      ssmjit::detail::rmsNormSpecialization(rmsArgs(DType::BF16, 5120, true, true), "sm_90a");
  SCOPED_TRACE(spec.canonical());
  EXPECT_EQ(spec.get("meta:BLOCK_G") * spec.get("meta:chunks"), 5120);
  const std::string ptx = expectCompiles(spec).ptx;
  EXPECT_GT(occurrences(ptx, "ld.global.v4.u32") + occurrences(ptx, "ld.global.v4.b32") +
                occurrences(ptx, "ld.global.nc.v4.u32") + occurrences(ptx, "ld.global.nc.v4.b32"),
            0)
      << ptx;
  EXPECT_GT(occurrences(ptx, "st.global.v4"), 0);
  EXPECT_EQ(occurrences(ptx, "ld.global.u16") + occurrences(ptx, "ld.global.b16"), 0);
}

// Row counts are only bounds: a serving batch that changes every step does not compile again.
TEST(NormKernels, RowCountBindsNoClass) {
  const auto a = ssmjit::detail::rmsNormSpecialization(rmsArgs(DType::BF16, 2560, true, true, 7), "sm_90a");
  const auto b = ssmjit::detail::rmsNormSpecialization(rmsArgs(DType::BF16, 2560, true, true, 16384), "sm_90a");
  EXPECT_EQ(a.canonical(), b.canonical());
}

// A decode step's norms (one row a program, the reduction across warps through a barrier) read every
// input, the weight included, before the barrier: a load after it would add a memory round trip.
TEST(NormKernels, EveryLoadPrecedesTheReduction) {
  SSMJIT_REQUIRE_NVRTC();
  const ssmjit::Specialization specs[] = {
      ssmjit::detail::gatedRmsNormSpecialization(gatedArgs(DType::BF16, 5120, 1, true, false, 1), "sm_90a"),
      ssmjit::detail::rmsNormSpecialization(rmsArgs(DType::BF16, 2560, true, true, 1), "sm_90a")};
  for (const ssmjit::Specialization& spec : specs) {
    SCOPED_TRACE(spec.canonical());
    const std::string ptx = ssmjit::compileKernel(spec).ptx;
    const size_t barrier = ptx.find("bar.sync"), lastLoad = ptx.rfind("ld.global");
    ASSERT_NE(barrier, std::string::npos) << ptx;
    ASSERT_NE(lastLoad, std::string::npos) << ptx;
    EXPECT_LT(lastLoad, barrier) << ptx;
  }
}

namespace {
ssmjit::GatedRmsNormBackwardArgs backwardArgs(DType dt, int64_t D, int64_t groups, bool z, bool beforeGate,
                                              int64_t T = 1000) {
  ssmjit::GatedRmsNormBackwardArgs a;
  a.forward = gatedArgs(dt, D, groups, z, beforeGate, T);
  a.forward.out = TensorView{};
  a.dout = view(6, dt, {T, D});
  a.dx = view(7, dt, {T, D});
  if (z) a.dz = view(8, dt, {T, D});
  a.dweight = view(9, DType::F32, {D});
  return a;
}
}  // namespace

// The backward's row kernel holds x, z, dout and dweight's sums a tile: every shape compiles without
// spilling, its sum over the programs too, but for gated rows of 8192 channels: 16 of each a thread
// at 16 warps (the most a program takes) need more than the 128 registers a thread gets there, and
// ptxas keeps up to 64 bytes on the stack.
TEST(NormKernels, EveryBackwardVariantCompiles) {
  SSMJIT_REQUIRE_NVRTC();
  forEachGatedVariant([](DType dt, int64_t D, int64_t groups, bool z, bool beforeGate) {
    for (const ssmjit::Specialization& s :
         ssmjit::detail::gatedRmsNormBackwardSpecializations(backwardArgs(dt, D, groups, z, beforeGate), "sm_90a"))
      expectCompiles(s, D / groups == 8192 && z ? 64 : 8);
  });
}

// Mamba-2 2.7B's gated norm: bf16 rows move as 16-byte vectors in the backward too, and row counts
// bind nothing.
TEST(NormKernels, BackwardRowsMoveAsVectors) {
  SSMJIT_REQUIRE_NVRTC();
  const auto specs =
      ssmjit::detail::gatedRmsNormBackwardSpecializations(backwardArgs(DType::BF16, 5120, 8, true, false), "sm_90a");
  const std::string ptx = expectCompiles(specs[0]).ptx;
  EXPECT_GT(occurrences(ptx, "ld.global.v4") + occurrences(ptx, "ld.global.nc.v4"), 0) << ptx;
  EXPECT_GT(occurrences(ptx, "st.global.v4"), 0) << ptx;
  const auto other = ssmjit::detail::gatedRmsNormBackwardSpecializations(
      backwardArgs(DType::BF16, 5120, 8, true, false, 16384), "sm_90a");
  EXPECT_EQ(specs[0].canonical(), other[0].canonical());
}

// The wgmma dot on CPU: a swizzled shared buffer's accesses and placement, the dot's generated
// wgmma (b by descriptor, a's fragments as mma.sync's), what it refuses, and NVRTC compiling it
// for sm_90a without spills or serialised wgmmas. (test_dsl_wgmma_gpu.cpp runs it.)
#include <gtest/gtest.h>

#include <string>

#include "GpuTest.h"  // SSMJIT_REQUIRE_NVRTC
#include "kernels_dsl/CompileKernel.h"
#include "ssmjit/error.h"
#include "tests/support/OwnKernel.h"
#include "tests/support/WgmmaDotKernel.h"

namespace ssmjit::testing {
namespace {

std::string cudaOf(const WgmmaDot& c) {
  std::string cuda;
  compileKernel(c.def(), c.spec(), capturingCuda(cuda));
  return cuda;
}

TEST(DslWgmma, ADotWithBInASwizzledBufferIsOneWgmmaAKStepAndPair) {
  for (int64_t sw : {32, 64, 128})
    for (int64_t M : {64, 128}) {
      WgmmaDot c;
      c.swizzle = sw, c.M = M;
      SCOPED_TRACE(c.name());
      const std::string cuda = cudaOf(c);
      // One instruction in the k-step loop a pair of rows; K / BK dots.
      EXPECT_EQ(occurrences(cuda, "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16"), (M / 64) * (128 / c.bk()))
          << cuda;
      EXPECT_EQ(occurrences(cuda, "ssm_wgmma_desc<" + std::to_string(sw) + ">"), 128 / c.bk());
      // The dots accumulate into one another with nothing between that writes memory: one
      // commit group, one wait.
      EXPECT_EQ(occurrences(cuda, "ssm_wgmma_commit();"), 1) << cuda;
      EXPECT_EQ(occurrences(cuda, "ssm_wgmma_wait_all();"), 1);
      EXPECT_EQ(occurrences(cuda, "ssm_ldmatrix_x4<true>(ssm_b"), 0) << "b is not read by ldmatrix";
      // The threads' stores address the buffer through its pattern; the barrier fences them.
      EXPECT_NE(cuda.find("ssm_swizzle<" + std::to_string(sw / 16 - 1) + ">("), std::string::npos);
      EXPECT_NE(cuda.find("ssm_fence_async_shared();\n  __syncthreads();"), std::string::npos) << cuda;
      EXPECT_NE(cuda.find("extern __shared__ __align__(1024) unsigned char ssm_smem[]"), std::string::npos);
    }
}

TEST(DslWgmma, AStoreBetweenTwoDotsEndsTheFirstDotsGroup) {
  for (bool aShared : {true, false}) {
    WgmmaDot c;
    c.aShared = aShared, c.storeBetween = true;
    SCOPED_TRACE(c.name());
    const std::string cuda = cudaOf(c);
    EXPECT_EQ(occurrences(cuda, "ssm_wgmma_commit();"), 128 / c.bk()) << cuda;
    EXPECT_EQ(occurrences(cuda, "ssm_wgmma_wait_all();"), 128 / c.bk());
  }
}

TEST(DslWgmma, AnNContiguousBIsTransposedOnTheWayAndCopiedThroughThePattern) {
  WgmmaDot c;
  c.nContiguous = true, c.swizzle = 128;
  const std::string cuda = cudaOf(c);
  // trans-b 1; a k-step moves 16 rows of 128 bytes (128 descriptor units); the copy swizzles.
  EXPECT_EQ(occurrences(cuda, ", p, 1, 1, 1;"), 128 / 32) << cuda;
  EXPECT_EQ(occurrences(cuda, "ssm_bdesc + 128 * ks"), 128 / 32) << cuda;
  EXPECT_NE(cuda.find("ssm_cp_async_full<16>(v"), std::string::npos) << cuda;
  EXPECT_NE(cuda.find("+ ssm_swizzle<7>("), std::string::npos) << cuda;
}

TEST(DslWgmma, OnlyOneWarpgroupWithRowPairsTakesWgmma) {
  auto refusal = [](const WgmmaDot& c) {
    try {
      cudaOf(c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  WgmmaDot two;  // 8 warps: two warpgroups
  two.M = 128, two.warps = 8;
  WgmmaDot small;  // 32 rows over 4 warps: 8 a warp, no pair of m16 rows
  small.M = 32;
  for (const WgmmaDot& c : {two, small})
    EXPECT_NE(refusal(c).find("a wgmma dot needs 4 warps along M (one warpgroup)"), std::string::npos) << c.name();
}

TEST(DslWgmma, ASwizzledBufferStartsAt1024Bytes) {
  dsl::KernelDef def;
  def.name = "swizzled_carve";
  def.build = [](KernelBuilder& k, const Specialization&) {
    Value a = k.ptrArg("a", dsl::PtrClass::Float), out = k.ptrArg("out", dsl::PtrClass::Float);
    Value plain = k.sharedBuffer(100, DType::BF16), sw = k.sharedBuffer(2048, DType::BF16, 128);
    Value r = k.expandDims(k.range(32), 1), c = k.expandDims(k.range(64), 0);
    k.store(plain, c, k.load(a, c));
    k.store(sw, r * 64 + c, k.load(a, r * 64 + c));
    k.barrier();
    k.store(out, r * 64 + c, k.load(sw, r * 64 + c) + k.load(plain, c));
  };
  const std::string cuda = ownKernelCuda(def, {"a", "out"});
  EXPECT_NE(cuda.find("reinterpret_cast<ssm_bf16*>(ssm_smem + 0)"), std::string::npos) << cuda;
  EXPECT_NE(cuda.find("reinterpret_cast<ssm_bf16*>(ssm_smem + 1024)"), std::string::npos) << cuda;
  EXPECT_NE(cuda.find("// 5120 bytes"), std::string::npos) << cuda;
}

TEST(DslWgmma, RefusesWhatWgmmaCannotRead) {
  const std::string badSwizzle =
      buildError([](KernelBuilder& k, Value, Value) { k.sharedBuffer(64, DType::BF16, 16); });
  EXPECT_NE(badSwizzle.find("swizzle must be 32, 64 or 128 bytes on a 16-bit buffer, got 16"), std::string::npos)
      << badSwizzle;
  const std::string f32 = buildError([](KernelBuilder& k, Value, Value) { k.sharedBuffer(64, DType::F32, 64); });
  EXPECT_NE(f32.find("on float32"), std::string::npos) << f32;
  const std::string view = buildError(
      [](KernelBuilder& k, Value, Value) { k.sharedView(k.sharedBuffer(2048, DType::BF16, 64), 0, 64, DType::BF16); });
  EXPECT_NE(view.find("an unswizzled sharedBuffer"), std::string::npos) << view;
  auto dotError = [](int64_t strideN, int64_t offset, int64_t K) {
    return buildError([=](KernelBuilder& k, Value a, Value) {
      Value sw = k.sharedBuffer(64 * 64, DType::BF16, 64);
      Value A = k.load(a, k.expandDims(k.range(64), 1) * K + k.expandDims(k.range(K), 0));
      k.dot(A, sw, k.constInt(offset), k.constInt(1), k.constInt(strideN), k.splat(k.constFloat(0), {64, 64}), 1, 1);
    });
  };
  const std::string pitch = dotError(40, 0, 32);
  EXPECT_NE(pitch.find("needs strides (k, n) (1, 32) or (32, 1)"), std::string::npos) << pitch;
  const std::string off = dotError(32, 64, 32);
  EXPECT_NE(off.find("must be a multiple of 256, got 64"), std::string::npos) << off;
  const std::string wide = dotError(32, 0, 64);
  EXPECT_NE(wide.find("K up to 32 (k-contiguous) or N 32 (n-contiguous), got 64 and 64"), std::string::npos) << wide;
}

TEST(DslWgmma, NvrtcCompilesWgmmaWithoutSpillsOrSerialisation) {
  SSMJIT_REQUIRE_NVRTC();
  for (bool aShared : {true, false})
    for (int64_t sw : {32, 64, 128}) {
      WgmmaDot c;
      c.swizzle = sw, c.aShared = aShared, c.aPieces = aShared ? 1 : 2, c.N = 128;
      if (!aShared && sw == 128) c.nContiguous = true, c.N = 64;
      SCOPED_TRACE(c.name());
      const CompiledKernel ck = compileKernel(c.def(), c.spec());
      EXPECT_FALSE(ck.cubin.empty()) << ck.compileLog;
      EXPECT_EQ(ck.resources.spillStoreBytes, 0) << ck.compileLog;
      EXPECT_NE(ck.ptx.find("wgmma.mma_async.sync.aligned.m64n" + std::to_string(c.N) + "k16.f32.bf16.bf16"),
                std::string::npos);
      EXPECT_NE(ck.ptx.find("fence.proxy.async.shared::cta"), std::string::npos);
      EXPECT_EQ(ck.compileLog.find("Performance Loss"), std::string::npos)
          << "ptxas serialised the wgmmas: " << ck.compileLog;
    }
}

}  // namespace
}  // namespace ssmjit::testing

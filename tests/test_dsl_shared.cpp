// The DSL's shared-memory features on small kernels of their own: typed dynamic buffers carved
// out of one extern array (their bytes recorded for the launch), a dot reading b from a 16-bit
// buffer with ldmatrix (k- or n-contiguous, the mma in b's dtype), asynchronous copies with their
// groups, what each refuses, and NVRTC compiling the result. (test_dsl_shared_gpu.cpp runs them.)
#include <gtest/gtest.h>

#include <string>

#include "GpuTest.h"  // SSMJIT_REQUIRE_NVRTC
#include "kernels_dsl/CompileKernel.h"
#include "ssmjit/error.h"
#include "tests/support/OwnKernel.h"
#include "tests/support/StagedDotKernel.h"

namespace ssmjit::testing {
namespace {

Specialization stagedSpec(const StagedDot& c, const std::string& arch = "sm_90a") {
  Specialization spec;
  spec.kernel = "staged_dot";
  spec.arch = arch;
  spec.set("dtype:a", (int)DType::F32).set("dtype:out", (int)DType::F32).set("dtype:b", (int)c.dtype);
  for (const char* p : {"a", "b", "out"}) spec.set(std::string("align:") + p, 16);
  spec.set("div:K", 8).set("meta:num_warps", 4).set("meta:index_bits", 32);
  return spec;
}

std::string stagedCuda(const StagedDot& c) {
  std::string cuda;
  compileKernel(c.def(), stagedSpec(c), capturingCuda(cuda));
  return cuda;
}

TEST(DslShared, DynamicBuffersAreCarvedFromOneExternArrayAt128Bytes) {
  dsl::KernelDef def;
  def.name = "shared_carve";
  def.build = [](KernelBuilder& k, const Specialization&) {
    Value a = k.ptrArg("a", dsl::PtrClass::Float), out = k.ptrArg("out", dsl::PtrClass::Float);
    Value h = k.sharedBuffer(1001, DType::BF16), f = k.sharedBuffer(30000, DType::F32);
    Value off = k.expandDims(k.range(16), 1) * 64 + k.expandDims(k.range(64), 0);
    k.store(h, off, k.load(a, off));
    k.store(f, off + 100, k.load(a, off));
    k.barrier();
    k.store(out, off, k.load(h, off) + k.load(f, off + 100));
  };
  const std::string cuda = ownKernelCuda(def, {"a", "out"});
  // 1001 bf16 take 2002 bytes; the f32 buffer starts at the next multiple of 128, 2048.
  EXPECT_NE(cuda.find("extern __shared__ __align__(128) unsigned char ssm_smem[];  // 122048 bytes"), std::string::npos)
      << cuda;
  EXPECT_NE(cuda.find("ssm_bf16* const v"), std::string::npos) << cuda;
  EXPECT_NE(cuda.find("reinterpret_cast<ssm_bf16*>(ssm_smem + 0)"), std::string::npos) << cuda;
  EXPECT_NE(cuda.find("reinterpret_cast<float*>(ssm_smem + 2048)"), std::string::npos) << cuda;
  EXPECT_EQ(cuda.find("__shared__ __align__(16) float"), std::string::npos) << "no static buffer";
}

// A view takes no memory of its own: its pointer is its buffer's bytes from the view's offset, and
// the kernel's dynamic total is the buffers' alone.
TEST(DslShared, ViewsShareTheirBuffersBytes) {
  dsl::KernelDef def;
  def.name = "shared_view";
  def.build = [](KernelBuilder& k, const Specialization&) {
    Value a = k.ptrArg("a", dsl::PtrClass::Float), out = k.ptrArg("out", dsl::PtrClass::Float);
    Value h = k.sharedBuffer(1001, DType::BF16), f = k.sharedBuffer(7680, DType::F32);
    Value v = k.sharedView(f, 5120, 5120, DType::BF16);  // the last third of f, as bf16
    Value off = k.expandDims(k.range(16), 1) * 64 + k.expandDims(k.range(64), 0);
    k.store(h, off, k.load(a, off));
    k.store(v, off, k.load(a, off));
    k.barrier();
    k.store(out, off, k.load(h, off) + k.load(v, off));
  };
  const std::string cuda = ownKernelCuda(def, {"a", "out"});
  // f at 2048 (after h's 2002 bytes), 30720 bytes; the view at 2048 + 5120 * 4.
  EXPECT_NE(cuda.find("unsigned char ssm_smem[];  // 32768 bytes"), std::string::npos) << cuda;
  EXPECT_NE(cuda.find("reinterpret_cast<float*>(ssm_smem + 2048)"), std::string::npos) << cuda;
  EXPECT_NE(cuda.find("reinterpret_cast<ssm_bf16*>(ssm_smem + 22528)"), std::string::npos) << cuda;
}

TEST(DslShared, AViewCompiles) {
  if (!nvrtcAvailable(nullptr)) GTEST_SKIP() << "no NVRTC";
  Specialization spec;
  spec.kernel = "shared_view_copy";
  spec.arch = "sm_90a";
  spec.set("dtype:x", (int)DType::BF16).set("dtype:out", (int)DType::F32);
  for (const char* p : {"x", "out"}) spec.set(std::string("align:") + p, 16);
  spec.set("meta:num_warps", 4).set("meta:index_bits", 32);
  std::string cuda;
  EXPECT_NO_THROW(compileKernel(testing::sharedViewDef(), spec, capturingCuda(cuda)));
  EXPECT_NE(cuda.find("reinterpret_cast<ssm_bf16*>(ssm_smem + 9216)"), std::string::npos) << cuda;
}

TEST(DslShared, RefusesViewsOutsideTheirBuffer) {
  auto viewError = [](int64_t at, int64_t elements, bool ofView) {
    return buildError([=](KernelBuilder& k, Value, Value) {
      Value f = k.sharedBuffer(1024, DType::F32);
      if (ofView) f = k.sharedView(f, 0, 512, DType::F32);
      k.sharedView(f, at, elements, DType::BF16);
    });
  };
  EXPECT_EQ(viewError(512, 1024, false), "");
  EXPECT_NE(viewError(2, 64, false)
                .find("sharedView: 64 bfloat16 from element 2 (byte 8) of a 4096-byte buffer: "
                      "expected a start at a multiple of 16 bytes and an end within it"),
            std::string::npos)
      << viewError(2, 64, false);
  EXPECT_NE(viewError(512, 1025, false).find("of a 4096-byte buffer"), std::string::npos);
  EXPECT_NE(viewError(0, 64, true)
                .find("sharedView: the buffer must be an unswizzled sharedBuffer(elements, dtype) of its own"),
            std::string::npos);
}

TEST(DslShared, RefusesWhatItCannotHold) {
  EXPECT_NE(buildError([](KernelBuilder& k, Value, Value) {
              k.sharedBuffer(100, DType::I32);
            }).find("sharedBuffer: dtype must be float32, float16 or bfloat16, got int32"),
            std::string::npos);
  const std::string big = buildError([](KernelBuilder& k, Value, Value) {
    k.sharedBuffer(100000, DType::BF16);
    k.sharedBuffer(20000, DType::F32);
  });
  EXPECT_NE(big.find("would take 280064 bytes, more than 232448 (20000 float32 asked)"), std::string::npos) << big;
  EXPECT_NE(buildError([](KernelBuilder& k, Value, Value) { k.waitGroup(8); }).find("waitGroup: pending must be 0..7"),
            std::string::npos);
  // A copy into a static buffer, and one whose dtypes differ once specialised.
  const std::string intoStatic = buildError([](KernelBuilder& k, Value a, Value) {
    Value off = k.range(64);
    k.copyAsync(k.sharedBuffer(64), off, a, off);
  });
  EXPECT_NE(intoStatic.find("copyAsync: smem must be a sharedBuffer(elements, dtype)"), std::string::npos)
      << intoStatic;
  const std::string dtypes = buildError([](KernelBuilder& k, Value a, Value) {
    Value off = k.range(64);
    k.copyAsync(k.sharedBuffer(64, DType::BF16), off, a, off);
  });
  EXPECT_NE(dtypes.find("the buffer holds ssm_bf16, the source float"), std::string::npos) << dtypes;
  for (auto [name, tileCopy] :
       {std::pair{"copyTileAsync", &KernelBuilder::copyTileAsync}, std::pair{"storeTile", &KernelBuilder::storeTile}}) {
    const std::string vec = buildError([tileCopy = tileCopy](KernelBuilder& k, Value a, Value) {
      Value z = k.constInt(0);
      (k.*tileCopy)(k.sharedBuffer(64 * 36, DType::F32), z, 36, a, z, z, 64, 30, z, z, 4);
    });
    EXPECT_NE(
        vec.find(std::string(name) + ": a 64x30 tile at pitch 36 in vectors of 4 (vec must divide cols and pitch"),
        std::string::npos)
        << vec;
  }
}

// storeTile spreads its vectors over the block as copyTileAsync does: a whole tile stores 16-byte
// vectors without bounds; otherwise each vector of a valid row stores its valid columns alone.
TEST(DslShared, TileStoresAre16ByteVectorsSpreadOverTheBlock) {
  Specialization spec = testing::tileKernelSpec("tile_store", DType::F32, DType::BF16);
  std::string cuda;
  compileKernel(testing::tileStoreDef(DType::BF16), spec, capturingCuda(cuda));
  EXPECT_NE(cuda.find("const int ssm_r = ssm_v / 8, ssm_c = ssm_v % 8 * 8;"), std::string::npos) << cuda;
  EXPECT_EQ(occurrences(cuda, "*reinterpret_cast<ssm_raw<16>::type*>("), 1) << cuda;
  EXPECT_NE(cuda.find(" >= 32 && "), std::string::npos) << "the whole-tile branch: " << cuda;
  EXPECT_NE(cuda.find("for (int ssm_e = 0; ssm_e < 8; ++ssm_e)"), std::string::npos) << cuda;
  const std::string dtypes = buildError([](KernelBuilder& k, Value a, Value) {
    Value z = k.constInt(0);
    k.storeTile(k.sharedBuffer(32 * 72, DType::BF16), z, 72, a, z, z, 32, 64, z, z, 8);
  });
  EXPECT_NE(dtypes.find("the buffer holds ssm_bf16, the memory float"), std::string::npos) << dtypes;
  if (!nvrtcAvailable(nullptr)) return;
  for (DType dt : {DType::BF16, DType::F32})
    for (int64_t rows : {32, 4}) {
      spec.set("dtype:out", (int)dt);
      EXPECT_NO_THROW(compileKernel(testing::tileStoreDef(dt, rows), spec)) << dtypeName(dt) << ", rows " << rows;
    }
}

TEST(DslShared, ADotWithBInA16BitBufferNeedsLdmatrixRows) {
  auto dotError = [](int64_t K, int64_t N, int64_t sk, int64_t sn, int64_t offset, int pb) {
    return buildError([=](KernelBuilder& k, Value, Value) {
      Value buf = k.sharedBuffer(8192, DType::BF16);
      k.dot(k.splat(k.constFloat(1), {64, K}), buf, k.constInt(offset), k.constInt(sk), k.constInt(sn),
            k.splat(k.constFloat(0), {64, N}), 1, pb);
    });
  };
  EXPECT_EQ(dotError(32, 32, 40, 1, 0, 1), "");
  EXPECT_EQ(dotError(32, 32, 1, 40, 8, 1), "");
  EXPECT_NE(dotError(32, 32, 40, 1, 0, 2).find("is one term, got 2"), std::string::npos);
  EXPECT_NE(dotError(8, 32, 40, 1, 0, 1).find("K and N multiples of 16, got 8 and 32"), std::string::npos);
  EXPECT_NE(dotError(32, 32, 40, 2, 0, 1).find("b from a 16-bit shared buffer needs a unit stride"), std::string::npos);
  EXPECT_NE(dotError(32, 32, 36, 1, 0, 1).find("a positive constant multiple of 8"), std::string::npos);
  EXPECT_NE(dotError(32, 32, 40, 1, 4, 1).find("must be a multiple of 8, got 4"), std::string::npos);
}

TEST(DslShared, StagedDotCopiesAsyncAndReadsFragmentsWithLdmatrix) {
  StagedDot n;  // b [K][N]: ldmatrix .trans, bf16 mma
  const std::string cn = stagedCuda(n);
  EXPECT_NE(cn.find("parent layout: spt=[1,2] tpw=[8,4] wpc=[4,1]"), std::string::npos) << cn;
  EXPECT_NE(cn.find("extern __shared__ __align__(128) unsigned char ssm_smem[];  // " +
                    std::to_string(n.sharedBytes()) + " bytes"),
            std::string::npos)
      << cn;
  EXPECT_GT(n.sharedBytes(), 48 * 1024);
  EXPECT_NE(cn.find("ssm_ldmatrix_x4<true>(ssm_b, ssm_brow + 16 * ks * 136 + 16 * mp);"), std::string::npos) << cn;
  EXPECT_EQ(occurrences(cn, "ssm_mma_bf16("), 2) << "one a term, two n-tiles an ldmatrix, one row pair: " << cn;
  // The masked rows of the tail: one vector a copy (a pair of bf16, the layout's run), from the
  // pointer itself when masked off; three copy sites (the prologue's two, unrolled, and the
  // loop's), three commits, one wait.
  EXPECT_EQ(occurrences(cn, "ssm_cp_async<4>("), 3) << cn;
  EXPECT_NE(cn.find(" : p_b, "), std::string::npos) << cn;
  EXPECT_EQ(occurrences(cn, "ssm_cp_async_commit();"), 3) << cn;
  EXPECT_EQ(occurrences(cn, "ssm_cp_async_wait<2>();"), 1) << cn;

  StagedDot k;  // b [N][K]: plain ldmatrix, f16 mma, a split into f16 terms
  k.nContiguous = false;
  k.dtype = DType::F16;
  const std::string ck = stagedCuda(k);
  EXPECT_NE(ck.find("ssm_ldmatrix_x4<false>(ssm_b, ssm_brow + 16 * ks + 16 * mp * 72);"), std::string::npos) << ck;
  EXPECT_EQ(occurrences(ck, "ssm_mma_f16("), 2) << ck;
  EXPECT_EQ(occurrences(ck, "ssm_mma_bf16("), 0) << ck;
  EXPECT_NE(ck.find("ssm_f16_pieces<1>("), std::string::npos) << ck;
  EXPECT_EQ(occurrences(ck, "ssm_cp_async<4>("), 3) << "K divisible by 8: the k tail masks whole vectors; " << ck;
}

// copyTileAsync spreads its vectors over the block whatever the layout: [32, 64] bf16 is 256
// vectors of 16 bytes, two a thread of 4 warps; the source size clips a vector at C. A tile its
// valid rows and columns cover copies every vector whole, without bounds or a source size.
TEST(DslShared, WholeTileCopiesAre16ByteVectorsSpreadOverTheBlock) {
  Specialization spec = testing::tileKernelSpec("whole_tile_copy", DType::BF16, DType::F32);
  std::string cuda;
  compileKernel(wholeTileCopyDef(DType::BF16), spec, capturingCuda(cuda));
  EXPECT_NE(cuda.find("for (int ssm_k = 0; ssm_k < 2; ++ssm_k) {"), std::string::npos) << cuda;
  EXPECT_NE(cuda.find("const int ssm_r = ssm_v / 8, ssm_c = ssm_v % 8 * 8;"), std::string::npos) << cuda;
  EXPECT_NE(cuda.find("ssm_cp_async_n<16>("), std::string::npos) << cuda;
  EXPECT_NE(cuda.find(" >= 32 && "), std::string::npos) << "the whole-tile branch: " << cuda;
  EXPECT_EQ(occurrences(cuda, "ssm_cp_async_full<16>("), 1) << cuda;
  EXPECT_EQ(cuda.find("if (ssm_v < "), std::string::npos) << "256 vectors: every thread has two";
  std::string four;
  compileKernel(wholeTileCopyDef(DType::BF16, 4), spec, capturingCuda(four));
  EXPECT_NE(four.find("for (int ssm_k = 0; ssm_k < 1; ++ssm_k) {"), std::string::npos) << four;
  EXPECT_NE(four.find("if (ssm_v < 32) {"), std::string::npos) << "32 vectors for 128 threads; " << four;
  if (!nvrtcAvailable(nullptr)) return;
  for (int64_t rows : {32, 4}) {
    const CompiledKernel ck = compileKernel(wholeTileCopyDef(DType::BF16, rows), spec);
    EXPECT_NE(ck.ptx.find("cp.async.cg.shared.global"), std::string::npos) << rows;
  }
}

TEST(DslShared, CopiesMove16BytesWhereTheLayoutRunsAre8Halves) {
  Specialization spec = testing::tileKernelSpec("async_copy_tile", DType::BF16, DType::F32);
  std::string cuda;
  compileKernel(asyncCopyTileDef(DType::BF16), spec, capturingCuda(cuda));
  EXPECT_NE(cuda.find("ssm_cp_async<16>("), std::string::npos) << cuda;
  EXPECT_NE(cuda.find("ssm_cp_async_wait<0>();"), std::string::npos) << cuda;
  if (!nvrtcAvailable(nullptr)) return;
  const CompiledKernel ck = compileKernel(asyncCopyTileDef(DType::BF16), spec);
  EXPECT_NE(ck.ptx.find("cp.async.cg.shared.global"), std::string::npos);
  EXPECT_EQ(ck.dynamicSharedBytes, 32 * 72 * 2);
}

TEST(DslShared, ADotWithBothOperandsInSharedMemoryReadsAByLdmatrixToo) {
  for (bool aT : {false, true})
    for (int64_t M : {16, 32, 64}) {
      SharedDot c;
      c.aTransposed = aT;
      c.M = M;
      SCOPED_TRACE(c.name());
      Specialization spec;
      spec.kernel = "shared_dot";
      spec.arch = "sm_90a";
      spec.set("dtype:a", (int)c.dtype).set("dtype:b", (int)c.dtype).set("dtype:out", (int)DType::F32);
      for (const char* p : {"a", "b", "out"}) spec.set(std::string("align:") + p, 16);
      spec.set("meta:num_warps", 4).set("meta:index_bits", 32);
      std::string cuda;
      compileKernel(c.def(), spec, capturingCuda(cuda));
      // At most 64 rows: one row pair a thread (its second half zero below 64), one ldmatrix for a
      // and one for b a k-step and n-tile pair.
      EXPECT_EQ(occurrences(cuda, aT ? "ssm_ldmatrix_x4<true>(ssm_r" : "ssm_ldmatrix_x4<false>(ssm_r"), 1) << cuda;
      EXPECT_EQ(occurrences(cuda, "ssm_ldmatrix_x4<true>(ssm_b"), 1) << cuda;
      EXPECT_EQ(occurrences(cuda, "ssm_bf16_pieces"), 0) << "a is not split: " << cuda;
      if (!nvrtcAvailable(nullptr)) continue;
      const CompiledKernel ck = compileKernel(c.def(), spec);
      EXPECT_FALSE(ck.cubin.empty()) << ck.compileLog;
      EXPECT_EQ(ck.resources.spillStoreBytes, 0) << ck.compileLog;
    }
  const std::string mixed = buildError([](KernelBuilder& k, Value, Value) {
    Value a = k.sharedBuffer(4096, DType::F16), b = k.sharedBuffer(4096, DType::BF16);
    Value one = k.constInt(1), p = k.constInt(40);
    k.dot(a, k.constInt(0), p, one, 32, b, k.constInt(0), p, one, k.splat(k.constFloat(0), {64, 32}));
  });
  EXPECT_NE(mixed.find("a and b must have one storage type"), std::string::npos) << mixed;
}

TEST(DslShared, NvrtcCompilesTheStagedDotAndRecordsItsSharedBytes) {
  SSMJIT_REQUIRE_NVRTC();
  for (bool nContiguous : {true, false})
    for (DType dt : {DType::BF16, DType::F16}) {
      StagedDot c;
      c.nContiguous = nContiguous;
      c.dtype = dt;
      SCOPED_TRACE(c.name());
      for (const char* arch : {"sm_90a", "sm_80"}) {
        const CompiledKernel ck = compileKernel(c.def(), stagedSpec(c, arch));
        EXPECT_FALSE(ck.cubin.empty()) << ck.compileLog;
        EXPECT_EQ(ck.dynamicSharedBytes, c.sharedBytes());
        EXPECT_EQ(ck.resources.spillStoreBytes, 0) << ck.compileLog;
        EXPECT_NE(ck.ptx.find(nContiguous ? "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"
                                          : "ldmatrix.sync.aligned.m8n8.x4.shared.b16"),
                  std::string::npos);
        EXPECT_NE(ck.ptx.find("cp.async.ca.shared.global"), std::string::npos);
        EXPECT_NE(ck.ptx.find(dt == DType::F16 ? "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
                                               : "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"),
                  std::string::npos);
      }
    }
}

}  // namespace
}  // namespace ssmjit::testing

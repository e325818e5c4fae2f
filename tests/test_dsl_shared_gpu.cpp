// The DSL's shared-memory features on the GPU, checked bitwise: a bf16 dynamic buffer beyond
// 48 KiB narrowing on store and widening on load; and the staged dot (StagedDotKernel.h): b
// streamed by cp.async through a 3-stage ring over 48 KiB with a masked tail, multiplied by
// ldmatrix fragments, k- and n-contiguous, bf16 and f16. Inputs are small integers, so every
// product and sum is exact in f32 and the result must equal the integer product exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "GpuTest.h"
#include "kernels_dsl/CompileKernel.h"
#include "kernels_dsl/Dsl.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "tests/support/FloatBits.h"
#include "tests/support/IntegerProduct.h"
#include "tests/support/LaunchOwnKernel.h"
#include "tests/support/StagedDotKernel.h"

namespace ssmjit {
namespace {

using dsl::KernelBuilder;
using dsl::Value;
using testing::SharedDot;
using testing::StagedDot;

using testing::bitsOf;
using testing::fromBits;
using testing::toBf16;
using testing::toF16Exact;

using testing::launchOwnKernel;

class DslSharedGpu : public testing::GpuTest {};

// 40000 bf16 (80000 bytes): a [64, 64] f32 tile stored near the buffer's end (rounded to bf16),
// read back transposed and widened.
TEST_F(DslSharedGpu, Bf16BufferBeyond48KiBNarrowsAndWidens) {
  constexpr int64_t kAt = 40000 - 64 * 64;
  dsl::KernelDef def;
  def.name = "shared_bf16_roundtrip";
  def.build = [](KernelBuilder& k, const Specialization&) {
    Value a = k.ptrArg("a", dsl::PtrClass::Float), out = k.ptrArg("out", dsl::PtrClass::Float);
    Value buf = k.sharedBuffer(40000, DType::BF16);
    Value r = k.expandDims(k.range(64), 1), c = k.expandDims(k.range(64), 0);
    k.store(buf, r * 64 + c + kAt, k.load(a, r * 64 + c));
    k.barrier();
    k.store(out, r * 64 + c, k.load(buf, c * 64 + r + kAt));
  };
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-100.f, 100.f);
  std::vector<float> a(64 * 64);
  for (float& v : a) v = u(rng);
  DeviceBuffer da = DeviceBuffer::fromHost(a), dout = DeviceBuffer::fromHost(std::vector<float>(64 * 64, NAN));
  Specialization spec;
  for (const char* p : {"a", "out"})
    spec.set(std::string("dtype:") + p, (int)DType::F32).set(std::string("align:") + p, 16);
  spec.set("meta:num_warps", 4).set("meta:index_bits", 32);
  const CompiledKernel ck = launchOwnKernel(def, spec, {{"a", da.ptr()}, {"out", dout.ptr()}}, {});
  EXPECT_EQ(ck.dynamicSharedBytes, 80000);
  const std::vector<float> out = dout.download<float>();
  int bad = 0;
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 64; ++j) {
      const uint32_t want = uint32_t{toBf16(a[j * 64 + i])} << 16;
      if (bitsOf(out[i * 64 + j]) != want && bad++ < 5)
        ADD_FAILURE() << "out[" << i << "][" << j << "] = " << out[i * 64 + j] << ", want " << fromBits(want);
    }
  EXPECT_EQ(bad, 0);
}

// Rows below R copied bit for bit (widened on the load from shared memory), the rest zero-filled
// without reading x there (NaN).
TEST_F(DslSharedGpu, AsyncCopyOf16ByteVectorsZeroFillsMaskedRows) {
  for (DType dt : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtypeName(dt));
    std::mt19937 rng(3);
    std::uniform_int_distribution<int> small(-50, 50);
    std::vector<float> xv(32 * 64);
    std::vector<uint16_t> x(32 * 64, dt == DType::F16 ? 0x7e00 : 0x7fc0);
    const int R = 21;
    for (int i = 0; i < R * 64; ++i) {
      xv[i] = static_cast<float>(small(rng));
      x[i] = dt == DType::F16 ? toF16Exact(xv[i]) : toBf16(xv[i]);
    }
    DeviceBuffer dx = DeviceBuffer::fromHost(x), dout = DeviceBuffer::fromHost(std::vector<float>(32 * 64, NAN));
    Specialization spec;
    spec.set("dtype:x", (int)dt).set("dtype:out", (int)DType::F32);
    for (const char* p : {"x", "out"}) spec.set(std::string("align:") + p, 16);
    spec.set("meta:num_warps", 4).set("meta:index_bits", 32);
    launchOwnKernel(testing::asyncCopyTileDef(dt), spec, {{"x", dx.ptr()}, {"out", dout.ptr()}}, {{"R", R}});
    const std::vector<float> out = dout.download<float>();
    int bad = 0;
    for (int i = 0; i < 32 * 64; ++i) {
      const float want = i < R * 64 ? xv[i] : 0.f;
      if (bitsOf(out[i]) != bitsOf(want) && bad++ < 5)
        ADD_FAILURE() << "out[" << i << "] = " << out[i] << ", want " << want;
    }
    EXPECT_EQ(bad, 0);
  }
}

// copyTileAsync: rows below R and columns below C (a partial vector at C) copied bit for bit from
// rows S apart, the rest of the tile zero-filled without reading x there (NaN), bf16 and f32; a
// tile of 4 rows has fewer vectors than the block has threads.
TEST_F(DslSharedGpu, WholeTileCopyZeroFillsPastItsValidRowsAndColumns) {
  const int base = 24, S = 80, C = 37;
  for (int64_t rows : {32, 4})
    for (DType dt : {DType::BF16, DType::F32}) {
      SCOPED_TRACE(std::string(dtypeName(dt)) + ", rows " + std::to_string(rows));
      const int R = rows == 32 ? 21 : 3;
      std::mt19937 rng(5);
      std::uniform_int_distribution<int> small(-50, 50);
      const size_t n = base + rows * S;
      std::vector<float> xv(n, NAN);
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) xv[base + r * S + c] = static_cast<float>(small(rng));
      std::vector<uint16_t> x16(n);
      for (size_t i = 0; i < n; ++i) x16[i] = std::isnan(xv[i]) ? 0x7fc0 : toBf16(xv[i]);
      DeviceBuffer dx = dt == DType::F32 ? DeviceBuffer::fromHost(xv) : DeviceBuffer::fromHost(x16);
      DeviceBuffer dout = DeviceBuffer::fromHost(std::vector<float>(rows * 64, NAN));
      const Specialization spec = testing::tileKernelSpec("tile", dt, DType::F32);
      launchOwnKernel(testing::wholeTileCopyDef(dt, rows), spec, {{"x", dx.ptr()}, {"out", dout.ptr()}},
                      {{"base", base}, {"S", S}, {"R", R}, {"C", C}});
      const std::vector<float> out = dout.download<float>();
      int bad = 0;
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < 64; ++c) {
          const float want = r < R && c < C ? xv[base + r * S + c] : 0.f;
          if (bitsOf(out[r * 64 + c]) != bitsOf(want) && bad++ < 5)
            ADD_FAILURE() << "out[" << r << ", " << c << "] = " << out[r * 64 + c] << ", want " << want;
        }
      EXPECT_EQ(bad, 0);
    }
}

// storeTile: rows below R and columns below C (a partial vector at C) stored bit for bit at rows S
// apart from base, nothing else written (the NaN around them stays), bf16 and f32; a tile of 4
// rows has fewer vectors than the block has threads.
TEST_F(DslSharedGpu, TileStoreWritesOnlyItsValidRowsAndColumns) {
  const int base = 24, S = 80, C = 37;
  for (int64_t rows : {32, 4})
    for (DType dt : {DType::BF16, DType::F32}) {
      SCOPED_TRACE(std::string(dtypeName(dt)) + ", rows " + std::to_string(rows));
      const int R = rows == 32 ? 21 : 3;
      std::mt19937 rng(6);
      std::uniform_int_distribution<int> small(-50, 50);
      std::vector<float> xv(rows * 64);
      for (float& v : xv) v = static_cast<float>(small(rng));
      const size_t n = base + rows * S;
      DeviceBuffer dx = DeviceBuffer::fromHost(xv);
      DeviceBuffer dout = dt == DType::F32 ? DeviceBuffer::fromHost(std::vector<float>(n, NAN))
                                           : DeviceBuffer::fromHost(std::vector<uint16_t>(n, 0x7fc0));
      const Specialization spec = testing::tileKernelSpec("tile", DType::F32, dt);
      launchOwnKernel(testing::tileStoreDef(dt, rows), spec, {{"x", dx.ptr()}, {"out", dout.ptr()}},
                      {{"base", base}, {"S", S}, {"R", R}, {"C", C}});
      // Each element's bits: the stored value's, or the NaN that was there.
      std::vector<uint32_t> got(n), want(n);
      if (dt == DType::F32) {
        const std::vector<float> o = dout.download<float>();
        for (size_t i = 0; i < n; ++i) got[i] = bitsOf(o[i]);
      } else {
        const std::vector<uint16_t> o = dout.download<uint16_t>();
        for (size_t i = 0; i < n; ++i) got[i] = o[i];
      }
      for (size_t i = 0; i < n; ++i) {
        const int64_t r = (int64_t(i) - base) / S, c = (int64_t(i) - base) % S;
        const bool stored = int64_t(i) >= base && r < R && c < C;
        if (dt == DType::F32)
          want[i] = bitsOf(stored ? xv[r * 64 + c] : NAN);
        else
          want[i] = stored ? toBf16(xv[r * 64 + c]) : 0x7fc0;
      }
      int bad = 0;
      for (size_t i = 0; i < n; ++i)
        if (got[i] != want[i] && bad++ < 5)
          ADD_FAILURE() << "element " << i << ": bits " << std::hex << got[i] << ", want " << want[i] << std::dec;
      EXPECT_EQ(bad, 0);
    }
}

// A bf16 view over an f32 buffer's last bytes: copied into by cp.async while the threads store
// into the buffer's first part, each read back unclobbered (2 x, exactly).
TEST_F(DslSharedGpu, ASharedViewHoldsItsOwnBytes) {
  const int64_t rows = 32;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> small(-50, 50);
  std::vector<float> xv(rows * 64);
  std::vector<uint16_t> x16(rows * 64);
  for (size_t i = 0; i < xv.size(); ++i) x16[i] = toBf16(xv[i] = static_cast<float>(small(rng)));
  DeviceBuffer dx = DeviceBuffer::fromHost(x16), dout = DeviceBuffer::fromHost(std::vector<float>(rows * 64, NAN));
  Specialization spec;
  spec.set("dtype:x", (int)DType::BF16).set("dtype:out", (int)DType::F32);
  for (const char* p : {"x", "out"}) spec.set(std::string("align:") + p, 16);
  spec.set("meta:num_warps", 4).set("meta:index_bits", 32);
  launchOwnKernel(testing::sharedViewDef(rows), spec, {{"x", dx.ptr()}, {"out", dout.ptr()}}, {});
  const std::vector<float> out = dout.download<float>();
  int bad = 0;
  for (size_t i = 0; i < out.size(); ++i)
    if (bitsOf(out[i]) != bitsOf(2 * xv[i]) && bad++ < 5) ADD_FAILURE() << "out[" << i << "] = " << out[i];
  EXPECT_EQ(bad, 0);
}

// Both operands from shared memory: a [M][K] or transposed [K][M] (.trans), b [K][N]; M 16 and
// 32 give a thread one row (its last pair's second half zero), 64 a full pair.
TEST_F(DslSharedGpu, DotWithAFromSharedMemoryMatchesTheIntegerProduct) {
  uint32_t seed = 41;
  for (DType dt : {DType::BF16, DType::F16})
    for (bool aT : {false, true})
      for (int64_t M : {16, 32, 64}) {
        SharedDot c;
        c.M = M;
        c.aTransposed = aT;
        c.dtype = dt;
        SCOPED_TRACE(c.name());
        std::mt19937 rng(seed++);
        std::uniform_int_distribution<int> small(-4, 4);
        std::vector<float> av(c.M * c.K), bv(c.K * c.N);  // a[m][k], b[k][n]
        for (float& v : av) v = static_cast<float>(small(rng));
        for (float& v : bv) v = static_cast<float>(small(rng));
        auto half = [&](float v) { return testing::smallIntegerBits(v, dt); };
        std::vector<uint16_t> a(c.M * c.K), b(c.K * c.N);
        for (int64_t m = 0; m < c.M; ++m)
          for (int64_t k = 0; k < c.K; ++k) a[aT ? k * c.M + m : m * c.K + k] = half(av[m * c.K + k]);
        for (size_t i = 0; i < bv.size(); ++i) b[i] = half(bv[i]);
        DeviceBuffer da = DeviceBuffer::fromHost(a), db = DeviceBuffer::fromHost(b);
        DeviceBuffer dout = DeviceBuffer::fromHost(std::vector<float>(c.M * c.N, NAN));
        Specialization spec;
        spec.set("dtype:a", (int)dt).set("dtype:b", (int)dt).set("dtype:out", (int)DType::F32);
        for (const char* p : {"a", "b", "out"}) spec.set(std::string("align:") + p, 16);
        spec.set("meta:num_warps", 4).set("meta:index_bits", 32);
        launchOwnKernel(c.def(), spec, {{"a", da.ptr()}, {"b", db.ptr()}, {"out", dout.ptr()}}, {});
        testing::expectIntegerProduct(
            dout.download<float>(), c.M, c.N, c.K, [&](int64_t m, int64_t k) { return av[m * c.K + k]; },
            [&](int64_t k, int64_t n) { return bv[k * c.N + n]; });
      }
}

// out = a . b over K (a multiple of 8, possibly not of the 64-element k-tile); b past K is NaN in
// global memory, so a tail copied rather than zero-filled shows as NaN.
void checkStagedDot(const StagedDot& c, int K, uint64_t seed) {
  SCOPED_TRACE(c.name() + "_K" + std::to_string(K));
  ASSERT_GT(c.sharedBytes(), 48 * 1024);
  const int64_t L = StagedDot::kLd;
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int> small(-3, 3);
  std::vector<float> a(c.M * L, 0.f);
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t k = 0; k < K; ++k) a[i * L + k] = static_cast<float>(small(rng));
  // b[k][n] as integers, stored n-contiguous ([L][N]) or k-contiguous ([N][L]).
  std::vector<float> bv(L * c.N, 0.f);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < c.N; ++n) bv[k * c.N + n] = static_cast<float>(small(rng));
  const uint16_t nan16 = c.dtype == DType::F16 ? 0x7e00 : 0x7fc0;
  std::vector<uint16_t> b(L * c.N, nan16);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < c.N; ++n) {
      const float v = bv[k * c.N + n];
      b[c.nContiguous ? k * c.N + n : n * L + k] = c.dtype == DType::F16 ? toF16Exact(v) : toBf16(v);
    }
  DeviceBuffer da = DeviceBuffer::fromHost(a), db = DeviceBuffer::fromHost(b);
  DeviceBuffer dout = DeviceBuffer::fromHost(std::vector<float>(c.M * c.N, NAN));
  Specialization spec;
  spec.set("dtype:a", (int)DType::F32).set("dtype:out", (int)DType::F32).set("dtype:b", (int)c.dtype);
  for (const char* p : {"a", "b", "out"}) spec.set(std::string("align:") + p, 16);
  spec.set("div:K", 8).set("meta:num_warps", 4).set("meta:index_bits", 32);
  dsl::KernelDef def = c.def();
  const CompiledKernel ck =
      launchOwnKernel(def, spec, {{"a", da.ptr()}, {"b", db.ptr()}, {"out", dout.ptr()}}, {{"K", K}});
  EXPECT_EQ(ck.dynamicSharedBytes, c.sharedBytes());
  const std::vector<float> out = dout.download<float>();
  int bad = 0;
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t n = 0; n < c.N; ++n) {
      double want = 0;
      for (int64_t k = 0; k < K; ++k) want += double(a[i * L + k]) * bv[k * c.N + n];
      if (bitsOf(out[i * c.N + n]) != bitsOf(static_cast<float>(want)) && bad++ < 5)
        ADD_FAILURE() << "out[" << i << "][" << n << "] = " << out[i * c.N + n] << ", want " << want;
    }
  EXPECT_EQ(bad, 0);
}

TEST_F(DslSharedGpu, StagedDotNContiguousBf16) {
  StagedDot c;
  for (int K : {200, 256, 40}) checkStagedDot(c, K, 11 + K);
}

TEST_F(DslSharedGpu, StagedDotKContiguousBf16) {
  StagedDot c;
  c.nContiguous = false;
  for (int K : {200, 256, 40}) checkStagedDot(c, K, 23 + K);
}

TEST_F(DslSharedGpu, StagedDotF16BothOrders) {
  for (bool nContiguous : {true, false}) {
    StagedDot c;
    c.nContiguous = nContiguous;
    c.dtype = DType::F16;
    checkStagedDot(c, 136, 31);
  }
}

}  // namespace
}  // namespace ssmjit

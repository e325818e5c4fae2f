// The wgmma dot on the GPU (WgmmaDotKernel.h): b stored by the threads into a swizzled buffer and
// read by wgmma through its matrix descriptor, a from a 16-bit buffer by ldmatrix or from
// registers in terms, checked bitwise. Inputs are small integers, so every product and sum is
// exact in f32 and the result must equal the integer product exactly; a wrong swizzle, descriptor
// or fragment order moves values between rows or columns and shows. Needs sm_90a (Hopper).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "GpuTest.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "tests/support/FloatBits.h"
#include "tests/support/IntegerProduct.h"
#include "tests/support/LaunchOwnKernel.h"
#include "tests/support/WgmmaDotKernel.h"

namespace ssmjit {
namespace {

using testing::WgmmaDot;

class DslWgmmaGpu : public testing::GpuTest {
 protected:
  void SetUp() override {
    testing::GpuTest::SetUp();
    if (IsSkipped()) return;
    const std::string arch = driver::currentArch();
    if (arch != "sm_90a") GTEST_SKIP() << "wgmma needs an sm_90a device, this one is " << arch;
  }
};

void checkWgmmaDot(const WgmmaDot& c, uint32_t seed) {
  SCOPED_TRACE(c.name());
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> small(-4, 4);
  std::vector<float> av(c.M * c.K), bv(c.N * c.K);  // a[m][k], b[n][k]
  for (float& v : av) v = static_cast<float>(small(rng));
  for (float& v : bv) v = static_cast<float>(small(rng));
  std::vector<uint16_t> a16(av.size());
  for (size_t i = 0; i < av.size(); ++i) a16[i] = testing::smallIntegerBits(av[i], c.dtype);
  DeviceBuffer da = c.aShared ? DeviceBuffer::fromHost(a16) : DeviceBuffer::fromHost(av);
  std::vector<uint16_t> bT16(bv.size());  // b[k][n], 16-bit, where it is copied
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t k = 0; k < c.K; ++k) bT16[k * c.N + n] = testing::smallIntegerBits(bv[n * c.K + k], c.dtype);
  DeviceBuffer db = c.nContiguous ? DeviceBuffer::fromHost(bT16) : DeviceBuffer::fromHost(bv),
               dout = DeviceBuffer::fromHost(std::vector<float>(c.M * c.N, NAN));
  testing::launchOwnKernel(c.def(), c.spec(), {{"a", da.ptr()}, {"b", db.ptr()}, {"out", dout.ptr()}}, {});
  testing::expectIntegerProduct(
      dout.download<float>(), c.M, c.N, c.K, [&](int64_t m, int64_t k) { return av[m * c.K + k]; },
      [&](int64_t k, int64_t n) { return bv[n * c.K + k]; });
}

TEST_F(DslWgmmaGpu, EverySwizzleMatchesTheIntegerProduct) {
  uint32_t seed = 7;
  for (int64_t sw : {32, 64, 128})
    for (int64_t M : {64, 128})
      for (bool aShared : {true, false}) {
        WgmmaDot c;
        c.swizzle = sw, c.M = M, c.aShared = aShared;
        checkWgmmaDot(c, seed++);
      }
}

TEST_F(DslWgmmaGpu, NContiguousBCopiedAsItLiesMatchesTheIntegerProduct) {
  uint32_t seed = 31;
  for (int64_t sw : {32, 64, 128})
    for (bool aShared : {true, false}) {
      WgmmaDot c;
      c.nContiguous = true, c.swizzle = sw, c.N = sw / 2, c.aShared = aShared;
      checkWgmmaDot(c, seed++);
    }
  WgmmaDot f16;
  f16.nContiguous = true, f16.swizzle = 128, f16.dtype = DType::F16, f16.M = 128;
  checkWgmmaDot(f16, 40);
}

TEST_F(DslWgmmaGpu, DotsWaitedForOneByOneMatchTheIntegerProduct) {
  for (bool aShared : {true, false}) {
    WgmmaDot c;  // a store between the dots: each its own commit group and wait
    c.aShared = aShared, c.storeBetween = true;
    checkWgmmaDot(c, aShared ? 51 : 52);
  }
}

TEST_F(DslWgmmaGpu, WideNAndF16AndATermsMatchTheIntegerProduct) {
  WgmmaDot wide;
  wide.N = 128;
  checkWgmmaDot(wide, 21);
  WgmmaDot f16;
  f16.dtype = DType::F16;
  checkWgmmaDot(f16, 22);
  WgmmaDot terms;  // a from registers in two terms: the second is zero for integers, still issued
  terms.aShared = false, terms.aPieces = 2, terms.swizzle = 128, terms.N = 128;
  checkWgmmaDot(terms, 23);
}

}  // namespace
}  // namespace ssmjit

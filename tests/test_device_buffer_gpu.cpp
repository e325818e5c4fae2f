// DeviceBuffer: RAII device memory with typed upload/download, used by GPU tests and the bench.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>

#include "GpuTest.h"
#include "runtime/DeviceBuffer.h"
#include "ssmjit/error.h"

using ssmjit::DeviceBuffer;

TEST(DeviceBuffer, RoundTripsTypedData) {
  SSMJIT_REQUIRE_GPU();
  std::vector<float> host(1000);
  std::iota(host.begin(), host.end(), -3.5f);
  DeviceBuffer b = DeviceBuffer::fromHost(host);
  EXPECT_EQ(b.bytes(), host.size() * sizeof(float));
  EXPECT_EQ(b.count<float>(), host.size());
  EXPECT_NE(b.ptr(), 0u);
  EXPECT_EQ(b.download<float>(), host);

  std::vector<int64_t> part = {7, -8, 9};
  DeviceBuffer c(10 * sizeof(int64_t));
  c.fill(0);
  c.upload(part, 4);
  std::vector<int64_t> back = c.download<int64_t>();
  EXPECT_EQ(back[3], 0);
  EXPECT_EQ(back[4], 7);
  EXPECT_EQ(back[5], -8);
  EXPECT_EQ(back[6], 9);
  EXPECT_EQ(c.download<int64_t>(2, 5), (std::vector<int64_t>{-8, 9}));
}

TEST(DeviceBuffer, FillPoisons) {
  SSMJIT_REQUIRE_GPU();
  DeviceBuffer b(64 * sizeof(float));
  b.fill(0xFF);
  for (float v : b.download<float>()) EXPECT_TRUE(std::isnan(v));
}

TEST(DeviceBuffer, OutOfRangeCopiesThrowNamingSizes) {
  SSMJIT_REQUIRE_GPU();
  DeviceBuffer b(16);
  std::vector<int32_t> five(5);
  try {
    b.upload(five);
    FAIL() << "20 bytes into 16 must throw";
  } catch (const ssmjit::Error& e) {
    EXPECT_EQ(e.kind(), ssmjit::Error::Kind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("20 bytes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("16-byte"), std::string::npos) << e.what();
  }
  EXPECT_THROW(b.download<int32_t>(2, 3), ssmjit::Error);
}

TEST(DeviceBuffer, MoveTransfersOwnership) {
  SSMJIT_REQUIRE_GPU();
  DeviceBuffer a(256);
  CUdeviceptr p = a.ptr();
  DeviceBuffer b(std::move(a));
  EXPECT_EQ(a.ptr(), 0u);
  EXPECT_EQ(b.ptr(), p);
  DeviceBuffer c;
  c = std::move(b);
  EXPECT_EQ(c.ptr(), p);
  EXPECT_EQ(c.bytes(), 256u);
  c.reset();
  EXPECT_EQ(c.ptr(), 0u);
  DeviceBuffer empty(0);
  EXPECT_EQ(empty.ptr(), 0u);
}

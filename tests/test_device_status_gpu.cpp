// The device status record on the GPU: kernels report bad slot indices through it;
// checkDeviceErrors turns a report into an exception naming the index, the value and the range,
// then clears it.
#include <gtest/gtest.h>

#include "GpuTest.h"
#include "kernels_dsl/ssu/SelectiveStateUpdate.h"
#include "runtime/DeviceStatus.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"

namespace {
// Writes a report the way a kernel does: the first error wins.
const char* kReport = R"(
extern "C" __global__ void report(long long* err, long long code, long long b, long long v,
                                  long long bound) {
  if (atomicCAS((unsigned long long*)err, 0ull, (unsigned long long)code) == 0ull) {
    err[1] = b; err[2] = v; err[3] = bound;
  }
}
)";
}  // namespace

TEST(DeviceStatus, RecordIsZeroedAndStablePerContext) {
  SSMJIT_REQUIRE_GPU();
  void* rec = ssmjit::deviceStatusRecord();
  ASSERT_NE(rec, nullptr);
  EXPECT_EQ(ssmjit::deviceStatusRecord(), rec);
  EXPECT_NO_THROW(ssmjit::checkDeviceErrors(nullptr));
}

TEST(DeviceStatus, CheckThrowsOnceThenClears) {
  SSMJIT_REQUIRE_GPU();
  SSMJIT_REQUIRE_NVRTC();
  ssmjit::testing::TestKernel k(kReport, "report");
  ssmjit::OwnedStream stream;
  void* rec = ssmjit::deviceStatusRecord();
  long long code = ssmjit::kernels::kErrSlotOutOfRange, b = 2, v = 9, bound = 8;
  void* args[] = {&rec, &code, &b, &v, &bound};
  k.launch(1, 1, stream, args);
  // A second report does not overwrite the first.
  long long b2 = 5;
  void* args2[] = {&rec, &code, &b2, &v, &bound};
  k.launch(1, 1, stream, args2);
  try {
    ssmjit::checkDeviceErrors(stream);
    FAIL() << "the record holds an error";
  } catch (const ssmjit::Error& e) {
    EXPECT_EQ(e.kind(), ssmjit::Error::Kind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("state_batch_indices[2] = 9 is out of range [0, 8)"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(ssmjit::checkDeviceErrors(stream));  // cleared
}

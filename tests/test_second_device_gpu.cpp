// A tensor that really lives on a second GPU, passed with the state on the first and the first's
// stream: rejected before launch with a clear error naming it and both devices, nothing written.
// On a machine with one GPU the test skips, saying so (scripts/gpu-suite.sh allows that skip).
#include <gtest/gtest.h>

#include <string>

#include "GpuTest.h"
#include "SsuTestUtil.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"

using namespace ssmjit;
using namespace ssmjit::testing;

namespace {

TEST(SecondDevice, TensorOnDeviceOneIsRejected) {
  SSMJIT_REQUIRE_GPU();
  const driver::Api& a = driver::api();
  int count = 0;
  driver::check(a.cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (count < 2) GTEST_SKIP() << "one CUDA device (" << count << "): the wrong-device check needs a second one";
  SsuCase c = mamba2Heads(4, 16, 32, 2);
  c.tokens = false;
  c.batch = 3;
  c.seed = 9401;
  const SsuProblem p = makeProblem(c);
  DeviceProblem dp(p);  // on device 0 (the current context)
  const CUcontext ctx0 = driver::ensureContext();
  // x's bytes on device 1, allocated in its primary context.
  CUdevice dev1 = 0;
  CUcontext ctx1 = nullptr;
  driver::check(a.cuDeviceGet(&dev1, 1), "cuDeviceGet(1)");
  driver::check(a.cuDevicePrimaryCtxRetain(&ctx1, dev1), "cuDevicePrimaryCtxRetain(1)");
  driver::check(a.cuCtxSetCurrent(ctx1), "cuCtxSetCurrent(device 1)");
  {
    DeviceBuffer x1(p.x.bytes.size());
    x1.uploadBytes(p.x.bytes.data(), p.x.bytes.size());
    driver::check(a.cuCtxSetCurrent(ctx0), "cuCtxSetCurrent(device 0)");
    SelectiveStateUpdateArgs args = dp.args;
    args.x.data = static_cast<char*>(x1.data()) + p.x.byteOffset;
    args.x.deviceId = 1;
    const auto stateBefore = dp.download(kState), outBefore = dp.download(kOut);
    OwnedStream stream;  // a stream of device 0
    try {
      selective_state_update(args, stream);
      ADD_FAILURE() << "x on device 1 was accepted with the state and the stream on device 0";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find("x is on CUDA device 1, expected device 0"), std::string::npos) << e.what();
    }
    checkDeviceErrors(stream);
    EXPECT_EQ(dp.download(kState), stateBefore) << "the rejected call wrote the state";
    EXPECT_EQ(dp.download(kOut), outBefore) << "the rejected call wrote out";
    driver::check(a.cuCtxSetCurrent(ctx1), "cuCtxSetCurrent(device 1)");  // x1 is freed in its context
  }
  driver::check(a.cuCtxSetCurrent(ctx0), "cuCtxSetCurrent(device 0)");
}

}  // namespace

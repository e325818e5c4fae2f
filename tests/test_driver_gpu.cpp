// The dlopen'ed driver with a GPU: errors named, the context shared, the device named with its
// exact NVRTC target.
#include <gtest/gtest.h>

#include <regex>
#include <thread>

#include "GpuTest.h"
#include "runtime/Driver.h"
#include "ssmjit/error.h"

TEST(Driver, CheckNamesTheCallAndTheError) {
  SSMJIT_REQUIRE_GPU();  // error names come from the driver
  try {
    ssmjit::driver::check(CUDA_ERROR_INVALID_VALUE, "cuSomething(x)");
    FAIL();
  } catch (const ssmjit::Error& e) {
    EXPECT_EQ(e.kind(), ssmjit::Error::Kind::Cuda);
    std::string msg = e.what();
    EXPECT_NE(msg.find("cuSomething(x): CUDA_ERROR_INVALID_VALUE"), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(ssmjit::driver::check(CUDA_SUCCESS, "ok"));
}

TEST(Driver, ContextArchAndName) {
  SSMJIT_REQUIRE_GPU();
  CUcontext a = ssmjit::driver::ensureContext();
  CUcontext b = ssmjit::driver::ensureContext();
  EXPECT_NE(a, nullptr);
  EXPECT_EQ(a, b);
  std::string arch = ssmjit::driver::currentArch();
  EXPECT_TRUE(std::regex_match(arch, std::regex("sm_[0-9]+a?"))) << arch;
  if (arch == "sm_90") ADD_FAILURE() << "Hopper must get the arch-specific target sm_90a";
  EXPECT_FALSE(ssmjit::driver::deviceName().empty());
  std::printf("device: %s (%s)\n", ssmjit::driver::deviceName().c_str(), arch.c_str());
}

TEST(Driver, OtherThreadsGetTheSameContext) {
  SSMJIT_REQUIRE_GPU();
  CUcontext mine = ssmjit::driver::ensureContext();
  CUcontext theirs = nullptr;
  std::thread t([&] { theirs = ssmjit::driver::ensureContext(); });
  t.join();
  EXPECT_EQ(mine, theirs);
}

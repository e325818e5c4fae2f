// Helpers for GPU tests: skip cleanly where there is no GPU (CPU-only CI, this repo's build
// machines), and compile + load small test kernels without the MLIR pipeline.
#pragma once
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "compiler/Nvrtc.h"
#include "runtime/CudaGraph.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "tools/problems/HostTensor.h"
#include "tools/problems/Tolerance.h"

// Skips the current test with "no GPU: <reason>" unless the driver loads and a device is present;
// otherwise makes a context current. Use at the top of a TEST body or in SetUp().
#define SSMJIT_REQUIRE_GPU()                     \
  do {                                           \
    std::string sjWhy_;                          \
    if (!::ssmjit::driver::available(&sjWhy_)) { \
      GTEST_SKIP() << "no GPU: " << sjWhy_;      \
    }                                            \
    ::ssmjit::driver::ensureContext();           \
  } while (0)

// Skips unless NVRTC loads (GPU tests that build their own kernels need it too).
#define SSMJIT_REQUIRE_NVRTC()                          \
  do {                                                  \
    std::string sjWhy_;                                 \
    if (!::ssmjit::nvrtcAvailable(&sjWhy_)) {           \
      GTEST_SKIP() << "NVRTC not loadable: " << sjWhy_; \
    }                                                   \
  } while (0)

namespace ssmjit::testing {

// Names each parameterised case by its name():
//   INSTANTIATE_TEST_SUITE_P(Matrix, Suite, ::testing::ValuesIn(cases()), ByName());
struct ByName {
  template <class Case>
  std::string operator()(const ::testing::TestParamInfo<Case>& info) const {
    return info.param.name();
  }
};

// What checkDeviceErrors() reports for the launches before it (a test failure where it reports
// nothing).
inline std::string deviceErrorMessage() {
  try {
    checkDeviceErrors();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected checkDeviceErrors() to report an error";
  return {};
}

// A fixture for suites whose every test needs the GPU.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override { SSMJIT_REQUIRE_GPU(); }
};

// The suite `Suite` of GPU tests Matrix/Suite.MatchesFloat64Reference/<case name>, one for each
// Case of `cases`: runAndCompare(case), the file's check against the float64 reference.
#define SSMJIT_REFERENCE_MATRIX(Suite, Case, cases)                                               \
  class Suite : public ::ssmjit::testing::GpuTest, public ::testing::WithParamInterface<Case> {}; \
  TEST_P(Suite, MatchesFloat64Reference) { runAndCompare(GetParam()); }                           \
  INSTANTIATE_TEST_SUITE_P(Matrix, Suite, ::testing::ValuesIn(cases), ::ssmjit::testing::ByName())

// Expects what a run left in one tensor (`c`) within `b` (tools/problems/Tolerance.h), and prints
// the measured error beside its bound, so that every GPU run shows the margin each check leaves.
inline void expectWithin(const Compared& c, const Bound& b, const std::string& what) {
  std::fprintf(stderr, "[ measured ] %s %s %s\n", ::testing::UnitTest::GetInstance()->current_test_info()->name(),
               what.c_str(), measured(c, b).c_str());
  const std::string why = outside(c, b);
  EXPECT_TRUE(why.empty()) << what << ": " << why;
}

// A hand-written kernel compiled with NVRTC for the current device and loaded (CUBIN, falling back
// to PTX if the driver refuses the CUBIN). Unloaded on destruction.
class TestKernel {
 public:
  TestKernel(const std::string& source, const std::string& entry) {
    NvrtcResult r = nvrtcCompile(source, entry + ".cu", driver::currentArch(), {});
    const driver::Api& a = driver::api();
    if (a.cuModuleLoadDataEx(&module_, r.cubin.data(), 0, nullptr, nullptr) != CUDA_SUCCESS) {
      module_ = nullptr;
      driver::check(a.cuModuleLoadDataEx(&module_, r.ptx.c_str(), 0, nullptr, nullptr),
                    ("cuModuleLoadDataEx(PTX of " + entry + ")").c_str());
    }
    driver::check(a.cuModuleGetFunction(&function_, module_, entry.c_str()),
                  ("cuModuleGetFunction(" + entry + ")").c_str());
  }
  ~TestKernel() {
    if (module_) driver::api().cuModuleUnload(module_);
  }
  TestKernel(const TestKernel&) = delete;
  TestKernel& operator=(const TestKernel&) = delete;

  // Launches with `args` (pointers to each argument value), checked.
  void launch(unsigned grid, unsigned block, CUstream stream, void** args) const {
    driver::check(driver::api().cuLaunchKernel(function_, grid, 1, 1, block, 1, 1, 0, stream, args, nullptr),
                  "cuLaunchKernel(test kernel)");
  }
  CUfunction function() const { return function_; }

 private:
  CUmodule module_ = nullptr;
  CUfunction function_ = nullptr;
};

}  // namespace ssmjit::testing

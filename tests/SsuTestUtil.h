// What the selective-state-update tests share beyond tests/support (problems, host and device
// tensors, comparisons, which the tool uses too): the shapes several tests run and the checks that
// need GoogleTest.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>

#include "ssmjit/error.h"
#include "tests/support/DeviceProblem.h"
#include "tests/support/HostTensor.h"
#include "tests/support/SsuProblem.h"

namespace ssutest {

using namespace ssmjit::testing;

// Odd sizes: head dim and state size not powers of two, 3 groups of 2 heads.
inline SsuCase oddSizes() { return mamba2Heads(/*H=*/6, /*P=*/17, /*N=*/33, /*G=*/3); }

// Runs the multi-token op on `dp` (after clearing any stale report) and returns the error the next
// checkDeviceErrors() throws; a test failure naming `what` if it throws none.
inline std::optional<ssmjit::Error> reportedDeviceError(const DeviceProblem& dp, const char* what) {
  ssmjit::checkDeviceErrors();
  runOp(true, dp.args);
  try {
    ssmjit::checkDeviceErrors();
  } catch (const ssmjit::Error& e) {
    return e;
  }
  ADD_FAILURE() << "checkDeviceErrors() should report " << what;
  return std::nullopt;
}

}  // namespace ssutest

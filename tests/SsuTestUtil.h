// What the selective-state-update tests share beyond tools/problems (problems, host and device
// tensors, comparisons, which the tool uses too): the shapes several tests run and the checks that
// need GoogleTest.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "ssmjit/error.h"
#include "tools/problems/DeviceProblem.h"
#include "tools/problems/HostTensor.h"
#include "tools/problems/SsuProblem.h"

namespace ssmjit::testing {
// Parameterised tests print a case by its name (gtest would dump its bytes into CTest's test names).
inline void PrintTo(const SsuCase& c, std::ostream* os) { *os << c.name(); }
}  // namespace ssmjit::testing

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

// Tolerances: relative L2 over a tensor (fp32 math against float64 on fp32 data; one 16-bit
// rounding of the stored state or outputs dominates otherwise), and per element, relative to
// |ref| + rms(ref) (a few ulp of fp32; one 16-bit ulp is 2^-8 = 3.9e-3).
inline double tolerance(const SsuCase& c) { return c.allF32() ? 1e-5 : 1e-2; }
inline double elementTolerance(double l2Tol) { return l2Tol < 1e-4 ? 1e-4 : 3e-2; }

inline int64_t countRows(const std::vector<char>& rows) {
  int64_t n = 0;
  for (char r : rows) n += r != 0;
  return n;
}

// Checks out and state left by a device run against the reference run `ref` of problem `p`
// (same inputs): written elements within `tol`, no NaN among them, every other byte unchanged.
inline void expectMatches(const SsuProblem& p, const SsuProblem& ref, const std::vector<uint8_t>& out,
                   const std::vector<uint8_t>& state, double tol,
                   const std::vector<char>& rows, const std::vector<char>& slots) {
  const Compared co = compareTensor(ref.out, out, rows);
  EXPECT_EQ(co.violations, 0) << "out: " << co.first;
  EXPECT_EQ(co.written, p.out.meta.numel() / p.c.batch * countRows(rows)) << "out: elements written";
  EXPECT_LE(co.relL2, tol) << "out: relative L2 error; " << co.first;
  EXPECT_LE(co.maxErr, elementTolerance(tol)) << "out: " << co.first;
  const Compared cs = compareTensor(ref.state, state, slots);
  EXPECT_EQ(cs.violations, 0) << "state: " << cs.first;
  EXPECT_LE(cs.relL2, tol) << "state: relative L2 error; " << cs.first;
  EXPECT_LE(cs.maxErr, elementTolerance(tol)) << "state: " << cs.first;
}

}  // namespace ssutest

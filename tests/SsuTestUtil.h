// What the selective-state-update tests share beyond tools/problems (problems, host and device
// tensors, comparisons, which the tool uses too): the shapes several tests run and the checks that
// need GoogleTest.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "GpuTest.h"
#include "ssmjit/error.h"
#include "tools/problems/DeviceProblem.h"
#include "tools/problems/HostTensor.h"
#include "tools/problems/SsuProblem.h"

namespace ssutest {

using namespace ssmjit::testing;

// Odd sizes: head dim and state size not powers of two, 3 groups of 2 heads.
inline SsuCase oddSizes() { return mamba2Heads(/*H=*/6, /*P=*/17, /*N=*/33, /*G=*/3); }

// Runs the multi-token op (or with `tokens` false the one-token op) on `dp` (after clearing any
// stale report) and returns the error the next checkDeviceErrors() throws; a test failure naming
// `what` if it throws none.
inline std::optional<ssmjit::Error> reportedDeviceError(const DeviceProblem& dp, const char* what, bool tokens = true) {
  ssmjit::checkDeviceErrors();
  runOp(tokens, dp.args);
  try {
    ssmjit::checkDeviceErrors();
  } catch (const ssmjit::Error& e) {
    return e;
  }
  ADD_FAILURE() << "checkDeviceErrors() should report " << what;
  return std::nullopt;
}

inline int64_t countRows(const std::vector<char>& rows) {
  int64_t n = 0;
  for (char r : rows) n += r != 0;
  return n;
}

// Checks out and state left by a device run against the reference run `ref` of problem `p`
// (same inputs): written elements within the bounds of their dtypes (tools/problems/Tolerance.h)
// for `fp32` (the arithmetic between the two), no NaN among them, every other byte unchanged.
inline void expectMatches(const SsuProblem& p, const SsuProblem& ref, const std::vector<uint8_t>& out,
                          const std::vector<uint8_t>& state, const std::vector<char>& rows,
                          const std::vector<char>& slots, Fp32Error fp32 = kFp32Short) {
  const Compared co = compareTensor(ref.out, out, rows);
  EXPECT_EQ(co.written, p.out.meta.numel() / p.c.batch * countRows(rows)) << "out: elements written";
  expectWithin(co, bound(p.c.outT, fp32), "out");
  expectWithin(compareTensor(ref.state, state, slots), bound(p.c.stateT, fp32), "state");
}

}  // namespace ssutest

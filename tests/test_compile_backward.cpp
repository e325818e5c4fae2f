// compile_backward: a forward call that will be trained names, beside its own kernels, exactly the
// kernels its backward (every gradient, no state gradients) launches, so that the first backward
// finds them compiled. No GPU: the specialisations come from host tensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "runtime/OpSpecializations.h"
#include "ssmjit/ops.h"
#include "tools/problems/ScanBackwardProblem.h"

using namespace ssmjit;
using namespace ssmjit::testing;

namespace {

bool contains(const std::vector<Specialization>& v, const Specialization& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(CompileBackward, ScanForwardNamesItsBackwardsKernels) {
  for (const int64_t N : {8, 40}) {  // one chunk of states, three
    SCOPED_TRACE(N);
    ScanBackwardCase c;
    c.fwd.batch = 2, c.fwd.D = 24, c.fwd.N = N, c.fwd.L = 70;
    const ScanBackwardProblem p(c);
    SelectiveScanArgs f = p.f.args();
    const std::vector<Specialization> own = opspec::scan(f, "sm_90a");
    const std::vector<Specialization> backward = opspec::scanBackward(p.args(), "sm_90a");
    f.compile_backward = true;
    const std::vector<Specialization> both = opspec::scan(f, "sm_90a");
    ASSERT_FALSE(backward.empty());
    // The forward's kernels first, in launch order, then the backward's.
    ASSERT_GE(both.size(), own.size());
    EXPECT_TRUE(std::equal(own.begin(), own.end(), both.begin()));
    for (const Specialization& s : backward) EXPECT_TRUE(contains(both, s)) << s.canonical();
    EXPECT_EQ(both.size(), own.size() + backward.size());  // the two share no kernel
  }
}

}  // namespace

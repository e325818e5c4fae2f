// tests/support/Relayout.h and the layout matrix of tests/LayoutCases.h on the CPU: a re-laid
// tensor holds the same values with its gaps poisoned; every case of the GPU layout matrix passes
// the op's own argument check (a case the op rejects would test nothing); and the float64
// reference gives the same values on the re-laid problem as on the contiguous one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "LayoutCases.h"
#include "runtime/ops/CausalConv1dSpec.h"
#include "runtime/ops/Mamba2DecodeStepSpec.h"
#include "runtime/ops/SelectiveScanSpec.h"
#include "runtime/ops/SelectiveStateUpdateSpec.h"
#include "ssmjit/reference.h"

using namespace ssmjit;
using namespace ssmjit::testing;
using namespace layouts;

namespace {

// The same logical values (NaN equal to NaN), element by element.
void expectSameValues(const HostTensor& a, const HostTensor& b, const std::string& what) {
  ASSERT_EQ(a.defined, b.defined) << what;
  if (!a.defined) return;
  const TensorView va = a.view(), vb = b.view();
  ASSERT_EQ(va.shapeString(), vb.shapeString()) << what;
  std::vector<double> xs, ys;
  forEachElement(va, [&](int64_t off, const std::vector<int64_t>&) { xs.push_back(loadElement(va, off)); });
  forEachElement(vb, [&](int64_t off, const std::vector<int64_t>&) { ys.push_back(loadElement(vb, off)); });
  int64_t differ = 0;
  for (size_t i = 0; i < xs.size(); ++i)
    if (!(xs[i] == ys[i] || (std::isnan(xs[i]) && std::isnan(ys[i])))) ++differ;
  EXPECT_EQ(differ, 0) << what << ": " << differ << " of " << xs.size() << " elements differ";
}

TEST(Relayout, SliceKeepsValuesAndPoisonsTheRest) {
  std::mt19937_64 rng(5);
  HostTensor h = makeTensor(DType::BF16, {3, 4, 5}, Layout{}, rng);
  fillUniform(h, rng, -1, 1);
  const HostTensor s = relayout(h, Slice{2, 3, 2});
  EXPECT_EQ(s.meta.strides[0], 4 * (5 + 3 + 2));
  EXPECT_EQ(s.meta.strides[1], 5 + 3 + 2);
  EXPECT_EQ(s.meta.strides[2], 1);
  EXPECT_EQ(s.byteOffset, 3 * 2);
  expectSameValues(h, s, "sliced");
  int64_t poisoned = 0;
  for (uint8_t b : s.bytes) poisoned += b == kPoison;
  EXPECT_EQ(static_cast<int64_t>(s.bytes.size()) - poisoned, 3 * 4 * 5 * 2) << "only the view's bytes are written";
  const HostTensor o = relayout(h, Slice{0, 1, 0});
  EXPECT_EQ(o.byteOffset, 2);
  EXPECT_EQ(o.meta.strides[0], 20);
  expectSameValues(h, o, "offset");
}

TEST(Relayout, IndicesWidenExactlyAndBroadcastRepeatsIndexZero) {
  std::mt19937_64 rng(6);
  HostTensor idx = makeTensor(DType::I32, {4}, Layout{}, rng);
  const double v[4] = {-1, 7, 2147483647, 0};
  for (int i = 0; i < 4; ++i) storeElement(idx.view(), i, v[i]);
  const HostTensor w = relayout(idx, kContiguous, DType::I64);
  EXPECT_EQ(w.meta.dtype, DType::I64);
  expectSameValues(idx, w, "int64");
  HostTensor a = makeTensor(DType::F32, {3, 4}, Layout{}, rng);
  fillUniform(a, rng, -1, 1);
  const HostTensor b = broadcastAlong(a, 1);
  EXPECT_EQ(b.meta.strides[1], 0);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 4; ++c)
      EXPECT_EQ(loadElement(b.view(), r * b.meta.strides[0] + c * b.meta.strides[1]), loadElement(a.view(), r * 4));
}

// Every case: accepted by the op's check, and the reference's results equal on both layouts.
TEST(LayoutMatrix, SsuCasesAreAcceptedAndLayoutFree) {
  for (const SsuLayoutCase& lc : ssuLayoutCases()) {
    SCOPED_TRACE(lc.name());
    SsuProblem placed = placedProblem(lc), plain = makeProblem(lc.c);
    EXPECT_NO_THROW(detail::ssuSpecialization(placed.args(), placed.c.tokens, "sm_90a"));
    if (lc.placing == Placing::Broadcast) continue;  // other parameter values: nothing to compare
    runReference(placed);
    runReference(plain);
    expectSameValues(plain.out, placed.out, "out");
    expectSameValues(plain.state, placed.state, "state");
  }
}

TEST(LayoutMatrix, ConvCasesAreAcceptedAndLayoutFree) {
  for (const ConvLayoutCase& lc : convLayoutCases()) {
    SCOPED_TRACE(lc.name());
    ConvProblem placed = placedProblem(lc), plain(lc.c);
    EXPECT_NO_THROW(detail::convSpecializations(placed.args(), "sm_90a"));
    reference::causal_conv1d(placed.args());
    reference::causal_conv1d(plain.args());
    expectSameValues(plain.out, placed.out, "out");
    expectSameValues(plain.states, placed.states, "states");
  }
  for (const ConvBackwardLayoutCase& lc : convBackwardLayoutCases()) {
    SCOPED_TRACE(lc.name());
    ConvBackwardProblem placed = placedProblem(lc), plain(lc.c);
    EXPECT_NO_THROW(detail::convBackwardSpecializations(placed.args(), "sm_90a"));
    reference::causal_conv1d_backward(placed.args());
    reference::causal_conv1d_backward(plain.args());
    expectSameValues(plain.dx, placed.dx, "dx");
    expectSameValues(plain.dweight, placed.dweight, "dweight");
    expectSameValues(plain.dinit, placed.dinit, "dinitial_states");
  }
  for (const ConvUpdateLayoutCase& lc : convUpdateLayoutCases()) {
    SCOPED_TRACE(lc.name());
    ConvUpdateProblem placed = placedProblem(lc), plain(lc.c);
    EXPECT_NO_THROW(detail::convUpdateSpecialization(placed.args(), "sm_90a"));
    reference::causal_conv1d_update(placed.args());
    reference::causal_conv1d_update(plain.args());
    expectSameValues(plain.out, placed.out, "out");
    expectSameValues(plain.state, placed.state, "state");
  }
}

TEST(LayoutMatrix, DecodeCasesAreAcceptedAndLayoutFree) {
  for (const DecodeLayoutCase& lc : decodeLayoutCases()) {
    SCOPED_TRACE(lc.name());
    DecodeProblem placed = placedProblem(lc), plain(lc.c);
    EXPECT_NO_THROW(detail::decodeStepSpecialization(placed.state(), placed.weights(), placed.args(), "sm_90a"));
    reference::mamba2_decode_step(placed.state(), placed.weights(), placed.args());
    reference::mamba2_decode_step(plain.state(), plain.weights(), plain.args());
    expectSameValues(plain.y, placed.y, "y");
    expectSameValues(plain.ssmState, placed.ssmState, "ssm_state");
    expectSameValues(plain.convState, placed.convState, "conv_state");
  }
}

TEST(LayoutMatrix, ScanCasesAreAcceptedAndLayoutFree) {
  for (const ScanLayoutCase& lc : scanLayoutCases()) {
    SCOPED_TRACE(lc.name());
    ScanProblem placed = placedProblem(lc), plain(lc.c);
    EXPECT_NO_THROW(detail::scanSpecializations(placed.args(), "sm_90a"));
    if (lc.placing == Placing::Broadcast) continue;
    reference::selective_scan(placed.args());
    reference::selective_scan(plain.args());
    expectSameValues(plain.out, placed.out, "out");
  }
  for (const ScanBackwardLayoutCase& lc : scanBackwardLayoutCases()) {
    SCOPED_TRACE(lc.name());
    ScanBackwardProblem placed = placedProblem(lc), plain(lc.c);
    EXPECT_NO_THROW(detail::scanBackwardSpecializations(placed.args(), "sm_90a"));
    reference::selective_scan_backward(placed.args());
    reference::selective_scan_backward(plain.args());
    expectSameValues(plain.du, placed.du, "du");
    expectSameValues(plain.dB, placed.dB, "dB");
    expectSameValues(plain.dinit, placed.dinit, "dinitial_states");
  }
}

}  // namespace

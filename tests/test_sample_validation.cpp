// Token sampling on the CPU: the argument checks of sample_tokens (every bad input gets an
// InvalidArgument error naming the argument; tensors are fake device pointers, never
// dereferenced), the RNG against Philox-4x32-10's published answers, and the float64 reference's
// kept sets and draws on hand-made rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "kernels_dsl/sample/Philox.h"
#include "runtime/ops/SampleTokensSpec.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tests/support/ExpectError.h"
#include "tests/support/FakeTensors.h"

using ssmjit::DeviceKind;
using ssmjit::DType;
using ssmjit::SampleArgs;
using ssmjit::TensorView;
using namespace ssmjit::testing;
namespace ref = ssmjit::reference;

namespace {

// A valid sampling call: batch 4, vocab 1000, bf16 logits, a (4,) step, slot indices.
SampleArgs valid() {
  SampleArgs a;
  a.logits = fakeView(0, DType::BF16, {4, 1000});
  a.token_ids = fakeView(1, DType::I32, {4});
  a.temperature = 0.7f;
  a.top_k = 50;
  a.top_p = 0.9f;
  a.step = fakeView(2, DType::I64, {4});
  a.row_state_indices = fakeView(3, DType::I64, {4});
  return a;
}

void expectError(const SampleArgs& a, std::initializer_list<const char*> parts) {
  const std::string msg = invalidArgMessage([&] { ssmjit::sample_tokens(a); });
  for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
}

}  // namespace

TEST(SampleValidation, BadArgumentsAreNamed) {
  SampleArgs a = valid();
  a.logits = TensorView{};
  expectError(a, {"sample_tokens: logits is required"});
  a = valid();
  a.logits = fakeView(0, DType::BF16, {4, 10, 100});
  expectError(a, {"logits has rank 3", "batch, vocab"});
  a = valid();
  a.logits = fakeView(0, DType::I32, {4, 1000});
  expectError(a, {"logits has dtype int32"});
  a = valid();
  a.logits = fakeView(0, DType::BF16, {4, 0});
  expectError(a, {"logits", "vocab (dim 1) of at least 1"});
  a = valid();
  a.logits.strides[0] = 1;
  a.logits.strides[1] = 4;
  expectError(a, {"logits has strides (1, 4)", "stride 1 along the vocab"});
  a = valid();
  a.token_ids = fakeView(1, DType::I32, {3});
  expectError(a, {"token_ids has shape (3)", "batch"});
  a = valid();
  a.token_ids = fakeView(1, DType::F32, {4});
  expectError(a, {"token_ids has dtype float32"});
  a = valid();
  a.row_state_indices = fakeView(3, DType::I64, {5});
  expectError(a, {"row_state_indices has shape (5)"});
  a = valid();
  a.temperature = std::nanf("");
  expectError(a, {"temperature is NaN"});
  a = valid();
  a.temperature = 1e-35f;
  expectError(a, {"temperature is", "expected <= 0 (greedy) or >= 1e-30"});
  a = valid();
  a.top_p = 0.0f;
  expectError(a, {"top_p is 0.000000", "expected 0 < top_p"});
  a = valid();
  a.top_p = std::nanf("");
  expectError(a, {"top_p is nan"});
  a = valid();
  a.step = TensorView{};
  expectError(a, {"step is required when temperature > 0"});
  a = valid();
  a.step = fakeView(2, DType::I32, {4});
  expectError(a, {"step has dtype int32", "int64"});
  a = valid();
  a.step = fakeView(2, DType::I64, {3});
  expectError(a, {"step has shape (3)", "1 or batch"});
  a = valid();
  a.logits.device = DeviceKind::CPU;
  expectError(a, {"logits is a CPU tensor, expected a CUDA tensor"});
}

TEST(SampleValidation, GreedyNeedsNoStep) {
  SampleArgs a = valid();
  a.temperature = 0.0f;
  a.step = TensorView{};
  a.top_p = 0.5f;
  const auto specs = ssmjit::detail::sampleSpecializations(a, "sm_90a");  // checked and bound, not launched
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].kernel, "sample_argmax");
}

// The published known answers of Philox-4x32-10 (Random123's kat_vectors), first output word.
TEST(SampleReference, PhiloxMatchesItsKnownAnswers) {
  using ssmjit::kernels::philoxWord;
  EXPECT_EQ(philoxWord<int64_t>(0, 0, 0, 0), 0x6627e8d5);
  EXPECT_EQ(philoxWord<int64_t>(0xffffffff, 0xffffffff, -1, -1), 0x408f276d);
  EXPECT_EQ(philoxWord<int64_t>(0xa4093822, 0x299f31d0, 0x0370734413198a2e,
                                static_cast<int64_t>(0x85a308d3243f6a88ull)),
            0xd16cfe09);
  const double u = ref::sample_uniform(0, 0, 0);
  EXPECT_EQ(u, (0x6627e8d5 >> 8) * 0x1p-24);
  EXPECT_NE(ref::sample_uniform(0, 0, 1), u);
  EXPECT_NE(ref::sample_uniform(0, 1, 0), u);
  EXPECT_NE(ref::sample_uniform(1, 0, 0), u);
}

namespace {
std::set<size_t> support(const std::vector<double>& p) {
  std::set<size_t> s;
  for (size_t v = 0; v < p.size(); ++v)
    if (p[v] > 0) s.insert(v);
  return s;
}
double sum(const std::vector<double>& p) {
  double s = 0;
  for (double q : p) s += q;
  return s;
}
}  // namespace

TEST(SampleReference, GreedyIsTheLowestArgMax) {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(support(ref::sample_probabilities({1, 3, 2, 3}, 0, 0, 1)), (std::set<size_t>{1}));
  EXPECT_EQ(support(ref::sample_probabilities({nan, 1, nan, 5, 5}, 0, 0, 1)), (std::set<size_t>{3}));
  EXPECT_EQ(support(ref::sample_probabilities({nan, nan, nan}, 0, 0, 1)), (std::set<size_t>{0}));
  EXPECT_EQ(support(ref::sample_probabilities({-inf, -inf, -inf}, 0, 0, 1)), (std::set<size_t>{0}));
  EXPECT_EQ(support(ref::sample_probabilities({-inf, 2, inf, inf}, 0, 0, 1)), (std::set<size_t>{2}));
}

TEST(SampleReference, TopKAndTopPKeepTheRightSets) {
  const double ln = std::log(2.0);
  // Logits ln(8), ln(4), ln(2), ln(1), ln(1): p = 8, 4, 2, 1, 1 over 16 at temperature 1.
  const std::vector<double> x = {std::log(4.0), std::log(1.0), std::log(8.0), std::log(2.0), std::log(1.0)};
  std::vector<double> p = ref::sample_probabilities(x, 1, 0, 1);
  EXPECT_NEAR(p[2], 0.5, 1e-12);
  EXPECT_NEAR(p[4], 1.0 / 16, 1e-12);
  EXPECT_EQ(support(ref::sample_probabilities(x, 1, 1, 1)), (std::set<size_t>{2}));
  EXPECT_EQ(support(ref::sample_probabilities(x, 1, 2, 1)), (std::set<size_t>{0, 2}));
  // Ties at the k-th value are all kept.
  EXPECT_EQ(support(ref::sample_probabilities(x, 1, 4, 1)), (std::set<size_t>{0, 1, 2, 3, 4}));
  // top_k >= V or <= 0: everything.
  EXPECT_EQ(support(ref::sample_probabilities(x, 1, 5, 1)).size(), 5u);
  EXPECT_EQ(support(ref::sample_probabilities(x, 1, -1, 1)).size(), 5u);
  // top-p: 8/16 reaches 0.5; 0.5 + eps needs 8 + 4; 0.75 exactly is 8 + 4; 0.8 adds 2.
  EXPECT_EQ(support(ref::sample_probabilities(x, 1, 0, 0.5)), (std::set<size_t>{2}));
  EXPECT_EQ(support(ref::sample_probabilities(x, 1, 0, 0.51)), (std::set<size_t>{0, 2}));
  EXPECT_EQ(support(ref::sample_probabilities(x, 1, 0, 0.75)), (std::set<size_t>{0, 2}));
  p = ref::sample_probabilities(x, 1, 0, 0.8);
  EXPECT_EQ(support(p), (std::set<size_t>{0, 2, 3}));
  EXPECT_NEAR(p[2], 8.0 / 14, 1e-12);
  EXPECT_NEAR(sum(p), 1.0, 1e-12);
  // top-p after top-k, of the mass top-k kept: top 2 (8 + 4); 8 is 2/3 of 12.
  EXPECT_EQ(support(ref::sample_probabilities(x, 1, 2, 0.66)), (std::set<size_t>{2}));
  EXPECT_EQ(support(ref::sample_probabilities(x, 1, 2, 0.67)), (std::set<size_t>{0, 2}));
  // Temperature sharpens: at 0.5 the masses are 64, 16, 4, 1, 1.
  p = ref::sample_probabilities(x, 0.5, 0, 1);
  EXPECT_NEAR(p[2], 64.0 / 86, 1e-12);
  EXPECT_NEAR(p[0], 16.0 / 86, 1e-12);
  // NaN and -inf are never drawn; all of them: nothing drawable.
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(support(ref::sample_probabilities({nan, ln, -inf, 0}, 1, 0, 1)), (std::set<size_t>{1, 3}));
  EXPECT_TRUE(support(ref::sample_probabilities({nan, -inf}, 1, 0, 1)).empty());
}

TEST(SampleReference, DrawWalksTheRunningMass) {
  const std::vector<double> p = {0.0, 0.25, 0.0, 0.5, 0.25};
  EXPECT_EQ(ref::sample_draw(p, 0.0), 1);
  EXPECT_EQ(ref::sample_draw(p, 0.2499), 1);
  EXPECT_EQ(ref::sample_draw(p, 0.25), 3);
  EXPECT_EQ(ref::sample_draw(p, 0.7499), 3);
  EXPECT_EQ(ref::sample_draw(p, 0.75), 4);
  EXPECT_EQ(ref::sample_draw(p, 1.0), 4);  // rounding short of u: the last kept
  EXPECT_EQ(ref::sample_draw({0.0, 0.0}, 0.5), 0);
}

// reference::sample_tokens on CPU tensors: the uniform of (seed, slot, step), pad rows untouched,
// each drawn row's step advanced (a (B,) counter) or the shared one once.
TEST(SampleReference, TokensFollowSeedSlotAndStep) {
  const int64_t B = 3, V = 4;
  std::vector<float> logits = {0, 1, 5, 0, 1, 2, 3, 4, 4, 3, 2, 1};
  std::vector<int64_t> ids(B, -7), step = {5, 9, 11};
  std::vector<int32_t> slots = {2, -1, 0};
  SampleArgs a;
  a.logits = TensorView::contiguous(logits.data(), DType::F32, {B, V}, DeviceKind::CPU);
  a.token_ids = TensorView::contiguous(ids.data(), DType::I64, {B}, DeviceKind::CPU);
  a.step = TensorView::contiguous(step.data(), DType::I64, {B}, DeviceKind::CPU);
  a.row_state_indices = TensorView::contiguous(slots.data(), DType::I32, {B}, DeviceKind::CPU);
  a.temperature = 1.0f;
  a.seed = 0x123456789abcull;
  ref::sample_tokens(a);
  EXPECT_EQ(step, (std::vector<int64_t>{6, 9, 12}));
  EXPECT_EQ(ids[1], -7);
  for (int64_t b : {0, 2}) {
    std::vector<double> x(logits.begin() + b * V, logits.begin() + (b + 1) * V);
    const double u = ref::sample_uniform(a.seed, slots[b], step[b] - 1);
    EXPECT_EQ(ids[b], ref::sample_draw(ref::sample_probabilities(x, 1.0, 0, 1.0), u)) << "row " << b;
  }
  // A shared step: every row draws at its value, which then advances once.
  std::vector<int64_t> shared = {40};
  a.step = TensorView::contiguous(shared.data(), DType::I64, {1}, DeviceKind::CPU);
  a.top_k = 1;
  ref::sample_tokens(a);
  EXPECT_EQ(shared[0], 41);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[2], 0);
}

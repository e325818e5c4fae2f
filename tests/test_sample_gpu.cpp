// sample_tokens on the GPU against the float64 reference (ssmjit/reference.h): greedy equals the
// reference's arg max exactly (ties, NaN, +-inf, padded rows, every dtype, V up to 256k); a draw
// makes the reference's choice for the same uniform (up to float32 rounding of the running mass);
// top-k = 1 is greedy; top-p never draws outside its set and draws it in proportion (chi-square
// over 20k draws); the same seed and step give the same tokens; pad rows are left untouched; a
// captured CUDA graph draws fresh tokens on each replay. Also times one call at Mamba-2 shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "GpuTest.h"
#include "runtime/CudaGraph.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/reference/ElementAccess.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"

using namespace ssmjit;
namespace ref = ssmjit::reference;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kUntouched = -7;  // what token_ids hold before a call

// Rows of logits on the host (row stride V + pad) and their device copy.
struct Logits {
  DType dtype;
  int64_t B, V, stride;
  std::vector<uint8_t> bytes;
  Logits(DType t, int64_t b, int64_t v, int64_t pad = 0)
      : dtype(t), B(b), V(v), stride(v + pad), bytes(static_cast<size_t>(b * (v + pad) * dtypeBytes(t)), 0) {}
  TensorView host() {
    TensorView h;
    h.data = bytes.data();
    h.dtype = dtype;
    h.ndim = 2;
    h.shape[0] = B, h.shape[1] = V;
    h.strides[0] = stride, h.strides[1] = 1;
    h.device = DeviceKind::CPU;
    return h;
  }
  void set(int64_t b, int64_t v, double x) { ref::storeElement(host(), b * stride + v, x); }
  double get(int64_t b, int64_t v) { return ref::loadElement(host(), b * stride + v); }
  std::vector<double> row(int64_t b) {
    std::vector<double> x(static_cast<size_t>(V));
    for (int64_t v = 0; v < V; ++v) x[v] = get(b, v);
    return x;
  }
  void fillUniform(std::mt19937_64& rng, double lo, double hi) {
    std::uniform_real_distribution<double> d(lo, hi);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t v = 0; v < V; ++v) set(b, v, d(rng));
  }
};

TensorView onDevice(const DeviceBuffer& d, TensorView h) {
  h.data = d.data();
  h.device = DeviceKind::CUDA;
  h.deviceId = 0;
  return h;
}

// One sample_tokens call set up on both sides: host tensors for the reference, device copies
// for the op. steps: (B,) or (1,); slots: empty (key = row) or (B,) with -1 for pad rows.
struct Call {
  Logits& logits;
  SampleArgs opts;  // temperature, top_k, top_p, seed
  std::vector<int64_t> steps;
  std::vector<int32_t> slots;
  DeviceBuffer dLogits, dIds, dSteps, dSlots;
  std::vector<int64_t> ids;

  Call(Logits& l, const SampleArgs& o, std::vector<int64_t> st = {}, std::vector<int32_t> sl = {})
      : logits(l), opts(o), steps(std::move(st)), slots(std::move(sl)) {
    dLogits = DeviceBuffer::fromHost(logits.bytes);
    dIds = DeviceBuffer::fromHost(std::vector<int64_t>(static_cast<size_t>(logits.B), kUntouched));
    if (!steps.empty()) dSteps = DeviceBuffer::fromHost(steps);
    if (!slots.empty()) dSlots = DeviceBuffer::fromHost(slots);
    ids.assign(static_cast<size_t>(logits.B), kUntouched);
  }
  SampleArgs hostArgs() {
    SampleArgs a = opts;
    a.logits = logits.host();
    a.token_ids = TensorView::contiguous(ids.data(), DType::I64, {logits.B}, DeviceKind::CPU);
    if (!steps.empty())
      a.step = TensorView::contiguous(steps.data(), DType::I64, {int64_t(steps.size())}, DeviceKind::CPU);
    if (!slots.empty())
      a.row_state_indices = TensorView::contiguous(slots.data(), DType::I32, {logits.B}, DeviceKind::CPU);
    return a;
  }
  SampleArgs deviceArgs() {
    SampleArgs h = hostArgs(), a = h;
    a.logits = onDevice(dLogits, h.logits);
    a.token_ids = onDevice(dIds, h.token_ids);
    if (!steps.empty()) a.step = onDevice(dSteps, h.step);
    if (!slots.empty()) a.row_state_indices = onDevice(dSlots, h.row_state_indices);
    return a;
  }
  std::vector<int64_t> deviceIds() const { return dIds.download<int64_t>(); }
  std::vector<int64_t> deviceSteps() const { return dSteps.download<int64_t>(); }
  int64_t key(int64_t b) const { return slots.empty() ? b : slots[b]; }
};

// Runs the op and the reference once each from the same state. Expects the same steps after, and
// each drawn token to be the reference's, or one whose running-mass interval [c0, c1) (in the
// reference's renormalised p) holds the uniform within `tol` (float32 rounding of the sums).
void expectReferenceChoices(Call& c, double tol) {
  const std::vector<int64_t> stepsBefore = c.steps;
  sample_tokens(c.deviceArgs());
  ref::sample_tokens(c.hostArgs());
  const std::vector<int64_t> got = c.deviceIds();
  if (!c.steps.empty()) EXPECT_EQ(c.deviceSteps(), c.steps) << "step counters";
  int64_t inexact = 0;
  for (int64_t b = 0; b < c.logits.B; ++b) {
    SCOPED_TRACE("row " + std::to_string(b));
    if (c.key(b) == -1) {
      EXPECT_EQ(got[b], kUntouched) << "a pad row's token is left as it was";
      continue;
    }
    if (got[b] == c.ids[b]) continue;
    ++inexact;
    ASSERT_GE(got[b], 0);
    ASSERT_LT(got[b], c.logits.V);
    const std::vector<double> p =
        ref::sample_probabilities(c.logits.row(b), c.opts.temperature, c.opts.top_k, c.opts.top_p);
    const int64_t s = stepsBefore.size() == 1 ? stepsBefore[0] : stepsBefore[b];
    const double u = ref::sample_uniform(c.opts.seed, c.key(b), s);
    double c0 = 0;
    for (int64_t v = 0; v < got[b]; ++v) c0 += p[v];
    EXPECT_GT(p[got[b]], 0) << "token " << got[b] << " is outside the kept set (reference drew " << c.ids[b] << ")";
    EXPECT_TRUE(c0 - tol <= u && u <= c0 + p[got[b]] + tol)
        << "token " << got[b] << " covers [" << c0 << ", " << c0 + p[got[b]] << "), u = " << u << ", reference drew "
        << c.ids[b];
  }
  std::fprintf(stderr, "[ measured ] %s: %lld of %lld drawn rows differ from the reference within rounding\n",
               ::testing::UnitTest::GetInstance()->current_test_info()->name(), (long long)inexact,
               (long long)c.logits.B);
  EXPECT_LE(inexact, 2 + c.logits.B / 10) << "too many rows off the reference's exact choice";
}

SampleArgs options(float temperature, int topK = 0, float topP = 1.0f, uint64_t seed = 42) {
  SampleArgs o;
  o.temperature = temperature;
  o.top_k = topK;
  o.top_p = topP;
  o.seed = seed;
  return o;
}

std::vector<int64_t> iota(int64_t n, int64_t from) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = from + i;
  return v;
}

}  // namespace

// Greedy: the reference's arg max exactly. Row 0 all NaN (gives 0), row 1 all -inf (gives 0),
// row 2 NaN in places with a tie for the maximum, row 3 two +inf, rows 4 and 5 the maximum at the
// last and the first index; random rows (bf16 rounding makes ties at the top common). Padded row
// strides; one pad row.
TEST(SampleGpu, GreedyIsTheReferenceArgMax) {
  SSMJIT_REQUIRE_GPU();
  struct Case {
    DType dtype;
    int64_t B, V;
  };
  for (Case k : {Case{DType::BF16, 64, 50288}, Case{DType::F32, 8, 50280}, Case{DType::F16, 8, 4097},
                 Case{DType::BF16, 3, 256000}, Case{DType::F32, 7, 1}}) {
    SCOPED_TRACE(std::string(dtypeName(k.dtype)) + " B " + std::to_string(k.B) + " V " + std::to_string(k.V));
    std::mt19937_64 rng(k.V);
    Logits l(k.dtype, k.B, k.V, 8);
    l.fillUniform(rng, -8, 8);
    if (k.B >= 6 && k.V > 300) {
      for (int64_t v = 0; v < k.V; ++v) l.set(0, v, kNaN), l.set(1, v, -kInf);
      for (int64_t v = 0; v < k.V; v += 7) l.set(2, v, kNaN);
      l.set(2, 100, 50), l.set(2, 200, 50), l.set(2, 300, kNaN);
      l.set(3, k.V / 3, kInf), l.set(3, k.V / 2, kInf);
      l.set(4, k.V - 1, 60);
      l.set(5, 0, 60);
    }
    std::vector<int32_t> slots;
    for (int64_t b = 0; b < k.B; ++b) slots.push_back(b == k.B - 1 && k.B > 1 ? -1 : int32_t(b));
    Call c(l, options(0.0f), {}, slots);
    sample_tokens(c.deviceArgs());
    ref::sample_tokens(c.hostArgs());
    EXPECT_EQ(c.deviceIds(), c.ids);
    if (k.B >= 6 && k.V > 300) {
      EXPECT_EQ(c.ids[0], 0) << "all NaN";
      EXPECT_EQ(c.ids[1], 0) << "all -inf";
      EXPECT_EQ(c.ids[2], 100) << "the lowest of tied maxima";
      EXPECT_EQ(c.ids[3], k.V / 3) << "the first +inf";
      EXPECT_EQ(c.ids[4], k.V - 1);
      EXPECT_EQ(c.ids[5], 0);
    }
  }
}

// Draws against the reference for the same uniform: temperature alone, top-k, top-p, both; a
// (B,) step per row with slots and a pad row, and a shared (1,) step.
TEST(SampleGpu, DrawsMakeTheReferenceChoice) {
  SSMJIT_REQUIRE_GPU();
  std::mt19937_64 rng(7);
  Logits l(DType::F32, 64, 1000, 3);
  l.fillUniform(rng, -4, 4);
  std::vector<int32_t> slots;
  for (int32_t b = 0; b < 64; ++b) slots.push_back(b == 5 ? -1 : 1000 + 3 * b);
  for (SampleArgs o : {options(1.0f), options(0.7f, 20), options(1.0f, 0, 0.9f), options(1.3f, 100, 0.8f),
                       options(0.5f, 1000, 0.999f)}) {
    SCOPED_TRACE("temperature " + std::to_string(o.temperature) + " top_k " + std::to_string(o.top_k) + " top_p " +
                 std::to_string(o.top_p));
    Call perRow(l, o, iota(64, 1000), slots);
    expectReferenceChoices(perRow, 2e-5);
    Call shared(l, o, {77});
    expectReferenceChoices(shared, 2e-5);
    EXPECT_EQ(shared.deviceSteps(), (std::vector<int64_t>{78}));
  }
}

// Mamba-2 and larger vocabularies in bf16 (ties from the rounding, kept whole).
TEST(SampleGpu, DrawsMakeTheReferenceChoiceAtLargeVocabularies) {
  SSMJIT_REQUIRE_GPU();
  for (int64_t V : {50288, 128256}) {
    SCOPED_TRACE("V " + std::to_string(V));
    std::mt19937_64 rng(V);
    Logits l(DType::BF16, 16, V);
    l.fillUniform(rng, -6, 12);
    for (SampleArgs o : {options(1.0f), options(0.8f, 50, 0.9f), options(1.0f, 0, 0.95f)}) {
      Call c(l, o, iota(16, 3));
      expectReferenceChoices(c, 2e-5);
    }
  }
}

// Distinct logits (a shuffled ramp in steps of 1/64, far above the searches' resolution) so that
// top-k = 1 keeps the arg max alone.
TEST(SampleGpu, TopKOneIsGreedy) {
  SSMJIT_REQUIRE_GPU();
  std::mt19937_64 rng(11);
  Logits l(DType::F32, 64, 50288);
  std::vector<int64_t> ramp = iota(l.V, 0);
  for (int64_t b = 0; b < l.B; ++b) {
    std::shuffle(ramp.begin(), ramp.end(), rng);
    for (int64_t v = 0; v < l.V; ++v) l.set(b, v, double(ramp[v]) / 64 - 400);
  }
  Call greedy(l, options(0.0f));
  sample_tokens(greedy.deviceArgs());
  for (SampleArgs o : {options(0.7f, 1), options(2.0f, 1, 0.5f)}) {
    Call c(l, o, iota(64, 0));
    sample_tokens(c.deviceArgs());
    EXPECT_EQ(c.deviceIds(), greedy.deviceIds());
  }
}

// 1000 rows of one hand-made distribution, 20 calls: 20k draws, each inside the top-p (and
// top-k) set, in proportion to the renormalised probabilities.
TEST(SampleGpu, TopPDrawsOnlyItsSetInProportion) {
  SSMJIT_REQUIRE_GPU();
  const std::vector<double> w = {0.5, 10, 3, 0.2, 8, 1, 6, 0.3, 4, 2, 0.1, 5, 0.05, 1.5, 0.4, 7};
  const int64_t B = 1000, V = static_cast<int64_t>(w.size());
  Logits l(DType::F32, B, V);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t v = 0; v < V; ++v) l.set(b, v, std::log(w[v]));
  for (SampleArgs o : {options(1.0f, 0, 0.8f), options(1.0f, 4, 0.9f), options(0.8f, 6)}) {
    SCOPED_TRACE("top_k " + std::to_string(o.top_k) + " top_p " + std::to_string(o.top_p));
    const std::vector<double> p = ref::sample_probabilities(l.row(0), o.temperature, o.top_k, o.top_p);
    Call c(l, o, iota(B, 0));
    std::vector<int64_t> counts(static_cast<size_t>(V), 0);
    const int calls = 20;
    for (int i = 0; i < calls; ++i) {
      sample_tokens(c.deviceArgs());
      for (int64_t t : c.deviceIds()) {
        ASSERT_TRUE(t >= 0 && t < V) << t;
        ++counts[t];
      }
    }
    double chi2 = 0;
    int64_t kept = 0;
    for (int64_t v = 0; v < V; ++v) {
      if (p[v] == 0) {
        EXPECT_EQ(counts[v], 0) << "token " << v << " is outside the set";
        continue;
      }
      ++kept;
      const double expected = p[v] * B * calls;
      chi2 += (counts[v] - expected) * (counts[v] - expected) / expected;
    }
    const double dof = double(kept - 1), bound = dof + 8 * std::sqrt(2 * dof) + 10;
    std::fprintf(stderr, "[ measured ] chi-square %.2f over %lld tokens (bound %.1f)\n", chi2, (long long)kept, bound);
    EXPECT_LT(chi2, bound);
  }
}

TEST(SampleGpu, SameSeedAndStepGiveTheSameTokens) {
  SSMJIT_REQUIRE_GPU();
  std::mt19937_64 rng(3);
  Logits l(DType::BF16, 64, 5000);
  l.fillUniform(rng, -1, 1);
  Call a(l, options(1.0f, 0, 0.95f, 99), iota(64, 10)), b(l, options(1.0f, 0, 0.95f, 99), iota(64, 10));
  Call other(l, options(1.0f, 0, 0.95f, 100), iota(64, 10));
  sample_tokens(a.deviceArgs());
  sample_tokens(b.deviceArgs());
  sample_tokens(other.deviceArgs());
  EXPECT_EQ(a.deviceIds(), b.deviceIds());
  int same = 0;
  const auto x = a.deviceIds(), y = other.deviceIds();
  for (size_t i = 0; i < x.size(); ++i) same += x[i] == y[i];
  EXPECT_LT(same, 8) << "another seed draws other tokens";
  // The next step draws again: other tokens.
  sample_tokens(a.deviceArgs());
  const auto z = a.deviceIds();
  same = 0;
  for (size_t i = 0; i < x.size(); ++i) same += x[i] == z[i];
  EXPECT_LT(same, 8);
}

// Captured once, replayed twice: each replay advances the device counter and draws anew; the
// second replay's tokens are the reference's at the counters it read.
TEST(SampleGpu, GraphReplaysDrawFreshTokens) {
  SSMJIT_REQUIRE_GPU();
  std::mt19937_64 rng(5);
  Logits l(DType::BF16, 64, 1000);
  l.fillUniform(rng, -1, 1);
  for (bool perRow : {true, false}) {
    SCOPED_TRACE(perRow ? "(B,) step" : "(1,) step");
    std::vector<int32_t> slots;
    for (int32_t b = 0; b < 64; ++b) slots.push_back(b == 9 ? -1 : b);
    Call c(l, options(1.0f, 200, 0.95f, 5), perRow ? iota(64, 0) : std::vector<int64_t>{0}, slots);
    OwnedStream stream;
    const SampleArgs a = c.deviceArgs();
    sample_tokens(a, stream);  // compiles and loads: not allowed inside a capture
    stream.synchronize();
    CudaGraph g = CudaGraph::capture(stream, [&](CUstream s) { sample_tokens(a, s); });
    ASSERT_TRUE(g.valid());
    g.launch(stream);
    stream.synchronize();
    const std::vector<int64_t> first = c.deviceIds();
    const std::vector<int64_t> stepsBefore = c.deviceSteps();
    g.launch(stream);
    stream.synchronize();
    const std::vector<int64_t> second = c.deviceIds();
    int same = 0;
    for (size_t i = 0; i < first.size(); ++i) same += first[i] == second[i];
    EXPECT_LT(same, 12) << "a replay draws fresh numbers";
    EXPECT_EQ(first[9], kUntouched);
    EXPECT_EQ(second[9], kUntouched);
    std::vector<int64_t> steps = c.deviceSteps();
    for (size_t i = 0; i < steps.size(); ++i)
      EXPECT_EQ(steps[i], (perRow ? int64_t(i) : 0) + (perRow && i == 9 ? 0 : 3)) << "counter " << i;
    // The reference from the counters the second replay read.
    c.steps = stepsBefore;
    c.ids.assign(c.ids.size(), kUntouched);
    ref::sample_tokens(c.hostArgs());
    for (size_t i = 0; i < second.size(); ++i) {
      if (second[i] == c.ids[i]) continue;
      const std::vector<double> p = ref::sample_probabilities(l.row(int64_t(i)), 1.0, 200, 0.95);
      const double u = ref::sample_uniform(5, c.key(int64_t(i)), perRow ? stepsBefore[i] : stepsBefore[0]);
      double c0 = 0;
      for (int64_t v = 0; v < second[i]; ++v) c0 += p[v];
      EXPECT_TRUE(c0 - 2e-5 <= u && u <= c0 + p[second[i]] + 2e-5) << "row " << i;
    }
  }
}

// One call at Mamba-2 decode shapes (B 64, V 50288, bf16), each mode, timed over 50 calls.
TEST(SampleGpu, TimesOneCallAtMamba2Shapes) {
  SSMJIT_REQUIRE_GPU();
  std::mt19937_64 rng(1);
  Logits l(DType::BF16, 64, 50288);
  l.fillUniform(rng, -6, 12);
  const driver::Api& api = driver::api();
  struct Mode {
    const char* name;
    SampleArgs o;
  };
  for (const Mode& m : {Mode{"greedy", options(0.0f)}, Mode{"temperature", options(0.8f)},
                        Mode{"top-k 50", options(0.8f, 50)}, Mode{"top-p 0.9", options(0.8f, 0, 0.9f)},
                        Mode{"top-k 50 top-p 0.9", options(0.8f, 50, 0.9f)}}) {
    Call c(l, m.o, iota(64, 0));
    const SampleArgs a = c.deviceArgs();
    sample_tokens(a);
    CUevent start, stop;
    driver::check(api.cuEventCreate(&start, 0), "cuEventCreate");
    driver::check(api.cuEventCreate(&stop, 0), "cuEventCreate");
    const int n = 50;
    driver::check(api.cuEventRecord(start, nullptr), "cuEventRecord");
    for (int i = 0; i < n; ++i) sample_tokens(a);
    driver::check(api.cuEventRecord(stop, nullptr), "cuEventRecord");
    driver::check(api.cuEventSynchronize(stop), "cuEventSynchronize");
    float ms = 0;
    driver::check(api.cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
    api.cuEventDestroy(start);
    api.cuEventDestroy(stop);
    const double us = 1000.0 * ms / n;
    std::fprintf(stderr, "[ measured ] sample_tokens %s, B 64, V 50288 bf16: %.1f us a call\n", m.name, us);
    EXPECT_LT(us, 1000.0) << m.name;
  }
}

// ssd_backward on the CPU: the float64 reference's gradients against central differences of an
// independent float64 forward (the quadratic form of tests/support/SsdForms.h) along random
// directions of every input (with and without softplus and the clamp, dinitial_states with
// dfinal_states given), ddt's zeros where the clamp binds, packing (a packed row's gradients
// equal running each sequence alone), context parallelism's state adjoints passed back over
// parts (ssd_parallel.h), and the argument check (every bad call is refused with a
// message naming the argument, and writes nothing).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/ops/SsdCheck.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tests/support/ExpectError.h"
#include "tests/support/HostTensors.h"
#include "tests/support/SsdForms.h"
#include "tools/problems/HostTensor.h"

using namespace ssmjit;
using namespace ssmjit::testing;

namespace {

// The forward's problem, dout and dfinal_states, and poisoned fp32 gradients.
struct SsdBackwardProblem {
  SsdProblem f;
  HostTensor dout, dfinal, dx, ddt, dA, dB, dC, dD, dz, ddtBias, dinit;

  SsdBackwardProblem(const SsdCase& c, bool withDfinal, bool withDinit) : f(c) {
    std::mt19937_64 rng(c.seed + 1000);
    auto fresh = [&](std::vector<int64_t> shape) {
      HostTensor h = makeTensor(DType::F32, shape, Layout{}, rng);
      fillUniform(h, rng, -1, 1);
      return h;
    };
    auto poisoned = [&](std::vector<int64_t> shape) { return makeTensor(DType::F32, shape, Layout{}, rng); };
    const SsdCase& k = f.c;
    dout = fresh({k.batch, k.L, k.H, k.P});
    if (withDfinal) dfinal = fresh({f.S, k.H, k.P, k.N});
    dx = poisoned({k.batch, k.L, k.H, k.P});
    ddt = poisoned({k.batch, k.L, k.H});
    dA = poisoned({k.H});
    dB = poisoned({k.batch, k.L, k.G, k.N});
    dC = poisoned({k.batch, k.L, k.G, k.N});
    if (k.hasD) dD = k.dPerChannel ? poisoned({k.H, k.P}) : poisoned({k.H});
    if (k.hasZ) dz = poisoned({k.batch, k.L, k.H, k.P});
    if (k.hasDtBias) ddtBias = poisoned({k.H});
    if (withDinit) dinit = poisoned({f.S, k.H, k.P, k.N});
  }

  SsdBackwardArgs args() const {
    auto v = [](const HostTensor& t) { return t.defined ? t.view() : TensorView{}; };
    SsdBackwardArgs b;
    b.forward = f.args();
    b.forward.out = {}, b.forward.final_states = {}, b.forward.sequence_decay = {};
    b.forward.block_state_tokens = 0, b.forward.block_states = {}, b.forward.block_state_indices = {};
    b.dout = v(dout), b.dfinal_states = v(dfinal);
    b.dx = v(dx), b.ddt = v(ddt), b.dA = v(dA), b.dB = v(dB), b.dC = v(dC), b.dD = v(dD), b.dz = v(dz);
    b.ddt_bias = v(ddtBias), b.dinitial_states = v(dinit);
    return b;
  }
  std::vector<HostTensor*> all() {
    std::vector<HostTensor*> v = f.all();
    for (HostTensor* t : {&dout, &dfinal, &dx, &ddt, &dA, &dB, &dC, &dD, &dz, &ddtBias, &dinit}) v.push_back(t);
    return v;
  }
};

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// The scalar whose gradients the backward computes: dot(dout, out) + dot(dfinal_states at each
// sequence's final slot, its final state), from the quadratic form in double.
double lossOf(const SsdInputs& in, const SsdBackwardProblem& p) {
  const SsdResult r = quadraticForm(in);
  double l = dot(valuesOf(p.dout), r.y);
  if (!p.dfinal.defined) return l;
  const std::vector<double> df = valuesOf(p.dfinal);
  const int64_t per = in.H * in.P * in.N;
  for (int64_t i = 0; i < in.nseq; ++i) {
    const int64_t s = p.f.finalSlot.empty() ? i : p.f.finalSlot[size_t(i)];
    if (s < 0) continue;
    for (int64_t k = 0; k < per; ++k) l += df[size_t(s * per + k)] * r.final[size_t(i * per + k)];
  }
  return l;
}

struct Param {
  const char* name;
  std::vector<double> SsdInputs::*input;
  const HostTensor* grad;
};

// Central differences of the loss along random directions u of each input, against
// dot(gradient, u). The step is small (the forward is float64 throughout); the gradients are
// fp32, so the bound allows their rounding.
void checkDirectionalDerivatives(const SsdCase& c, bool dfinal, bool dinit) {
  SsdBackwardProblem p(c, dfinal, dinit);
  auto inputBytes = [&] {
    std::vector<std::vector<uint8_t>> v;
    for (HostTensor* t : p.f.all()) v.push_back(t->bytes);
    return v;
  };
  const auto before = inputBytes();
  reference::ssd_backward(p.args());
  const SsdInputs base(p.f);
  std::vector<Param> params = {{"x", &SsdInputs::x, &p.dx},
                               {"dt", &SsdInputs::dt, &p.ddt},
                               {"A", &SsdInputs::A, &p.dA},
                               {"B", &SsdInputs::B, &p.dB},
                               {"C", &SsdInputs::C, &p.dC}};
  if (c.hasD) params.push_back({"D", &SsdInputs::D, &p.dD});
  if (c.hasZ) params.push_back({"z", &SsdInputs::z, &p.dz});
  if (c.hasDtBias) params.push_back({"dt_bias", &SsdInputs::dtBias, &p.ddtBias});
  if (dinit) params.push_back({"initial_states", &SsdInputs::init, &p.dinit});
  std::mt19937_64 rng(c.seed + 7);
  std::normal_distribution<double> gauss;
  const double h = 1e-5;
  for (const Param& pr : params) {
    SCOPED_TRACE(pr.name);
    std::vector<double> g = valuesOf(*pr.grad);
    const size_t n = (base.*pr.input).size();
    ASSERT_EQ(g.size(), n);
    // Slots no sequence reads get no gradient (left poisoned) and no direction.
    std::vector<char> live(n, 1);
    if (pr.input == &SsdInputs::init) {
      const size_t per = size_t(c.H * c.P * c.N);
      std::vector<char> read(size_t(p.f.S), 0);
      for (int64_t i = 0; i < p.f.nseq; ++i)
        if (p.f.initSlot[size_t(i)] >= 0) read[size_t(p.f.initSlot[size_t(i)])] = 1;
      for (size_t k = 0; k < n; ++k) {
        live[k] = read[k / per];
        if (!live[k]) {
          EXPECT_TRUE(std::isnan(g[k])) << "dinitial_states written at a slot no sequence reads";
          g[k] = 0;
        }
      }
    }
    for (size_t k = 0; k < n; ++k) EXPECT_TRUE(std::isfinite(g[k])) << pr.name << "[" << k << "]";
    for (int dir = 0; dir < 2; ++dir) {
      std::vector<double> u(n);
      for (size_t k = 0; k < n; ++k) u[k] = live[k] ? gauss(rng) : 0.0;
      auto lossAt = [&](double s) {
        SsdInputs q = base;
        for (size_t k = 0; k < n; ++k) (q.*pr.input)[k] += s * u[k];
        return lossOf(q, p);
      };
      const double numeric = (lossAt(h) - lossAt(-h)) / (2 * h), analytic = dot(g, u);
      const double tol = 1e-6 * std::abs(analytic) + 1e-7 * std::sqrt(dot(g, g) * dot(u, u));
      EXPECT_NEAR(numeric, analytic, tol) << "direction " << dir;
      std::printf("    %-15s <grad, u> %+.10e  central difference %+.10e  rel %.1e\n", pr.name, analytic, numeric,
                  std::abs(numeric - analytic) / std::max(std::abs(analytic), 1e-300));
    }
  }
  EXPECT_EQ(inputBytes(), before) << "an input was written";
}

TEST(SsdBackwardReference, GradientsMatchCentralDifferences) {
  SsdCase c;  // packed, softplus (with dt > 20), bias, a clamp that binds, D (H, P), z, slots
  c.lens = {5, 1, 9}, c.G = 2, c.N = 4, c.dPerChannel = true, c.bigDt = true, c.dtMin = 0.05f, c.dtMax = 8.0f;
  c.initial = c.final = c.slotIndices = true, c.seed = 70;
  {
    SCOPED_TRACE("packed, softplus, clamp, D (H, P), z, slots");
    checkDirectionalDerivatives(c, true, true);
  }
  c = SsdCase{};  // dense, no softplus, no clamp, G 1, D (H), no z, no bias, initial slot i
  c.batch = 2, c.L = 6, c.G = 1, c.softplus = false, c.hasZ = false, c.hasDtBias = false, c.initial = true;
  c.seed = 71;
  {
    SCOPED_TRACE("dense, plain dt, G 1");
    checkDirectionalDerivatives(c, true, true);
  }
  c = SsdCase{};  // dense, G H, softplus, no D, no states, strong decays
  c.L = 9, c.G = c.H, c.hasD = false, c.aLo = -12, c.aHi = -6, c.seed = 72;
  {
    SCOPED_TRACE("dense, G H, no D, no states");
    checkDirectionalDerivatives(c, false, false);
  }
  c = SsdCase{};  // dfinal only: the initial state is read but its gradient not asked for
  c.lens = {4, 6}, c.initial = true, c.dtMin = 0.2f, c.dtMax = 0.6f, c.seed = 73;
  {
    SCOPED_TRACE("packed, dfinal without dinit, clamp");
    checkDirectionalDerivatives(c, true, false);
  }
}

// ddt is exactly 0 where the clamp binds (dt' before the clamp outside [dt_min, dt_max]) and not
// elsewhere; softplus passes dt + dt_bias > 20 through with slope 1.
TEST(SsdBackwardReference, DtGradientIsZeroWhereTheClampBinds) {
  SsdCase c;
  c.L = 40, c.bigDt = true, c.dtMin = 0.2f, c.dtMax = 0.9f, c.seed = 80;
  SsdBackwardProblem p(c, false, false);
  reference::ssd_backward(p.args());
  const SsdInputs in(p.f);
  int bound = 0, unclamped = 0;
  for (int64_t t = 0; t < c.L; ++t)
    for (int64_t h = 0; h < c.H; ++h) {
      double v = in.dt[size_t(t * c.H + h)] + in.dtBias[size_t(h)];
      v = v > 20 ? v : std::log1p(std::exp(v));
      const double g = loadElement(p.ddt.view(), t * c.H + h);
      if (v < c.dtMin || v > c.dtMax) {
        EXPECT_EQ(g, 0.0) << "token " << t << " head " << h << ": dt' " << v << " is clamped";
        ++bound;
      } else {
        EXPECT_NE(g, 0.0) << "token " << t << " head " << h;
        ++unclamped;
      }
    }
  EXPECT_GT(bound, 10);
  EXPECT_GT(unclamped, 10);
}

// A packed row's per-token gradients and dinitial_states equal, bit for bit, running each
// sequence alone; the parameter gradients (dA, dD, ddt_bias) are the sums of theirs.
TEST(SsdBackwardReference, PackedSequenceEqualsItsOwnCall) {
  SsdCase c;
  c.lens = {6, 1, 11, 3}, c.G = 2, c.dPerChannel = true, c.initial = c.final = c.slotIndices = true, c.seed = 90;
  SsdBackwardProblem packed(c, true, true), alone(c, true, true);
  reference::ssd_backward(packed.args());
  const SsdBackwardArgs b = alone.args();
  std::vector<double> dA(size_t(c.H), 0.0), dD(size_t(c.H * c.P), 0.0), ddtBias(size_t(c.H), 0.0);
  std::mt19937_64 rng(0);
  for (int64_t i = 0; i < alone.f.nseq; ++i) {
    SsdBackwardArgs s = b;
    const int64_t t0 = alone.f.start[size_t(i)], T = alone.f.len[size_t(i)];
    for (TensorView* t : {&s.forward.x, &s.forward.dt, &s.forward.B, &s.forward.C, &s.forward.z, &s.dout, &s.dx, &s.ddt,
                          &s.dB, &s.dC, &s.dz})
      *t = slice(*t, 1, t0, T);
    s.forward.cu_seqlens = {};
    s.forward.initial_state_indices = slice(s.forward.initial_state_indices, 0, i, 1);
    s.forward.final_state_indices = slice(s.forward.final_state_indices, 0, i, 1);
    HostTensor a = makeTensor(DType::F32, {c.H}, Layout{}, rng), d = makeTensor(DType::F32, {c.H, c.P}, Layout{}, rng),
               e = makeTensor(DType::F32, {c.H}, Layout{}, rng);
    s.dA = a.view(), s.dD = d.view(), s.ddt_bias = e.view();
    reference::ssd_backward(s);
    for (int64_t k = 0; k < c.H; ++k)
      dA[size_t(k)] += loadElement(a.view(), k), ddtBias[size_t(k)] += loadElement(e.view(), k);
    for (int64_t k = 0; k < c.H * c.P; ++k) dD[size_t(k)] += loadElement(d.view(), k);
  }
  for (auto [name, x, y] : {std::tuple{"dx", &packed.dx, &alone.dx},
                            {"ddt", &packed.ddt, &alone.ddt},
                            {"dB", &packed.dB, &alone.dB},
                            {"dC", &packed.dC, &alone.dC},
                            {"dz", &packed.dz, &alone.dz},
                            {"dinitial_states", &packed.dinit, &alone.dinit}})
    EXPECT_EQ(x->bytes, y->bytes) << name;
  auto close = [](const char* name, const std::vector<double>& got, const HostTensor& want) {
    const std::vector<double> w = valuesOf(want);
    for (size_t k = 0; k < w.size(); ++k)
      EXPECT_NEAR(got[k], w[k], 1e-6 * (1 + std::abs(w[k]))) << name << "[" << k << "]";
  };
  close("dA", dA, packed.dA);
  close("dD", dD, packed.dD);
  close("ddt_bias", ddtBias, packed.ddtBias);
}

// Context parallelism's backward (ssd_parallel.h) on the reference: one sequence cut in three
// parts, the middle one whole (its decay a passes the state and its adjoint on). The forward's
// incoming states come from the scan S_in(r+1) = a(r) S_in(r) + S_final(r) of zero-start parts;
// pass 1 gives each later part's incoming-state gradient with no final-state gradient, dS(r); the
// reverse scan G(r) = a(r+1) G(r+1) + dS(r+1) gives each earlier part's final-state gradient, and
// pass 2 runs with it. Every part's gradients equal the unsplit run's rows (to the fp32 rounding
// of the passed states), and the parts' dA, dD and ddt_bias sum to its own.
TEST(SsdBackwardReference, ContextParallelStateAdjointsEqualTheUnsplitRun) {
  SsdCase c;
  c.L = 150, c.G = 2, c.seed = 51;
  c.aLo = -0.2, c.aHi = -0.02;  // weak decays: a reaches across the middle part
  SsdBackwardProblem full(c, false, false), split(c, false, false);
  reference::ssd_backward(full.args());
  const int64_t cut[4] = {0, 50, 100, 150}, H = c.H, HPN = c.H * c.P * c.N;
  std::mt19937_64 rng(0);
  auto f32 = [&](std::vector<int64_t> shape) { return makeTensor(DType::F32, shape, Layout{}, rng); };
  auto state = [&] { return f32({1, c.H, c.P, c.N}); };
  auto partOf = [&](SsdArgs a, int r) {
    for (TensorView* t : {&a.x, &a.dt, &a.B, &a.C, &a.z}) *t = slice(*t, 1, cut[r], cut[r + 1] - cut[r]);
    return a;
  };
  // The forward: zero-start summaries, then the scan.
  HostTensor fin[3] = {state(), state(), state()}, decay[3] = {f32({1, H}), f32({1, H}), f32({1, H})};
  HostTensor sIn[3] = {state(), state(), state()};
  for (int r = 0; r < 3; ++r) {
    SsdArgs a = partOf(split.args().forward, r);
    a.final_states = fin[r].view(), a.sequence_decay = decay[r].view();
    reference::ssd(a);
  }
  // next = a(r) prev + b: the forward's scan step and the backward's, per head.
  auto step = [&](HostTensor& next, const HostTensor& a, const HostTensor* prev, const HostTensor& b) {
    for (int64_t k = 0; k < HPN; ++k)
      storeElement(next.view(), k,
                   (prev ? loadElement(a.view(), k / (HPN / H)) * loadElement(prev->view(), k) : 0.0) +
                       loadElement(b.view(), k));
  };
  step(sIn[1], decay[0], nullptr, fin[0]);
  step(sIn[2], decay[1], &sIn[1], fin[1]);
  // The backward: part r's call, its sums over tokens into fresh tensors.
  HostTensor dA[3], dD[3], ddtBias[3];
  auto backward = [&](int r, const HostTensor* dfinal, HostTensor* dinit) {
    SsdBackwardArgs s = split.args();
    s.forward = partOf(s.forward, r);
    for (TensorView* t : {&s.dout, &s.dx, &s.ddt, &s.dB, &s.dC, &s.dz}) *t = slice(*t, 1, cut[r], cut[r + 1] - cut[r]);
    if (r > 0) s.forward.initial_states = sIn[r].view();
    dA[r] = f32({H}), dD[r] = f32({H}), ddtBias[r] = f32({H});
    s.dA = dA[r].view(), s.dD = dD[r].view(), s.ddt_bias = ddtBias[r].view();
    s.dfinal_states = dfinal ? dfinal->view() : TensorView{};
    s.dinitial_states = dinit ? dinit->view() : TensorView{};
    reference::ssd_backward(s);
  };
  HostTensor dS[3] = {state(), state(), state()}, G[2] = {state(), state()};
  backward(2, nullptr, &dS[2]);  // the last part: one pass
  backward(1, nullptr, &dS[1]);  // pass 1 of the middle part
  step(G[1], decay[2], nullptr, dS[2]);
  step(G[0], decay[1], &G[1], dS[1]);
  backward(1, &G[1], nullptr);  // pass 2
  backward(0, &G[0], nullptr);  // the first part: one pass
  double a1 = 0, worst = 0;
  for (int64_t h = 0; h < H; ++h) a1 = std::max(a1, loadElement(decay[1].view(), h));
  EXPECT_GT(a1, 0.05) << "the middle part's decay passes a real share on";
  auto expectClose = [&](const char* name, const std::vector<double>& got, const std::vector<double>& want) {
    double scale = 0;
    for (double w : want) scale = std::max(scale, std::abs(w));
    for (size_t k = 0; k < want.size(); ++k) {
      worst = std::max(worst, std::abs(got[k] - want[k]) / scale);
      EXPECT_NEAR(got[k], want[k], 1e-5 * scale) << name << "[" << k << "]";
    }
  };
  for (auto [name, x, y] : {std::tuple{"dx", &split.dx, &full.dx},
                            {"ddt", &split.ddt, &full.ddt},
                            {"dB", &split.dB, &full.dB},
                            {"dC", &split.dC, &full.dC},
                            {"dz", &split.dz, &full.dz}})
    expectClose(name, valuesOf(*x), valuesOf(*y));
  for (auto [name, parts, want] :
       {std::tuple{"dA", dA, &full.dA}, {"dD", dD, &full.dD}, {"ddt_bias", ddtBias, &full.ddtBias}}) {
    std::vector<double> sum(size_t(H), 0.0);
    for (int r = 0; r < 3; ++r)
      for (int64_t h = 0; h < H; ++h) sum[size_t(h)] += loadElement(parts[r].view(), h);
    expectClose(name, sum, valuesOf(*want));
  }
  std::printf("  CP backward over 3 parts (middle decay up to %.2f): worst %.2g of each gradient's largest\n", a1,
              worst);
}

// ---- the argument check -----------------------------------------------------------------------

using BP = SsdBackwardProblem;
using BA = SsdBackwardArgs;
struct Bad {
  std::function<void(BP&, BA&)> mutate;
  std::vector<std::string> parts;
  bool values = false;  // wrong in the slot values (the reference reads them; the check does not)
};

TEST(SsdBackwardCheck, BadCallsAreNamedAndWriteNothing) {
  SsdCase c;
  c.batch = 2, c.L = 6, c.dPerChannel = true, c.initial = c.final = c.slotIndices = true, c.inPlace = false;
  c.xType = DType::BF16, c.indexType = DType::I64;
  const BP base(c, true, true);
  const std::vector<Bad> bad = {
      {[](BP&, BA& b) { b.dout = {}; }, {"dout is required"}},
      {[](BP&, BA& b) { b.dout.shape[3] = 2; }, {"dout has shape (2, 6, 4, 2)", "dim 3 (headdim) is 2, expected 3"}},
      {[](BP&, BA& b) { b.dout.strides[3] = 2; }, {"dout has stride 2 along its last axis"}},
      {[](BP&, BA& b) { b.forward.x.shape[2] = 3; }, {"dt has shape (2, 6, 4)", "dim 2 (nheads) is 4, expected 3"}},
      {[](BP&, BA& b) { b.dx = {}; }, {"dx is required"}},
      {[](BP&, BA& b) { b.dx.shape[1] = 5; }, {"dx has shape (2, 5, 4, 3)", "dim 1 (seqlen) is 5, expected 6"}},
      {[](BP&, BA& b) { b.dx.strides[3] = 2; }, {"dx has stride 2 along its last axis"}},
      {[](BP&, BA& b) { b.ddt.shape[2] = 2; }, {"ddt has shape (2, 6, 2)", "expected (2, 6, 4)"}},
      {[](BP&, BA& b) { b.dA.dtype = DType::BF16; }, {"dA has dtype bfloat16", "expected float32"}},
      {[](BP&, BA& b) { b.dA.strides[0] = 0; }, {"dA has strides (0)", "has stride 0"}},
      {[](BP&, BA& b) { b.dB.shape[2] = 1; }, {"dB has shape (2, 6, 1, 5)", "dim 2 (ngroups) is 1, expected 2"}},
      {[](BP&, BA& b) { b.dC.strides[3] = 3; }, {"dC has stride 3 along its last axis"}},
      {[](BP&, BA& b) { b.dD = {}; }, {"dD is not given, expected a tensor: forward.D is given"}},
      {[](BP&, BA& b) { b.forward.D = {}; }, {"dD is given (shape (4, 3)), expected none: forward.D is not given"}},
      {[](BP&, BA& b) { b.dD.ndim = 1; }, {"dD has rank 1", "expected rank 2 (nheads, headdim)"}},
      {[](BP&, BA& b) { b.dz = {}; }, {"dz is not given, expected a tensor: forward.z is given"}},
      {[](BP&, BA& b) { b.forward.z = {}; }, {"dz is given", "forward.z is not given"}},
      {[](BP&, BA& b) { b.ddt_bias = {}; }, {"ddt_bias is not given", "forward.dt_bias is given"}},
      {[](BP&, BA& b) { b.forward.dt_bias = {}; }, {"ddt_bias is given (shape (4))", "forward.dt_bias is not given"}},
      {[](BP&, BA& b) { b.forward.initial_states = {}, b.forward.initial_state_indices = {}; },
       {"dinitial_states is given", "forward.initial_states is not given"}},
      {[](BP&, BA& b) { b.dinitial_states.shape[0] = 3; },
       {"dinitial_states has shape (3, 4, 3, 5)", "dim 0 (slots) is 3, expected 4"}},
      {[](BP&, BA& b) { b.dinitial_states.dtype = DType::I32; }, {"dinitial_states has dtype int32"}},
      {[](BP&, BA& b) { b.dfinal_states.shape[3] = 4; },
       {"dfinal_states has shape (4, 4, 3, 4)", "dim 3 (dstate) is 4"}},
      {[](BP&, BA& b) { b.forward.final_state_indices.dtype = DType::F32; }, {"final_state_indices has dtype float32"}},
      // Outputs alias nothing.
      {[](BP&, BA& b) { b.dx.data = b.dout.data; },
       {"dx has data pointer 0x", "the same as dout's", "expected a separate tensor"}},
      {[](BP&, BA& b) { b.dB.data = b.forward.B.data; }, {"dB has data pointer", "the same as B's"}},
      {[](BP&, BA& b) { b.dC.data = b.dB.data; }, {"dC has data pointer", "the same as dB's"}},
      {[](BP&, BA& b) { b.dinitial_states.data = b.forward.initial_states.data; },
       {"dinitial_states has data pointer", "the same as initial_states's"}},
      // The forward's y: fp32 of x's shape, aliasing neither dout nor a gradient.
      {[](BP& p, BA& b) { b.forward.y = p.dz.view(), b.forward.y.dtype = DType::BF16; },
       {"forward.y has dtype bfloat16", "expected float32"}},
      {[](BP& p, BA& b) { b.forward.y = p.dz.view(), b.forward.y.shape[1] = 5; },
       {"forward.y has shape (2, 5, 4, 3)", "dim 1 (seqlen) is 5, expected 6"}},
      {[](BP&, BA& b) { b.forward.y = b.dout; }, {"forward.y has data pointer 0x", "the same as dout's"}},
      {[](BP&, BA& b) { b.forward.y = b.dx; }, {"dx has data pointer 0x", "the same as forward.y's"}},
      // Slot values.
      {[](BP& p, BA&) { storeElement(p.f.initIdx.view(), 1, double(p.f.initSlot[0])); },
       {"initial_state_indices[1] = ", "the slot of initial_state_indices[0] too",
        "distinct slots with dinitial_states"},
       true},
      {[](BP& p, BA&) { storeElement(p.f.finIdx.view(), 0, 9.0); }, {"final_state_indices[0] = 9", "[0, 4)"}, true},
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i) + ": " + bad[i].parts[0]);
    BP p = base;
    BA b = p.args();
    bad[i].mutate(p, b);
    const auto before = [&] {
      std::vector<std::vector<uint8_t>> v;
      for (HostTensor* t : p.all()) v.push_back(t->bytes);
      return v;
    };
    const auto b0 = before();
    const std::string m = invalidArgMessage([&] { reference::ssd_backward(b); });
    EXPECT_EQ(m.rfind("reference::ssd_backward: ", 0), 0u) << m;
    for (const std::string& part : bad[i].parts)
      EXPECT_NE(m.find(part), std::string::npos) << "missing '" << part << "' in: " << m;
    EXPECT_EQ(before(), b0) << "a tensor was written";
    std::string dm;
    try {
      detail::checkSsdBackwardArgs(b, DeviceKind::CPU, "ssd_backward");
    } catch (const Error& e) {
      dm = e.what();
    }
    if (bad[i].values)
      EXPECT_EQ(dm, "");
    else
      EXPECT_EQ(dm, "ssd_backward: " + m.substr(std::string("reference::ssd_backward: ").size()));
  }
  BP p = base;
  EXPECT_NO_THROW(reference::ssd_backward(p.args()));
}

}  // namespace

// The float64 backward of the Mamba-2 layer reference (reference::mamba2_layer_backward) against
// central differences of the forward reference (reference::mamba2_layer) itself, on tiny random
// layers over packed rows of several sequences. Loss: sum(dout * out) + sum(dfinal . final
// states). For every gradient: a few elements, and one random direction through the whole tensor.
// Weights are fp32 on a grid of 2^-20 below 8 in magnitude, and every step is a multiple of
// 2^-20, so that a perturbed weight is stored exactly and a difference sees the step it was given.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "runtime/model/Mamba2Config.h"
#include "runtime/model/Mamba2Weights.h"
#include "runtime/reference/Mamba2ModelRef.h"
#include "tests/support/ExpectError.h"

using namespace ssmjit;
using model::Mamba2Config;
using reference::Mamba2LayerGradientsRef;
using reference::Mamba2SequenceState;

namespace {

constexpr double kStep = 0x1p-17;  // about 7.6e-6: the differences' step, exact on the weights' grid

Mamba2Config tinyConfig(int64_t groups) {
  Mamba2Config c;
  c.hidden_size = 16, c.num_layers = 1, c.num_heads = 4, c.head_dim = 8, c.state_size = 8, c.n_groups = groups;
  c.conv_kernel = 4, c.chunk_size = 64, c.norm_eps = 1e-5;
  c.dt_min = 0.0, c.dt_max = std::numeric_limits<double>::infinity();
  return c;
}

// A random layer: fp32 weights on the grid, owned, and the views the references read.
struct Layer {
  Mamba2Config cfg;
  std::vector<float> inProj, inProjBias, conv, convBias, dtBias, aLog, D, norm, outProj, outProjBias;
  model::Mamba2LayerWeights w;

  Layer(const Mamba2Config& c, uint64_t seed) : cfg(c) {
    std::mt19937_64 rng(seed);
    auto fill = [&](std::vector<float>& v, int64_t n, double lo, double hi) {
      std::uniform_real_distribution<double> u(lo, hi);
      for (int64_t i = 0; i < n; ++i) v.push_back(float(std::ldexp(std::round(std::ldexp(u(rng), 20)), -20)));
    };
    const int64_t Rp = c.in_proj_rows(), Hd = c.hidden_size, E = c.d_inner(), Dc = c.conv_dim(), H = c.num_heads;
    const double in = 1 / std::sqrt(double(Hd)), out = 1 / std::sqrt(double(E));
    fill(inProj, Rp * Hd, -in, in);
    if (c.use_bias) fill(inProjBias, Rp, -0.1, 0.1), fill(outProjBias, Hd, -0.1, 0.1);
    fill(conv, Dc * c.conv_kernel, -0.5, 0.5);
    if (c.use_conv_bias) fill(convBias, Dc, -0.1, 0.1);
    fill(dtBias, H, -2.0, -1.0);
    fill(aLog, H, -0.7, 0.7);
    fill(D, c.d_has_hdim ? E : H, 0.5, 1.5);
    fill(norm, E, 0.5, 1.5);
    fill(outProj, Hd * E, -out, out);
    auto view = [](std::vector<float>& v, std::initializer_list<int64_t> shape) {
      return v.empty() ? TensorView{} : TensorView::contiguous(v.data(), DType::F32, shape, DeviceKind::CPU);
    };
    w.in_proj_weight = view(inProj, {Rp, Hd});
    w.in_proj_bias = view(inProjBias, {Rp});
    w.conv1d_weight = view(conv, {Dc, 1, c.conv_kernel});
    w.conv1d_bias = view(convBias, {Dc});
    w.dt_bias = view(dtBias, {H});
    w.A_log = view(aLog, {H});
    w.D = view(D, {int64_t(D.size())});
    w.gated_norm = view(norm, {E});
    w.out_proj_weight = view(outProj, {Hd, E});
    w.out_proj_bias = view(outProjBias, {Hd});
  }
  Layer(const Layer&) = delete;  // the views point into this object's vectors
};

// One call's inputs: a packed row of sequences, their initial states, dout and dfinal_states.
struct Problem {
  std::vector<int64_t> cu = {0};
  std::vector<double> hidden, dout;
  std::vector<Mamba2SequenceState> init, dfinal;
};

std::vector<double> uniform(std::mt19937_64& rng, size_t n, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = u(rng);
  return v;
}

// Initial states random (else zeros, given in full: the differences perturb them) and dfinal
// random (else empty: no final-state term).
Problem randomProblem(const Mamba2Config& c, const std::vector<int64_t>& lens, bool initStates, bool finalGrads,
                      uint64_t seed) {
  std::mt19937_64 rng(seed);
  Problem p;
  for (int64_t n : lens) p.cu.push_back(p.cu.back() + n);
  const size_t tokens = size_t(p.cu.back() * c.hidden_size), nconv = size_t(c.conv_dim() * (c.conv_kernel - 1)),
               nssm = size_t(c.d_inner() * c.state_size);
  p.hidden = uniform(rng, tokens, -1, 1);
  p.dout = uniform(rng, tokens, -1, 1);
  for (size_t i = 0; i < lens.size(); ++i) {
    p.init.push_back(initStates ? Mamba2SequenceState{uniform(rng, nconv, -1, 1), uniform(rng, nssm, -0.5, 0.5)}
                                : Mamba2SequenceState{std::vector<double>(nconv), std::vector<double>(nssm)});
    if (finalGrads) p.dfinal.push_back({uniform(rng, nconv, -1, 1), uniform(rng, nssm, -1, 1)});
  }
  return p;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) s += a[i] * b[i];
  return s;
}

double loss(const Layer& L, const Problem& p) {
  std::vector<Mamba2SequenceState> states = p.init;
  const std::vector<double> out = reference::mamba2_layer(L.cfg, L.w, p.hidden, p.cu, states);
  double s = dot(p.dout, out);
  for (size_t i = 0; i < p.dfinal.size(); ++i)
    s += dot(p.dfinal[i].conv, states[i].conv) + dot(p.dfinal[i].ssm, states[i].ssm);
  return s;
}

// One tensor the loss depends on, perturbed in place: doubles, or a weight's fp32 storage.
struct Input {
  std::string name;
  double* d = nullptr;
  float* f = nullptr;
  size_t n = 0;
  const std::vector<double>* grad = nullptr;

  double get(size_t i) const { return d ? d[i] : double(f[i]); }
  void set(size_t i, double v) const {
    if (d) {
      d[i] = v;
    } else {
      f[i] = float(v);
      EXPECT_EQ(double(f[i]), v) << name << "[" << i << "]: a step off the fp32 grid";
    }
  }
};

// Eight elements (all of a smaller tensor) and one direction (entries k/8, k in [-8, 8]) against
// central differences.
void checkInput(const Input& in, const std::function<double()>& lossNow, std::mt19937_64& rng) {
  ASSERT_EQ(in.grad->size(), in.n) << in.name;
  double gmax = 0;
  for (double g : *in.grad) gmax = std::max(gmax, std::abs(g));
  std::vector<size_t> elements(in.n);
  std::iota(elements.begin(), elements.end(), size_t(0));
  std::shuffle(elements.begin(), elements.end(), rng);
  elements.resize(std::min<size_t>(in.n, 8));
  for (size_t i : elements) {
    const double x0 = in.get(i);
    in.set(i, x0 + kStep);
    const double lp = lossNow();
    in.set(i, x0 - kStep);
    const double lm = lossNow();
    in.set(i, x0);
    const double fd = (lp - lm) / (2 * kStep), g = (*in.grad)[i];
    EXPECT_NEAR(g, fd, 1e-6 * std::max(std::abs(g), 1e-3 * gmax) + 1e-12) << in.name << "[" << i << "]";
  }
  std::vector<double> x0(in.n), dir(in.n);
  double want = 0, scale = 0;
  for (size_t i = 0; i < in.n; ++i) {
    x0[i] = in.get(i);
    dir[i] = double(int(rng() % 17) - 8) / 8;
    want += (*in.grad)[i] * dir[i];
    scale += std::abs((*in.grad)[i] * dir[i]);
  }
  auto along = [&](double t) {
    for (size_t i = 0; i < in.n; ++i) in.set(i, x0[i] + t * dir[i]);
    return lossNow();
  };
  const double fd = (along(kStep) - along(-kStep)) / (2 * kStep);
  for (size_t i = 0; i < in.n; ++i) in.set(i, x0[i]);
  EXPECT_NEAR(want, fd, 1e-6 * scale + 1e-12) << in.name << " along a random direction";
}

// Every gradient of the call against differences of the forward.
void checkAgainstDifferences(const Mamba2Config& cfg, const std::vector<int64_t>& lens, bool initStates,
                             bool finalGrads, uint64_t seed) {
  Layer L(cfg, seed);
  Problem p = randomProblem(cfg, lens, initStates, finalGrads, seed + 1);
  const Mamba2LayerGradientsRef g =
      reference::mamba2_layer_backward(cfg, L.w, p.hidden, p.cu, p.init, p.dout, p.dfinal);
  std::vector<Input> inputs;
  auto weight = [&](const char* name, std::vector<float>& v, const std::vector<double>& grad) {
    if (v.empty())
      EXPECT_TRUE(grad.empty()) << name << ": a gradient for an absent weight";
    else
      inputs.push_back({name, nullptr, v.data(), v.size(), &grad});
  };
  auto doubles = [&](const std::string& name, std::vector<double>& v, const std::vector<double>& grad) {
    inputs.push_back({name, v.data(), nullptr, v.size(), &grad});
  };
  doubles("hidden", p.hidden, g.hidden);
  weight("in_proj_weight", L.inProj, g.in_proj_weight);
  weight("in_proj_bias", L.inProjBias, g.in_proj_bias);
  weight("conv1d_weight", L.conv, g.conv1d_weight);
  weight("conv1d_bias", L.convBias, g.conv1d_bias);
  weight("dt_bias", L.dtBias, g.dt_bias);
  weight("A_log", L.aLog, g.A_log);
  weight("D", L.D, g.D);
  weight("gated_norm", L.norm, g.gated_norm);
  weight("out_proj_weight", L.outProj, g.out_proj_weight);
  weight("out_proj_bias", L.outProjBias, g.out_proj_bias);
  ASSERT_EQ(g.initial_states.size(), lens.size());
  for (size_t i = 0; i < lens.size(); ++i) {
    doubles("initial_states[" + std::to_string(i) + "].conv", p.init[i].conv, g.initial_states[i].conv);
    doubles("initial_states[" + std::to_string(i) + "].ssm", p.init[i].ssm, g.initial_states[i].ssm);
  }
  std::mt19937_64 rng(seed + 2);
  for (const Input& in : inputs)
    checkInput(
        in, [&] { return loss(L, p); }, rng);
}

// Tokens whose softplus(dt + dt_bias) lies below, inside and above [dt_min, dt_max], over all heads.
std::vector<int> dtClampSides(const Layer& L, const std::vector<double>& hidden) {
  const Mamba2Config& c = L.cfg;
  const int64_t Hd = c.hidden_size, H = c.num_heads, row0 = c.in_proj_rows() - H;
  std::vector<int> sides(3);
  for (size_t t = 0; t < hidden.size() / size_t(Hd); ++t)
    for (int64_t h = 0; h < H; ++h) {
      double v = L.dtBias[size_t(h)] + (L.inProjBias.empty() ? 0.0 : L.inProjBias[size_t(row0 + h)]);
      for (int64_t k = 0; k < Hd; ++k) v += L.inProj[size_t((row0 + h) * Hd + k)] * hidden[t * size_t(Hd) + size_t(k)];
      const double sp = std::log1p(std::exp(v));
      ++sides[sp < c.dt_min ? 0 : sp > c.dt_max ? 2 : 1];
    }
  return sides;
}

TEST(Mamba2LayerBackwardReference, MatchesDifferencesWithTwoGroupsEveryBiasAndTheGateAfterTheNorm) {
  Mamba2Config c = tinyConfig(2);
  c.use_bias = true;
  checkAgainstDifferences(c, {9, 2, 5}, false, false, 101);
}

TEST(Mamba2LayerBackwardReference, MatchesDifferencesWithOneGroupNoBiasesDPerChannelAndTheNormBeforeTheGate) {
  Mamba2Config c = tinyConfig(1);
  c.use_conv_bias = false;
  c.d_has_hdim = true;
  c.norm_before_gate = true;
  checkAgainstDifferences(c, {3, 8}, false, false, 202);
}

// Nonzero initial states and final-state gradients, a sequence shorter than W-1 (its final conv
// state still holds initial columns) and an empty one (its final states are its initial ones).
TEST(Mamba2LayerBackwardReference, MatchesDifferencesFromInitialStatesToFinalStateGradients) {
  Mamba2Config c = tinyConfig(2);
  c.use_bias = true;
  c.d_has_hdim = true;
  c.norm_before_gate = true;
  checkAgainstDifferences(c, {2, 7, 0}, true, true, 303);
}

TEST(Mamba2LayerBackwardReference, MatchesDifferencesWhereTheDtClampBindsOnBothSides) {
  Mamba2Config c = tinyConfig(1);
  c.dt_min = 0.17, c.dt_max = 0.26;
  const std::vector<int64_t> lens = {6, 1, 4};
  {
    const Layer L(c, 404);
    const std::vector<int> sides = dtClampSides(L, randomProblem(c, lens, true, true, 405).hidden);
    ASSERT_GT(sides[0], 0) << "no dt' clamped to dt_min";
    ASSERT_GT(sides[1], 0) << "every dt' clamped";
    ASSERT_GT(sides[2], 0) << "no dt' clamped to dt_max";
  }
  checkAgainstDifferences(c, lens, true, true, 404);
}

// Empty state members and an empty dfinal_states read as zeros, with full gradients returned.
TEST(Mamba2LayerBackwardReference, EmptyStatesAndFinalGradientsReadAsZeros) {
  const Mamba2Config c = tinyConfig(2);
  const Layer L(c, 505);
  const Problem full = randomProblem(c, {4, 2}, false, false, 506);
  std::vector<Mamba2SequenceState> zeroFinal(2, {std::vector<double>(full.init[0].conv.size()), {}});
  const Mamba2LayerGradientsRef a =
      reference::mamba2_layer_backward(c, L.w, full.hidden, full.cu, full.init, full.dout, zeroFinal);
  const Mamba2LayerGradientsRef b = reference::mamba2_layer_backward(
      c, L.w, full.hidden, full.cu, std::vector<Mamba2SequenceState>(2), full.dout, {});
  EXPECT_EQ(a.hidden, b.hidden);
  EXPECT_EQ(a.in_proj_weight, b.in_proj_weight);
  EXPECT_TRUE(b.in_proj_bias.empty());
  ASSERT_EQ(b.initial_states.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(a.initial_states[i].conv, b.initial_states[i].conv);
    EXPECT_EQ(a.initial_states[i].ssm, b.initial_states[i].ssm);
    EXPECT_EQ(b.initial_states[i].ssm.size(), full.init[i].ssm.size());
  }
}

TEST(Mamba2LayerBackwardReference, RefusesBadDoutAndStateSizes) {
  const Mamba2Config c = tinyConfig(2);
  const Layer L(c, 606);
  const Problem p = randomProblem(c, {3, 1}, false, true, 607);
  auto msg = [&](const std::vector<double>& dout, const std::vector<Mamba2SequenceState>& init,
                 const std::vector<Mamba2SequenceState>& dfinal) {
    return ssmjit::testing::invalidArgMessage(
        [&] { reference::mamba2_layer_backward(c, L.w, p.hidden, p.cu, init, dout, dfinal); });
  };
  const std::vector<double> shortDout(p.dout.begin(), p.dout.end() - 1);
  EXPECT_MENTIONS(msg(shortDout, p.init, p.dfinal), "dout has 63 values, expected 64");
  EXPECT_MENTIONS(msg(p.dout, {p.init[0]}, p.dfinal), "initial_states has 1 entries", "one per sequence (2)");
  EXPECT_MENTIONS(msg(p.dout, p.init, {p.dfinal[0]}), "dfinal_states has 1 entries", "none or one per sequence (2)");
  std::vector<Mamba2SequenceState> badFinal = p.dfinal;
  badFinal[1].ssm.pop_back();
  EXPECT_MENTIONS(msg(p.dout, p.init, badFinal), "dfinal_states[1].ssm has 255 values, expected 256");
  std::vector<Mamba2SequenceState> badInit = p.init;
  badInit[0].conv.push_back(0);
  EXPECT_MENTIONS(msg(p.dout, badInit, p.dfinal), "initial_states[0].conv has 193 values, expected 192");
}

}  // namespace

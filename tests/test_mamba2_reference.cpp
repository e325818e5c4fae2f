// The float64 reference of the Mamba-2 layer and model (runtime/reference/Mamba2ModelRef.h) on
// tiny random checkpoints: prefill then decode equals one longer prefill, a packed row equals each
// sequence alone, and the layer equals an independent evaluation through the op references
// (reference::causal_conv1d and reference::ssd on fp32 tensors).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "runtime/model/Mamba2Weights.h"
#include "runtime/reference/ElementAccess.h"
#include "runtime/reference/Mamba2ModelRef.h"
#include "ssmjit/reference.h"
#include "tests/support/ScratchDir.h"
#include "tests/support/TinyMamba2.h"

using namespace ssmjit;
using namespace ssmjit::model;
using namespace ssmjit::testing;
using reference::Mamba2SequenceState;

namespace {

// A tiny model written to disk and loaded back through the checkpoint path.
struct TinyModel {
  ScratchDir dir;
  Mamba2Checkpoint ck;
  TinyModel(const TinyMamba2& m, uint64_t seed) : ck(write(dir, m, seed)) {}
  static std::string write(const ScratchDir& d, const TinyMamba2& m, uint64_t seed) {
    writeTinyMamba2(d.path(), m, tinyMamba2Tensors(m, seed));
    return d.path();
  }
};

std::vector<double> randomHidden(int64_t tokens, int64_t hidden, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(size_t(tokens * hidden));
  for (double& x : v) x = u(rng);
  return v;
}

double maxAbsDiff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

double maxAbs(const std::vector<double>& a) {
  double m = 0;
  for (double v : a) m = std::max(m, std::abs(v));
  return m;
}

// Rows [t0, t0 + n) of a (T, width) row-major buffer.
std::vector<double> rows(const std::vector<double>& v, int64_t width, int64_t t0, int64_t n) {
  return {v.begin() + t0 * width, v.begin() + (t0 + n) * width};
}

// The model variants the tests cover: both namings, groups, gate order, biases, D per channel,
// a dt clamp that binds.
std::vector<TinyMamba2> variants() {
  std::vector<TinyMamba2> v(4);
  v[1].naming = CheckpointNaming::MambaSsm;
  v[1].norm_before_gate = true;
  v[1].d_has_hdim = true;
  v[1].tie = true;
  v[2].groups = 1;
  v[2].use_bias = true;
  v[2].conv_bias = false;
  v[2].conv = 2;
  v[3].groups = 4;
  v[3].dt_min = 0.05;
  v[3].dt_max = 0.4;
  return v;
}

// Sequences of lengths T[i] in one packed row, then k decode steps of all of them: each output
// row and the final states equal one prefill of T[i] + k tokens.
TEST(Mamba2LayerReference, PrefillThenDecodeEqualsTheLongerPrefill) {
  const std::vector<int64_t> T = {5, 1, 3};
  const int64_t k = 3, nseq = int64_t(T.size());
  for (const TinyMamba2& m : variants()) {
    TinyModel tm(m, 11);
    const Mamba2Config& c = tm.ck.config;
    const Mamba2LayerWeights& w = tm.ck.weights.layers[1];
    const int64_t D = c.hidden_size;
    // Each sequence's T[i] + k tokens.
    std::vector<std::vector<double>> seq;
    for (int64_t i = 0; i < nseq; ++i) seq.push_back(randomHidden(T[size_t(i)] + k, D, 100 + uint64_t(i)));

    // The longer prefill, one packed row.
    std::vector<double> longRow;
    std::vector<int64_t> longCu = {0};
    for (int64_t i = 0; i < nseq; ++i) {
      longRow.insert(longRow.end(), seq[size_t(i)].begin(), seq[size_t(i)].end());
      longCu.push_back(longCu.back() + T[size_t(i)] + k);
    }
    std::vector<Mamba2SequenceState> longStates(T.size());
    const std::vector<double> longOut = reference::mamba2_layer(c, w, longRow, longCu, longStates);

    // Prefill of T, then k decode steps.
    std::vector<double> row;
    std::vector<int64_t> cu = {0};
    for (int64_t i = 0; i < nseq; ++i) {
      const std::vector<double> part = rows(seq[size_t(i)], D, 0, T[size_t(i)]);
      row.insert(row.end(), part.begin(), part.end());
      cu.push_back(cu.back() + T[size_t(i)]);
    }
    std::vector<Mamba2SequenceState> states(T.size());
    const std::vector<double> pre = reference::mamba2_layer(c, w, row, cu, states);
    std::vector<std::vector<double>> steps;
    std::vector<int64_t> decodeCu(T.size() + 1);
    for (size_t i = 0; i < decodeCu.size(); ++i) decodeCu[i] = int64_t(i);
    for (int64_t s = 0; s < k; ++s) {
      std::vector<double> tok;
      for (int64_t i = 0; i < nseq; ++i) {
        const std::vector<double> r = rows(seq[size_t(i)], D, T[size_t(i)] + s, 1);
        tok.insert(tok.end(), r.begin(), r.end());
      }
      steps.push_back(reference::mamba2_layer(c, w, tok, decodeCu, states));
    }

    const double scale = maxAbs(longOut);
    ASSERT_GT(scale, 1e-3);
    for (int64_t i = 0; i < nseq; ++i) {
      const std::vector<double> want = rows(longOut, D, longCu[size_t(i)], T[size_t(i)] + k);
      std::vector<double> got = rows(pre, D, cu[size_t(i)], T[size_t(i)]);
      for (int64_t s = 0; s < k; ++s) {
        const std::vector<double> r = rows(steps[size_t(s)], D, i, 1);
        got.insert(got.end(), r.begin(), r.end());
      }
      EXPECT_LE(maxAbsDiff(got, want), 1e-12 * scale) << "sequence " << i;
      EXPECT_LE(maxAbsDiff(states[size_t(i)].conv, longStates[size_t(i)].conv), 1e-12);
      EXPECT_LE(maxAbsDiff(states[size_t(i)].ssm, longStates[size_t(i)].ssm), 1e-12 * maxAbs(longStates[size_t(i)].ssm));
    }
  }
}

TEST(Mamba2LayerReference, PackedRowEqualsEachSequenceAlone) {
  const std::vector<int64_t> lens = {4, 0, 7, 1};
  TinyModel tm(variants()[0], 12);
  const Mamba2Config& c = tm.ck.config;
  const Mamba2LayerWeights& w = tm.ck.weights.layers[0];
  const int64_t D = c.hidden_size;
  std::vector<int64_t> cu = {0};
  for (int64_t n : lens) cu.push_back(cu.back() + n);
  const std::vector<double> row = randomHidden(cu.back(), D, 5);
  std::vector<Mamba2SequenceState> states(lens.size());
  const std::vector<double> packed = reference::mamba2_layer(c, w, row, cu, states);
  for (size_t i = 0; i < lens.size(); ++i) {
    std::vector<Mamba2SequenceState> one(1);
    const std::vector<double> alone =
        reference::mamba2_layer(c, w, rows(row, D, cu[i], lens[i]), {0, lens[i]}, one);
    EXPECT_EQ(rows(packed, D, cu[i], lens[i]), alone) << "sequence " << i;
    EXPECT_EQ(states[i].ssm, one[0].ssm);
    EXPECT_EQ(states[i].conv, one[0].conv);
  }
}

TEST(Mamba2ModelReference, PrefillThenDecodeEqualsTheLongerPrefill) {
  for (const TinyMamba2& m : variants()) {
    TinyModel tm(m, 21);
    const Mamba2Config& c = tm.ck.config;
    const int64_t V = c.vocab_rows;
    const std::vector<std::vector<int64_t>> seqs = {{1, 4, 2, 9, 3, 3, 0}, {7, 5, 10, 2, 6}};
    const size_t prompt[] = {4, 2};
    std::vector<int64_t> longTok, longCu = {0}, tok, cu = {0};
    for (size_t i = 0; i < seqs.size(); ++i) {
      longTok.insert(longTok.end(), seqs[i].begin(), seqs[i].end());
      longCu.push_back(int64_t(longTok.size()));
      tok.insert(tok.end(), seqs[i].begin(), seqs[i].begin() + int64_t(prompt[i]));
      cu.push_back(int64_t(tok.size()));
    }
    std::vector<std::vector<Mamba2SequenceState>> longStates, states;
    const std::vector<double> longLogits = reference::mamba2_model(c, tm.ck.weights, longTok, longCu, longStates);
    const std::vector<double> pre = reference::mamba2_model(c, tm.ck.weights, tok, cu, states);
    ASSERT_EQ(longStates.size(), size_t(c.num_layers));
    const double scale = maxAbs(longLogits);
    ASSERT_GT(scale, 1e-3);
    // Prompt logits.
    for (size_t i = 0; i < seqs.size(); ++i)
      EXPECT_LE(maxAbsDiff(rows(pre, V, cu[i], int64_t(prompt[i])), rows(longLogits, V, longCu[i], int64_t(prompt[i]))),
                1e-12 * scale);
    // Decode the rest, both sequences a step while both have tokens left (then the longer alone).
    for (size_t step = 0;; ++step) {
      std::vector<int64_t> ids, which;
      for (size_t i = 0; i < seqs.size(); ++i)
        if (prompt[i] + step < seqs[i].size()) ids.push_back(seqs[i][prompt[i] + step]), which.push_back(int64_t(i));
      if (ids.empty()) break;
      // A sequence that has finished keeps its state out of the call.
      std::vector<std::vector<Mamba2SequenceState>> sub(states.size());
      for (size_t l = 0; l < states.size(); ++l)
        for (int64_t i : which) sub[l].push_back(states[l][size_t(i)]);
      std::vector<int64_t> dcu(ids.size() + 1);
      for (size_t j = 0; j < dcu.size(); ++j) dcu[j] = int64_t(j);
      const std::vector<double> logits = reference::mamba2_model(c, tm.ck.weights, ids, dcu, sub);
      for (size_t l = 0; l < states.size(); ++l)
        for (size_t j = 0; j < which.size(); ++j) states[l][size_t(which[j])] = sub[l][j];
      for (size_t j = 0; j < which.size(); ++j) {
        const size_t i = size_t(which[j]);
        EXPECT_LE(maxAbsDiff(rows(logits, V, int64_t(j), 1), rows(longLogits, V, longCu[i] + int64_t(prompt[i] + step), 1)),
                  1e-12 * scale)
            << "sequence " << i << " step " << step;
      }
    }
  }
}

// The model written out from mamba_ssm's MixerModel / MambaLMHeadModel (and transformers'
// Mamba2Model, which adds the residual after the mixer instead: the same sums), on the layer
// reference: x = embedding; per layer x = x + mixer(rmsnorm(x) * norm); logits = lm_head
// rmsnorm(x) * norm_f, lm_head the embedding when tied.
TEST(Mamba2ModelReference, WiringMatchesTheModelsDefinition) {
  using reference::el;
  for (const TinyMamba2& m : variants()) {
    TinyModel tm(m, 41);
    const Mamba2Config& c = tm.ck.config;
    const Mamba2Weights& w = tm.ck.weights;
    const int64_t D = c.hidden_size, V = c.vocab_rows;
    const std::vector<int64_t> tokens = {3, 1, 4, 1, 5, 9, 2, 6}, cu = {0, 5, 8};
    const int64_t T = int64_t(tokens.size());
    auto rmsnorm = [&](const std::vector<double>& x, const TensorView& weight) {
      std::vector<double> out(x.size());
      for (int64_t t = 0; t < T; ++t) {
        double ss = 0;
        for (int64_t d = 0; d < D; ++d) ss += x[size_t(t * D + d)] * x[size_t(t * D + d)];
        for (int64_t d = 0; d < D; ++d)
          out[size_t(t * D + d)] = x[size_t(t * D + d)] / std::sqrt(ss / double(D) + c.norm_eps) * el(weight, {d});
      }
      return out;
    };
    std::vector<double> x(size_t(T * D));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d) x[size_t(t * D + d)] = el(w.embedding, {tokens[size_t(t)], d});
    for (const Mamba2LayerWeights& lw : w.layers) {
      std::vector<Mamba2SequenceState> st(2);
      const std::vector<double> mixed = reference::mamba2_layer(c, lw, rmsnorm(x, lw.norm), cu, st);
      for (size_t i = 0; i < x.size(); ++i) x[i] += mixed[i];
    }
    const std::vector<double> f = rmsnorm(x, w.norm_f);
    const TensorView& head = m.tie ? w.embedding : w.lm_head;
    std::vector<double> want(size_t(T * V));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t v = 0; v < V; ++v) {
        double acc = 0;
        for (int64_t d = 0; d < D; ++d) acc += el(head, {v, d}) * f[size_t(t * D + d)];
        want[size_t(t * V + v)] = acc;
      }
    std::vector<std::vector<Mamba2SequenceState>> states;
    const std::vector<double> got = reference::mamba2_model(c, w, tokens, cu, states);
    EXPECT_LE(maxAbsDiff(got, want), 1e-12 * maxAbs(want)) << "naming " << int(m.naming);
  }
}

// fp32 buffers as CPU views.
TensorView cpuView(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(v.data(), DType::F32, shape, DeviceKind::CPU);
}
TensorView strided(float* p, std::initializer_list<int64_t> shape, std::initializer_list<int64_t> strides) {
  TensorView t = TensorView::contiguous(p, DType::F32, shape, DeviceKind::CPU);
  std::copy(strides.begin(), strides.end(), t.strides);
  return t;
}

// The layer once more, through the op references and plain loops written from the formulas of
// transformers' and mamba_ssm's modules: in_proj, then [z | xBC | dt], causal_conv1d (silu) of
// xBC over the packed row, ssd of x, B, C, dt with softplus, dt_bias, A, D and the clamp, the
// gated RMSNorm per group, out_proj. Intermediates are fp32 here, so the two agree to ~1e-7 relative.
std::vector<double> layerThroughOpReferences(const Mamba2Config& c, const Mamba2LayerWeights& w,
                                             const std::vector<double>& hidden, const std::vector<int64_t>& cuv) {
  using reference::el;
  const int64_t D = c.hidden_size, T = int64_t(hidden.size()) / D, R = c.in_proj_rows(), E = c.d_inner(),
                Dc = c.conv_dim(), H = c.num_heads, P = c.head_dim, G = c.n_groups, N = c.state_size,
                W = c.conv_kernel, nseq = int64_t(cuv.size()) - 1;
  std::vector<float> zxbcdt(size_t(T * R));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t r = 0; r < R; ++r) {
      double acc = w.in_proj_bias.defined() ? el(w.in_proj_bias, {r}) : 0.0;
      for (int64_t d = 0; d < D; ++d) acc += el(w.in_proj_weight, {r, d}) * hidden[size_t(t * D + d)];
      zxbcdt[size_t(t * R + r)] = float(acc);
    }
  std::vector<int32_t> cu(cuv.begin(), cuv.end());
  const TensorView cuT = TensorView::contiguous(cu.data(), DType::I32, {nseq + 1}, DeviceKind::CPU);

  std::vector<float> post(size_t(T * Dc));
  CausalConv1dArgs conv;
  conv.x = strided(zxbcdt.data() + E, {1, T, Dc}, {T * R, R, 1});
  conv.weight = w.conv1d_weight;
  conv.weight.ndim = 2, conv.weight.shape[1] = W, conv.weight.strides[0] = W, conv.weight.strides[1] = 1;
  conv.bias = w.conv1d_bias;
  conv.out = cpuView(post, {1, T, Dc});
  conv.layout = ConvLayout::ChannelLast;
  conv.silu = true;
  conv.cu_seqlens = cuT;
  reference::causal_conv1d(conv);

  std::vector<float> A(static_cast<size_t>(H)), Dv(static_cast<size_t>(E)), dtb(static_cast<size_t>(H)),
      y(static_cast<size_t>(T * E));
  for (int64_t h = 0; h < H; ++h) {
    A[size_t(h)] = float(-std::exp(el(w.A_log, {h})));
    dtb[size_t(h)] = float(el(w.dt_bias, {h}));
  }
  for (int64_t i = 0; i < (c.d_has_hdim ? E : H); ++i) Dv[size_t(i)] = float(el(w.D, {i}));
  SsdArgs s;
  s.x = strided(post.data(), {1, T, H, P}, {T * Dc, Dc, P, 1});
  s.B = strided(post.data() + E, {1, T, G, N}, {T * Dc, Dc, N, 1});
  s.C = strided(post.data() + E + G * N, {1, T, G, N}, {T * Dc, Dc, N, 1});
  s.dt = strided(zxbcdt.data() + E + Dc, {1, T, H}, {T * R, R, 1});
  s.A = cpuView(A, {H});
  s.D = c.d_has_hdim ? cpuView(Dv, {H, P}) : cpuView(Dv, {H});
  s.dt_bias = cpuView(dtb, {H});
  s.dt_softplus = true;
  s.dt_min = float(c.dt_min);
  s.dt_max = std::isinf(c.dt_max) ? 0.0f : float(c.dt_max);  // no clamp above: dt' >= 0 already
  s.chunk_size = 64;
  s.out = cpuView(y, {1, T, H, P});
  s.cu_seqlens = cuT;
  reference::ssd(s);

  std::vector<double> out(static_cast<size_t>(T * D)), g(static_cast<size_t>(E));
  const int64_t gs = E / G;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t grp = 0; grp < G; ++grp) {
      auto gate = [&](int64_t i) {
        const double z = zxbcdt[size_t(t * R + i)];
        return z / (1 + std::exp(-z));
      };
      double ss = 0;
      for (int64_t i = grp * gs; i < (grp + 1) * gs; ++i) {
        const double v = y[size_t(t * E + i)] * (c.norm_before_gate ? 1.0 : gate(i));
        ss += v * v;
      }
      const double inv = 1 / std::sqrt(ss / double(gs) + c.norm_eps);
      for (int64_t i = grp * gs; i < (grp + 1) * gs; ++i)
        g[size_t(i)] = y[size_t(t * E + i)] * gate(i) * inv * el(w.gated_norm, {i});
    }
    for (int64_t d = 0; d < D; ++d) {
      double acc = w.out_proj_bias.defined() ? el(w.out_proj_bias, {d}) : 0.0;
      for (int64_t i = 0; i < E; ++i) acc += el(w.out_proj_weight, {d, i}) * g[size_t(i)];
      out[size_t(t * D + d)] = acc;
    }
  }
  return out;
}

TEST(Mamba2LayerReference, MatchesTheOpReferences) {
  for (const TinyMamba2& m : variants()) {
    TinyModel tm(m, 31);
    const Mamba2Config& c = tm.ck.config;
    const std::vector<int64_t> cu = {0, 6, 7, 16};
    const std::vector<double> hidden = randomHidden(cu.back(), c.hidden_size, 8);
    for (const Mamba2LayerWeights& w : tm.ck.weights.layers) {
      std::vector<Mamba2SequenceState> states(cu.size() - 1);
      const std::vector<double> ref = reference::mamba2_layer(c, w, hidden, cu, states);
      const std::vector<double> ops = layerThroughOpReferences(c, w, hidden, cu);
      const double scale = maxAbs(ref);
      ASSERT_GT(scale, 1e-3);
      EXPECT_LE(maxAbsDiff(ref, ops), 1e-6 * scale) << "variant " << int(m.naming) << " groups " << m.groups;
    }
  }
}

TEST(Mamba2LayerReference, RefusesBadSeqlensAndStates) {
  TinyModel tm(variants()[0], 1);
  const Mamba2Config& c = tm.ck.config;
  const std::vector<double> hidden = randomHidden(4, c.hidden_size, 1);
  std::vector<Mamba2SequenceState> states(2);
  auto msg = [&](const std::vector<int64_t>& cu) {
    try {
      reference::mamba2_layer(c, tm.ck.weights.layers[0], hidden, cu, states);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(msg({0, 3, 5}).find("cu_seqlens"), std::string::npos);
  EXPECT_NE(msg({0, 3, 2, 4}).find("cu_seqlens[2]"), std::string::npos);
  states[1].ssm.assign(3, 0.0);
  EXPECT_NE(msg({0, 1, 4}).find("states[1].ssm"), std::string::npos);
  std::vector<std::vector<Mamba2SequenceState>> none;
  try {
    reference::mamba2_model(c, tm.ck.weights, {0, 11}, {0, 2}, none);
    ADD_FAILURE() << "token 11 of a vocabulary of 11 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokens[1] = 11"), std::string::npos) << e.what();
  }
}

}  // namespace

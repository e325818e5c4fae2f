// Causal conv1d backward's float64 reference on the CPU: gradients against central differences,
// packed rows equal to each sequence alone, hand-computed cases, and bad input refused before
// anything is written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tests/support/ExpectError.h"
#include "tests/support/HostTensors.h"
#include "tools/problems/ConvProblem.h"
#include "tools/problems/HostTensor.h"

using ssmjit::CausalConv1dArgs;
using ssmjit::CausalConv1dBackwardArgs;
using ssmjit::ConvLayout;
using ssmjit::DType;
using ssmjit::TensorView;
using namespace ssmjit::testing;

namespace {

std::vector<double> zeros(size_t n) { return std::vector<double>(n, 0.0); }

double dot(const HostTensor& a, const HostTensor& b) {
  const std::vector<double> va = valuesOf(a), vb = valuesOf(b);
  double s = 0;
  for (size_t i = 0; i < va.size(); ++i) s += va[i] * vb[i];
  return s;
}

// The functional whose gradients the backward computes: dot(dout, out) + dot(dfinal, final
// states), from the forward reference on the problem's inputs (final states into zeros, at the
// slots final_state_indices names).
double lossOf(const ConvBackwardProblem& p) {
  HostTensor out = poisoned(DType::F32, std::vector<int64_t>(p.x.meta.shape, p.x.meta.shape + 3));
  HostTensor fin;
  CausalConv1dArgs f;
  f.x = viewOrNone(p.x);
  f.weight = viewOrNone(p.weight);
  f.bias = viewOrNone(p.bias);
  f.out = viewOrNone(out);
  f.layout = p.c.layout;
  f.silu = p.c.silu;
  f.cu_seqlens = viewOrNone(p.cu);
  f.seq_pos = viewOrNone(p.pos);
  f.initial_states = viewOrNone(p.states);
  f.initial_state_indices = viewOrNone(p.initIdx);
  if (p.dfinal.defined) {
    const TensorView& s = p.dfinal.meta;
    fin = hostTensor(DType::F32, {s.shape[0], s.shape[1], s.shape[2]}, {});
    f.final_states = viewOrNone(fin);
    f.final_state_indices = viewOrNone(p.finalIdx);
  }
  ssmjit::reference::causal_conv1d(f);
  return dot(p.dout, out) + (p.dfinal.defined ? dot(p.dfinal, fin) : 0.0);
}

// Central differences along a random direction of each input: (L(in + h u) - L(in - h u)) / 2h
// against dot(gradient, u), all tensors fp32, SiLU on.
void checkGradient(ConvBackwardCase c) {
  c.xType = c.wType = c.stateType = DType::F32;
  c.silu = true;
  ConvBackwardProblem p(c);
  // Slots no sequence reads keep what they hold: zeros, so that dot(dinit, u) runs over all.
  if (p.dinit.defined) std::fill(p.dinit.bytes.begin(), p.dinit.bytes.end(), uint8_t{0});
  ssmjit::reference::causal_conv1d_backward(p.args());
  struct Input {
    const char* name;
    HostTensor ConvBackwardProblem::*in;
    HostTensor ConvBackwardProblem::*grad;
  };
  const Input inputs[] = {{"x", &ConvBackwardProblem::x, &ConvBackwardProblem::dx},
                          {"weight", &ConvBackwardProblem::weight, &ConvBackwardProblem::dweight},
                          {"bias", &ConvBackwardProblem::bias, &ConvBackwardProblem::dbias},
                          {"initial_states", &ConvBackwardProblem::states, &ConvBackwardProblem::dinit}};
  std::mt19937_64 rng(c.seed + 100);
  const double h = 1e-2;  // inputs are O(1)
  int checked = 0;
  for (const Input& in : inputs) {
    HostTensor& input = p.*in.in;
    const HostTensor& grad = p.*in.grad;
    if (!input.defined || !grad.defined) continue;
    SCOPED_TRACE(in.name);
    const std::vector<int64_t> shape(input.meta.shape, input.meta.shape + input.meta.ndim);
    auto lossAt = [&](const HostTensor& u, double s) {
      ConvBackwardProblem q = p;
      const TensorView t = (q.*in.in).view();
      const std::vector<double> base = valuesOf(input), du = valuesOf(u);
      size_t k = 0;
      forEachElement(t, [&](int64_t off, const std::vector<int64_t>&) {
        storeElement(t, off, base[k] + s * du[k]);
        ++k;
      });
      return lossOf(q);
    };
    // Three directions; one nearly orthogonal to the gradient would test little: drawn again.
    for (int n = 0, draws = 0; n < 3 && draws < 30; ++draws) {
      const HostTensor u = randomTensor(DType::F32, shape, rng);
      const double analytic = dot(grad, u);
      if (std::fabs(analytic) < 0.1 * std::sqrt(dot(grad, grad) * dot(u, u))) continue;
      const double numeric = (lossAt(u, h) - lossAt(u, -h)) / (2 * h);
      EXPECT_NEAR(numeric, analytic, 1e-3 * std::fabs(analytic)) << "direction " << n;
      ++n;
      checked += n == 3;
    }
  }
  EXPECT_EQ(checked, 2 + c.bias + c.dinitialStates);
}

TEST(ConvBackwardReference, GradientMatchesCentralDifferences) {
  ConvBackwardCase c;  // dense rows, each its own initial slot and final-state gradient
  c.D = 3;
  c.lens = {12, 12, 12};
  c.initialStates = c.dinitialStates = c.dfinalStates = true;
  c.seed = 60;
  {
    SCOPED_TRACE("dense, channel-first, W 4");
    checkGradient(c);
  }
  // Packed by cu_seqlens, sequences shorter than W - 1 (final columns read the initial state),
  // permuted slots with a -1 each.
  c.layout = ConvLayout::ChannelLast;
  c.packing = ConvPacking::CuSeqlens;
  c.lens = {6, 1, 2, 9};
  c.slotIndices = true;
  c.seed = 61;
  {
    SCOPED_TRACE("cu_seqlens, channel-last, W 4");
    checkGradient(c);
  }
  c.W = 8;
  c.lens = {3, 10, 1, 7};
  c.seed = 62;
  {
    SCOPED_TRACE("cu_seqlens, channel-last, W 8");
    checkGradient(c);
  }
  c.W = 2;
  c.layout = ConvLayout::ChannelFirst;
  c.slotIndices = false;
  c.seed = 63;
  {
    SCOPED_TRACE("cu_seqlens, channel-first, W 2, slot i");
    checkGradient(c);
  }
  c.W = 3;
  c.packing = ConvPacking::Positions;
  c.lens = {5, 1, 8};
  c.initialStates = c.dinitialStates = c.dfinalStates = false;
  c.seed = 64;
  {
    SCOPED_TRACE("seq_pos, W 3");
    checkGradient(c);
  }
  c.packing = ConvPacking::Dense;
  c.lens = {9};
  c.bias = false;
  c.seed = 65;
  {
    SCOPED_TRACE("one row, no bias");
    checkGradient(c);
  }
}

// Packed by cu_seqlens == each sequence alone (a one-row view of its tokens, its own slots):
// dx and dinitial_states bit for bit; dweight and dbias are sums over the sequences.
TEST(ConvBackwardReference, CuSeqlensEqualsEachSequenceAlone) {
  for (ConvLayout lay : {ConvLayout::ChannelFirst, ConvLayout::ChannelLast})
    for (int W : {2, 4, 8}) {
      SCOPED_TRACE(std::string(lay == ConvLayout::ChannelLast ? "ChannelLast" : "ChannelFirst") + " W " +
                   std::to_string(W));
      ConvBackwardCase c;
      c.layout = lay;
      c.xType = DType::BF16;
      c.stateType = DType::F16;
      c.W = W;
      c.D = 5;
      c.lens = {7, 2, 1, 12, 3};
      c.packing = ConvPacking::CuSeqlens;
      c.initialStates = c.dinitialStates = c.dfinalStates = c.slotIndices = true;
      c.seed = 70 + W + int(lay);
      const ConvBackwardProblem p0(c);
      ConvBackwardProblem packed = p0;
      ssmjit::reference::causal_conv1d_backward(packed.args());

      const int tAx = lay == ConvLayout::ChannelLast ? 1 : 2;
      ConvBackwardProblem alone = p0;  // its dx and dinit collect the single runs
      std::vector<double> dw = zeros(size_t(c.D * W)), db = zeros(size_t(c.D));
      int64_t start = 0;
      for (size_t i = 0; i < c.lens.size(); ++i) {
        const int64_t len = c.lens[i];
        ConvBackwardProblem one = p0;  // fresh dweight / dbias
        CausalConv1dBackwardArgs a = one.args();
        a.cu_seqlens = TensorView{};
        a.x = slice(a.x, tAx, start, len);
        a.dout = slice(a.dout, tAx, start, len);
        a.dx = slice(viewOrNone(alone.dx), tAx, start, len);
        a.dinitial_states = viewOrNone(alone.dinit);
        const HostTensor ii = hostTensor(DType::I64, {1}, {loadElement(p0.initIdx.view(), int64_t(i))});
        const HostTensor fi = hostTensor(DType::I32, {1}, {loadElement(p0.finalIdx.view(), int64_t(i))});
        a.initial_state_indices = viewOrNone(ii);
        a.final_state_indices = viewOrNone(fi);
        ssmjit::reference::causal_conv1d_backward(a);
        const std::vector<double> w1 = valuesOf(one.dweight), b1 = valuesOf(one.dbias);
        for (size_t k = 0; k < dw.size(); ++k) dw[k] += w1[k];
        for (size_t k = 0; k < db.size(); ++k) db[k] += b1[k];
        start += len;
      }
      EXPECT_EQ(packed.dx.bytes, alone.dx.bytes);
      EXPECT_EQ(packed.dinit.bytes, alone.dinit.bytes);
      EXPECT_NE(packed.dinit.bytes, p0.dinit.bytes) << "dinitial_states should have been written";
      // fp32 sums of fp32-rounded parts: within a few fp32 roundings, in norm.
      auto relL2 = [](const std::vector<double>& got, const std::vector<double>& want) {
        double num = 0, den = 0;
        for (size_t k = 0; k < got.size(); ++k) {
          num += (got[k] - want[k]) * (got[k] - want[k]);
          den += want[k] * want[k];
        }
        return std::sqrt(num / den);
      };
      EXPECT_LE(relL2(valuesOf(packed.dweight), dw), 1e-6);
      EXPECT_LE(relL2(valuesOf(packed.dbias), db), 1e-6);
    }
}

// The same row packed by positions gives the same gradients as packed by cu_seqlens.
TEST(ConvBackwardReference, SeqPosEqualsCuSeqlens) {
  for (ConvLayout lay : {ConvLayout::ChannelFirst, ConvLayout::ChannelLast})
    for (int W : {2, 4, 8}) {
      SCOPED_TRACE("W " + std::to_string(W));
      ConvBackwardCase c;
      c.layout = lay;
      c.xType = DType::BF16;
      c.W = W;
      c.D = 3;
      c.lens = {5, 1, 2, 11};
      c.packing = ConvPacking::Positions;
      c.seed = 80 + W;
      ConvBackwardCase cc = c;
      cc.packing = ConvPacking::CuSeqlens;
      ConvBackwardProblem byPos(c), byCu(cc);
      ASSERT_EQ(byPos.x.bytes, byCu.x.bytes);
      ASSERT_EQ(byPos.dout.bytes, byCu.dout.bytes);
      ssmjit::reference::causal_conv1d_backward(byPos.args());
      ssmjit::reference::causal_conv1d_backward(byCu.args());
      EXPECT_EQ(byPos.dx.bytes, byCu.dx.bytes);
      EXPECT_EQ(byPos.dweight.bytes, byCu.dweight.bytes);
      EXPECT_EQ(byPos.dbias.bytes, byCu.dbias.bytes);
    }
}

// dx reaches no token of another sequence: a one-token sequence's dx is its own tap alone.
TEST(ConvBackwardReference, HandComputedWidth2) {
  // One channel, W 2 (w = (0.5, 2)), no SiLU, no bias: sequences {x0, x1} and {x2}; dout = 1, 2, 4;
  // dfinal (1 slot each) = 10, 100; the initial state of the second sequence is 3 (slot 0), the
  // first reads zeros (-1).
  HostTensor x = hostTensor(DType::F32, {1, 1, 3}, {1, -1, 5});
  HostTensor dout = hostTensor(DType::F32, {1, 1, 3}, {1, 2, 4});
  HostTensor w = hostTensor(DType::F32, {1, 2}, {0.5, 2});
  HostTensor cu = hostTensor(DType::I32, {3}, {0, 2, 3});
  HostTensor st = hostTensor(DType::F32, {1, 1, 1}, {3}), initIdx = hostTensor(DType::I32, {2}, {-1, 0});
  HostTensor dfin = hostTensor(DType::F32, {2, 1, 1}, {10, 100});
  HostTensor dx = poisoned(DType::F32, {1, 1, 3}), dw = poisoned(DType::F32, {1, 2});
  HostTensor dinit = poisoned(DType::F32, {1, 1, 1});
  CausalConv1dBackwardArgs a;
  a.x = viewOrNone(x);
  a.weight = viewOrNone(w);
  a.dout = viewOrNone(dout);
  a.cu_seqlens = viewOrNone(cu);
  a.initial_states = viewOrNone(st);
  a.initial_state_indices = viewOrNone(initIdx);
  a.dfinal_states = viewOrNone(dfin);
  a.dx = viewOrNone(dx);
  a.dweight = viewOrNone(dw);
  a.dinitial_states = viewOrNone(dinit);
  ssmjit::reference::causal_conv1d_backward(a);
  // out0 = 2 x0, out1 = .5 x0 + 2 x1, out2 = .5 * 3 + 2 x2; final states x1, x2.
  EXPECT_EQ(valuesOf(dx), (std::vector<double>{2 * 1 + 0.5 * 2, 2 * 2 + 10, 2 * 4 + 100}));
  EXPECT_EQ(valuesOf(dw), (std::vector<double>{2 * 1 + 4 * 3, 1 * 1 + 2 * -1 + 4 * 5}));
  EXPECT_EQ(valuesOf(dinit), (std::vector<double>{0.5 * 4}));
}

TEST(ConvBackwardReference, BadCuSeqlensThrowsBeforeWriting) {
  ConvBackwardCase c;
  c.layout = ConvLayout::ChannelLast;
  c.D = 3;
  c.lens = {4, 5, 6};
  c.packing = ConvPacking::CuSeqlens;
  c.initialStates = c.dinitialStates = c.dfinalStates = true;
  const ConvBackwardProblem p0(c);
  const std::vector<std::pair<std::vector<double>, std::vector<std::string>>> bad = {
      {{1, 4, 9, 15}, {"cu_seqlens[0] = 1", "expected 0"}},
      {{0, 9, 9, 15}, {"cu_seqlens[2] = 9", "expected more than cu_seqlens[1] = 9"}},
      {{0, 4, 9, 14}, {"cu_seqlens[3] = 14", "expected T = 15"}},
  };
  for (const auto& b : bad) {
    ConvBackwardProblem p = p0;
    p.cu = hostTensor(DType::I32, {4}, b.first);
    const std::string m = invalidArgMessage([&] { ssmjit::reference::causal_conv1d_backward(p.args()); });
    EXPECT_MENTIONS(m, "reference::causal_conv1d_backward: ");
    for (const std::string& s : b.second) EXPECT_MENTIONS(m, s);
    EXPECT_TRUE(p.gradientBytes() == p0.gradientBytes()) << "a gradient was written";
  }
}

TEST(ConvBackwardReference, BadSlotThrowsBeforeWriting) {
  ConvBackwardCase c;
  c.D = 4;
  c.W = 3;
  c.lens = {3, 5, 2};
  c.packing = ConvPacking::CuSeqlens;
  c.initialStates = c.dinitialStates = c.dfinalStates = c.slotIndices = true;
  const ConvBackwardProblem p0(c);  // 5 slots
  const int64_t slot0 = int64_t(loadElement(p0.initIdx.view(), 0));
  struct Bad {
    HostTensor ConvBackwardProblem::*idx;
    int64_t i, slot;
    std::vector<std::string> mentions;
  };
  const std::vector<Bad> bad = {
      {&ConvBackwardProblem::initIdx,
       2,
       5,
       {"initial_state_indices[2] = 5", "expected -1 (zeros) or a slot in [0, 5)"}},
      {&ConvBackwardProblem::finalIdx,
       0,
       -2,
       {"final_state_indices[0] = -2", "expected -1 (no gradient) or a slot in [0, 5)"}},
      // Two sequences reading one slot: its gradient would be written twice.
      {&ConvBackwardProblem::initIdx,
       2,
       slot0,
       {"initial_state_indices[2] = " + std::to_string(slot0), "the slot of initial_state_indices[0] too",
        "expected distinct slots with dinitial_states"}},
  };
  for (const Bad& b : bad) {
    ConvBackwardProblem p = p0;
    storeElement((p.*b.idx).view(), b.i, double(b.slot));
    const std::string m = invalidArgMessage([&] { ssmjit::reference::causal_conv1d_backward(p.args()); });
    EXPECT_MENTIONS(m, "reference::causal_conv1d_backward: ");
    for (const std::string& s : b.mentions) EXPECT_MENTIONS(m, s);
    EXPECT_TRUE(p.gradientBytes() == p0.gradientBytes()) << "a gradient was written";
  }
  // A shared slot is fine when its gradient is not asked for.
  ConvBackwardProblem p = p0;
  storeElement(p.initIdx.view(), 2, double(slot0));
  CausalConv1dBackwardArgs a = p.args();
  a.dinitial_states = TensorView{};
  EXPECT_NO_THROW(ssmjit::reference::causal_conv1d_backward(a));
}

}  // namespace

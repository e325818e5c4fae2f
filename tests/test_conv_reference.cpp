// Causal conv1d's float64 reference, forward and decode update, on the CPU: hand-computed cases,
// packed rows and positions equal to each sequence alone, the update equal to single-token
// updates and to the forward, and bad slots or cu_seqlens refused before anything is written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
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
using ssmjit::CausalConv1dUpdateArgs;
using ssmjit::ConvLayout;
using ssmjit::DType;
using ssmjit::TensorView;
using namespace ssmjit::testing;

namespace {

double silu(double v) { return v / (1 + std::exp(-v)); }
double f32(double v) { return double(float(v)); }

// W = 2, two channels, both layouts: out = bias + w0 * x[t-1] + w1 * x[t], worked out by hand.
TEST(ConvReference, HandComputedWidth2) {
  const std::vector<double> x0 = {1, 2, 3, 4}, x1 = {0.5, -1, 1.5, 0};
  const std::vector<double> noInit0 = {1.25, 2.75, 4.25, 5.75}, noInit1 = {0.5, -3, 3.5, -2};
  for (ConvLayout lay : {ConvLayout::ChannelFirst, ConvLayout::ChannelLast}) {
    for (bool act : {false, true}) {
      for (bool init : {false, true}) {
        const bool cl = lay == ConvLayout::ChannelLast;
        std::vector<double> xs;
        if (cl)
          for (int t = 0; t < 4; ++t) xs.insert(xs.end(), {x0[t], x1[t]});
        else
          for (const auto* c : {&x0, &x1}) xs.insert(xs.end(), c->begin(), c->end());
        const std::vector<int64_t> shape = cl ? std::vector<int64_t>{1, 4, 2} : std::vector<int64_t>{1, 2, 4};
        HostTensor x = hostTensor(DType::F32, shape, xs), out = poisoned(DType::F32, shape);
        HostTensor w = hostTensor(DType::F32, {2, 2}, {0.5, 1, -1, 2});
        HostTensor b = hostTensor(DType::F32, {2}, {0.25, -0.5});
        HostTensor st = hostTensor(DType::F32, {1, 2, 1}, {-2, 3});
        CausalConv1dArgs a;
        a.x = viewOrNone(x);
        a.weight = viewOrNone(w);
        a.bias = viewOrNone(b);
        a.out = viewOrNone(out);
        a.layout = lay;
        a.silu = act;
        if (init) a.initial_states = viewOrNone(st);
        a.final_states = viewOrNone(st);  // in place when init
        ssmjit::reference::causal_conv1d(a);
        std::vector<double> want0 = noInit0, want1 = noInit1;
        if (init) {
          want0[0] = 0.25 + 0.5 * -2 + 1;  // x[-1] from the initial state
          want1[0] = -0.5 + -1 * 3 + 2 * 0.5;
        }
        const std::vector<double> got = valuesOf(out);
        for (int t = 0; t < 4; ++t)
          for (int c = 0; c < 2; ++c) {
            const double want = (c ? want1 : want0)[t];
            const double g = got[cl ? t * 2 + c : c * 4 + t];
            EXPECT_EQ(g, f32(act ? silu(want) : want)) << "t " << t << " c " << c;
          }
        EXPECT_EQ(valuesOf(st), (std::vector<double>{4, 0}));  // the last token of each channel
      }
    }
  }
}

// W = 4, one channel, a sequence of 2 tokens (shorter than W - 1): out and the final state take
// the older columns from the initial state, or zeros.
TEST(ConvReference, HandComputedWidth4ShortSequence) {
  for (bool act : {false, true}) {
    for (bool init : {false, true}) {
      HostTensor x = hostTensor(DType::F32, {1, 1, 2}, {1, -2}), out = poisoned(DType::F32, {1, 1, 2});
      HostTensor w = hostTensor(DType::F32, {1, 4}, {0.25, -0.5, 1, 2});
      HostTensor b = hostTensor(DType::F32, {1}, {1});
      HostTensor st0 = hostTensor(DType::F32, {2, 1, 3}, {9, 9, 9, 3, 5, -1});  // slot 1: positions -3, -2, -1
      HostTensor stF = poisoned(DType::F32, {3, 1, 3});
      HostTensor initIdx = hostTensor(DType::I32, {1}, {1}), finalIdx = hostTensor(DType::I64, {1}, {2});
      CausalConv1dArgs a;
      a.x = viewOrNone(x);
      a.weight = viewOrNone(w);
      a.bias = viewOrNone(b);
      a.out = viewOrNone(out);
      a.silu = act;
      if (init) {
        a.initial_states = viewOrNone(st0);
        a.initial_state_indices = viewOrNone(initIdx);
      }
      a.final_states = viewOrNone(stF);
      a.final_state_indices = viewOrNone(finalIdx);
      const std::vector<uint8_t> before = stF.bytes;
      ssmjit::reference::causal_conv1d(a);
      // out[0] = 1 + .25 x(-3) - .5 x(-2) + x(-1) + 2 x(0);  out[1] = 1 + .25 x(-2) - .5 x(-1) + x(0) + 2 x(1)
      const std::vector<double> want = init ? std::vector<double>{1 + 0.75 - 2.5 - 1 + 2, 1 + 1.25 + 0.5 + 1 - 4}
                                            : std::vector<double>{1 + 2, 1 + 1 - 4};
      const std::vector<double> got = valuesOf(out);
      for (int t = 0; t < 2; ++t) EXPECT_EQ(got[t], f32(act ? silu(want[t]) : want[t])) << t;
      // Final column j = xx(len - 3 + j) = xx(-1), x(0), x(1); written to slot 2 only.
      const std::vector<double> fs = valuesOf(stF);
      EXPECT_EQ(std::vector<double>(fs.begin() + 6, fs.end()), (std::vector<double>{init ? -1.0 : 0.0, 1, -2}));
      EXPECT_TRUE(std::equal(before.begin(), before.begin() + 6 * 4, stF.bytes.begin()))
          << "slots 0 and 1 are not written";
    }
  }
}

// Without bias the sum starts at 0; the identity activation passes negative values through.
TEST(ConvReference, NoBias) {
  HostTensor x = hostTensor(DType::BF16, {1, 3, 1}, {1, 2, -3}), out = poisoned(DType::F16, {1, 3, 1});
  HostTensor w = hostTensor(DType::F32, {1, 3}, {1, -1, 0.5});
  CausalConv1dArgs a;
  a.x = viewOrNone(x);
  a.weight = viewOrNone(w);
  a.out = viewOrNone(out);
  a.layout = ConvLayout::ChannelLast;
  ssmjit::reference::causal_conv1d(a);
  EXPECT_EQ(valuesOf(out), (std::vector<double>{0.5, -1 + 1, 1 - 2 - 1.5}));
}

// ---- packed == each sequence alone

struct Packed {
  ConvLayout layout;
  int W;
  int64_t D;
  std::vector<int64_t> lens;
  bool cu = true;      // else seq_pos
  bool states = true;  // initial and final states, in place, slots through indices
  bool stridedLayouts = false;
  uint64_t seed = 1;
};

struct PackedProblem {
  HostTensor x, w, bias, out, cu, pos, states, initIdx, finalIdx;
  std::vector<int64_t> start, initSlot, finalSlot;
  int64_t T = 0, S = 0;
};

PackedProblem makePacked(const Packed& c) {
  std::mt19937_64 rng(c.seed);
  PackedProblem p;
  const int64_t nseq = static_cast<int64_t>(c.lens.size());
  p.start.push_back(0);
  for (int64_t l : c.lens) p.start.push_back(p.start.back() + l);
  p.T = p.start.back();
  const bool cl = c.layout == ConvLayout::ChannelLast;
  const std::vector<int64_t> xs = cl ? std::vector<int64_t>{1, p.T, c.D} : std::vector<int64_t>{1, c.D, p.T};
  Layout lay;
  lay.padded = lay.transposed = c.stridedLayouts;
  p.x = randomTensor(DType::BF16, xs, rng, lay);
  p.out = poisoned(DType::F32, xs, lay);
  p.w = randomTensor(DType::F32, {c.D, c.W}, rng, lay, -0.5, 0.5);
  p.bias = randomTensor(DType::BF16, {c.D}, rng);
  if (c.cu) {
    std::vector<double> cuv(p.start.begin(), p.start.end());
    p.cu = hostTensor(DType::I64, {nseq + 1}, cuv);
  } else {
    std::vector<double> pv;
    for (int64_t i = 0; i < nseq; ++i)
      for (int64_t t = 0; t < c.lens[i]; ++t) pv.push_back(double(t));
    p.pos = hostTensor(DType::I32, {1, p.T}, pv);
  }
  if (c.states) {
    p.S = nseq + 2;
    Layout sl;
    sl.padded = c.stridedLayouts;
    p.states = randomTensor(DType::F16, {p.S, c.D, c.W - 1}, rng, sl);
    // Permuted slots, one -1 each; different read and write slots, so that a sequence's final
    // state lands where another one reads its initial state (all reads come first).
    std::vector<int64_t> perm(static_cast<size_t>(p.S));
    for (int64_t s = 0; s < p.S; ++s) perm[s] = s;
    std::shuffle(perm.begin(), perm.end(), rng);
    p.initSlot.assign(perm.begin(), perm.begin() + nseq);
    std::shuffle(perm.begin(), perm.end(), rng);
    p.finalSlot.assign(perm.begin(), perm.begin() + nseq);
    p.initSlot[1 % nseq] = -1;
    if (nseq > 2) p.finalSlot[2] = -1;
    p.initIdx = hostTensor(DType::I32, {nseq}, std::vector<double>(p.initSlot.begin(), p.initSlot.end()));
    p.finalIdx = hostTensor(DType::I64, {nseq}, std::vector<double>(p.finalSlot.begin(), p.finalSlot.end()));
  }
  return p;
}

CausalConv1dArgs packedArgs(const Packed& c, const PackedProblem& p) {
  CausalConv1dArgs a;
  a.x = viewOrNone(p.x);
  a.weight = viewOrNone(p.w);
  a.bias = viewOrNone(p.bias);
  a.out = viewOrNone(p.out);
  a.layout = c.layout;
  a.silu = true;
  a.cu_seqlens = viewOrNone(p.cu);
  a.seq_pos = viewOrNone(p.pos);
  a.initial_states = a.final_states = viewOrNone(p.states);
  a.initial_state_indices = viewOrNone(p.initIdx);
  a.final_state_indices = viewOrNone(p.finalIdx);
  return a;
}

// Runs the packed call, then each sequence alone (a B = 1 view of its tokens, the states as they
// were before, its own slots) and compares bit for bit: out, and the states (written slots take
// the single run's state, the others stay as they were).
void checkPackedEqualsPerSequence(const Packed& c) {
  const PackedProblem p0 = makePacked(c);
  PackedProblem packed = p0;
  ssmjit::reference::causal_conv1d(packedArgs(c, packed));

  const int tAx = c.layout == ConvLayout::ChannelLast ? 1 : 2;
  HostTensor out = p0.out;
  HostTensor states = p0.states;  // the expected states after the packed call
  for (size_t i = 0; i + 1 < p0.start.size(); ++i) {
    PackedProblem one = p0;  // fresh states
    CausalConv1dArgs a = packedArgs(c, one);
    a.cu_seqlens = a.seq_pos = TensorView{};
    const int64_t s = p0.start[i], len = p0.start[i + 1] - s;
    a.x = slice(a.x, tAx, s, len);
    a.out = slice(viewOrNone(out), tAx, s, len);
    HostTensor ii, fi;
    if (c.states) {
      ii = hostTensor(DType::I64, {1}, {double(p0.initSlot[i])});
      fi = hostTensor(DType::I32, {1}, {double(p0.finalSlot[i])});
      a.initial_state_indices = viewOrNone(ii);
      a.final_state_indices = viewOrNone(fi);
    }
    ssmjit::reference::causal_conv1d(a);
    if (c.states && p0.finalSlot[i] >= 0) {
      const TensorView from = one.states.view(), to = states.view();
      forEachElement(from, [&](int64_t off, const std::vector<int64_t>& idx) {
        if (idx[0] == p0.finalSlot[i])
          std::memcpy(static_cast<char*>(to.data) + off * 2, static_cast<const char*>(from.data) + off * 2, 2);
      });
    }
  }
  EXPECT_EQ(packed.out.bytes, out.bytes);
  EXPECT_NE(packed.out.bytes, p0.out.bytes) << "out should have been written";
  if (c.states) {
    EXPECT_EQ(packed.states.bytes, states.bytes);
    EXPECT_NE(packed.states.bytes, p0.states.bytes) << "final states should have been written";
  }
}

TEST(ConvReference, CuSeqlensEqualsEachSequenceAlone) {
  // Lengths 2 and 1 are shorter than W - 1 = 3 (their final states reach into the initial state).
  for (ConvLayout lay : {ConvLayout::ChannelFirst, ConvLayout::ChannelLast}) {
    for (bool strided : {false, true}) {
      Packed c{lay, 4, 5, {7, 2, 1, 9, 3}};
      c.stridedLayouts = strided;
      c.seed = 10 + int(lay) * 2 + strided;
      SCOPED_TRACE(std::string(lay == ConvLayout::ChannelLast ? "ChannelLast" : "ChannelFirst") +
                   (strided ? " strided" : ""));
      checkPackedEqualsPerSequence(c);
      c.W = 2;
      checkPackedEqualsPerSequence(c);
      c.W = ssmjit::kMaxConvWidth;
      c.lens = {1, 12, 6, 2};
      checkPackedEqualsPerSequence(c);
      c.states = false;
      checkPackedEqualsPerSequence(c);
    }
  }
}

TEST(ConvReference, SeqPosEqualsEachSequenceAlone) {
  for (ConvLayout lay : {ConvLayout::ChannelFirst, ConvLayout::ChannelLast}) {
    for (int W : {2, 4, 8}) {
      Packed c{lay, W, 3, {5, 1, 2, 11}, /*cu=*/false, /*states=*/false};
      c.stridedLayouts = W == 4;
      c.seed = 20 + W;
      SCOPED_TRACE("W " + std::to_string(W));
      checkPackedEqualsPerSequence(c);
      // And the same row packed by cu_seqlens gives the same bytes.
      Packed cc = c;
      cc.cu = true;
      PackedProblem byPos = makePacked(c), byCu = makePacked(cc);
      ASSERT_EQ(byPos.x.bytes, byCu.x.bytes);
      ssmjit::reference::causal_conv1d(packedArgs(c, byPos));
      ssmjit::reference::causal_conv1d(packedArgs(cc, byCu));
      EXPECT_EQ(byPos.out.bytes, byCu.out.bytes);
    }
  }
}

// Dense rows: row b is sequence b, slot b without indices (extra slots untouched).
TEST(ConvReference, DenseRowsEqualEachRowAlone) {
  std::mt19937_64 rng(5);
  const int64_t B = 3, D = 4, L = 6, W = 3, S = 4;
  HostTensor x = randomTensor(DType::F32, {B, D, L}, rng), w = randomTensor(DType::F32, {D, W}, rng);
  HostTensor out = poisoned(DType::BF16, {B, D, L});
  HostTensor st = randomTensor(DType::F32, {S, D, W - 1}, rng);
  const HostTensor st0 = st;
  HostTensor outRows = out, stRows = st;
  CausalConv1dArgs a;
  a.x = viewOrNone(x);
  a.weight = viewOrNone(w);
  a.out = viewOrNone(out);
  a.initial_states = a.final_states = viewOrNone(st);
  a.silu = true;
  ssmjit::reference::causal_conv1d(a);
  for (int64_t b = 0; b < B; ++b) {
    CausalConv1dArgs r = a;
    r.x = slice(viewOrNone(x), 0, b, 1);
    r.out = slice(viewOrNone(outRows), 0, b, 1);
    r.initial_states = r.final_states = slice(viewOrNone(stRows), 0, b, 1);
    ssmjit::reference::causal_conv1d(r);
  }
  EXPECT_EQ(out.bytes, outRows.bytes);
  EXPECT_EQ(st.bytes, stRows.bytes);
  // Slots 0..2 advanced; slot 3 is no row's.
  const std::vector<double> s1 = valuesOf(st), s0 = valuesOf(st0);
  const size_t slot = size_t(D * (W - 1));
  for (int64_t k = 0; k < S; ++k)
    EXPECT_EQ(std::equal(s0.begin() + k * slot, s0.begin() + (k + 1) * slot, s1.begin() + k * slot), k == 3)
        << "slot " << k;
}

TEST(ConvReference, BadCuSeqlensThrowsBeforeWriting) {
  Packed c{ConvLayout::ChannelLast, 4, 3, {4, 5, 6}};
  const PackedProblem p0 = makePacked(c);
  struct Bad {
    std::vector<double> cu;
    std::vector<std::string> mentions;
  };
  const std::vector<Bad> bad = {
      {{1, 4, 9, 15}, {"cu_seqlens[0] = 1", "expected 0"}},
      {{0, 9, 9, 15}, {"cu_seqlens[2] = 9", "expected more than cu_seqlens[1] = 9", "strictly increasing"}},
      {{0, 9, 4, 15}, {"cu_seqlens[2] = 4", "strictly increasing"}},
      {{0, 4, 9, 14}, {"cu_seqlens[3] = 14", "expected T = 15"}},
      {{0, 4, 9, 16}, {"cu_seqlens[3] = 16", "expected T = 15"}},
  };
  for (const Bad& b : bad) {
    PackedProblem p = p0;
    p.cu = hostTensor(DType::I32, {4}, b.cu);
    const std::string m = invalidArgMessage([&] { ssmjit::reference::causal_conv1d(packedArgs(c, p)); });
    EXPECT_MENTIONS(m, "reference::causal_conv1d: ");
    for (const std::string& s : b.mentions) EXPECT_MENTIONS(m, s);
    EXPECT_EQ(p.out.bytes, p0.out.bytes);
    EXPECT_EQ(p.states.bytes, p0.states.bytes);
  }
}

// Positions that are neither a sequence start (0) nor one more than the token before throw,
// naming the token, before anything is written (forward and backward).
TEST(ConvReference, BadSeqPosThrowsBeforeWriting) {
  for (int64_t t : {0, 5}) {
    ssmjit::testing::ConvCase c;
    c.packing = ssmjit::testing::ConvPacking::Positions;
    c.lens = {4, 6};
    ssmjit::testing::ConvProblem p(c);
    ssmjit::testing::storeElement(p.pos.view(), t, 7);
    const std::vector<uint8_t> before = p.out.bytes;
    const std::string m = invalidArgMessage([&] { ssmjit::reference::causal_conv1d(p.args()); });
    EXPECT_MENTIONS(m, "seq_pos[0, " + std::to_string(t) + "] = 7");
    EXPECT_EQ(p.out.bytes, before);

    ssmjit::testing::ConvBackwardCase cb;
    cb.packing = ssmjit::testing::ConvPacking::Positions;
    cb.lens = {4, 6};
    ssmjit::testing::ConvBackwardProblem pb(cb);
    ssmjit::testing::storeElement(pb.pos.view(), t, 7);
    const std::vector<uint8_t> dxBefore = pb.dx.bytes;
    const std::string mb = invalidArgMessage([&] { ssmjit::reference::causal_conv1d_backward(pb.args()); });
    EXPECT_MENTIONS(mb, "seq_pos[0, " + std::to_string(t) + "] = 7");
    EXPECT_EQ(pb.dx.bytes, dxBefore);
  }
}

TEST(ConvReference, BadSlotThrowsBeforeWriting) {
  Packed c{ConvLayout::ChannelFirst, 3, 4, {3, 5, 2}};
  const PackedProblem p0 = makePacked(c);
  {
    PackedProblem p = p0;
    storeElement(p.initIdx.view(), 2, double(p0.S));
    const std::string m = invalidArgMessage([&] { ssmjit::reference::causal_conv1d(packedArgs(c, p)); });
    EXPECT_MENTIONS(m, "initial_state_indices[2] = " + std::to_string(p0.S),
                    "expected -1 (zeros) or a slot in [0, " + std::to_string(p0.S) + ")");
    EXPECT_EQ(p.out.bytes, p0.out.bytes);
    EXPECT_EQ(p.states.bytes, p0.states.bytes);
  }
  {
    PackedProblem p = p0;
    storeElement(p.finalIdx.view(), 0, -2);
    const std::string m = invalidArgMessage([&] { ssmjit::reference::causal_conv1d(packedArgs(c, p)); });
    EXPECT_MENTIONS(m, "final_state_indices[0] = -2", "expected -1 (not written) or a slot in [0, ");
    EXPECT_EQ(p.out.bytes, p0.out.bytes);
    EXPECT_EQ(p.states.bytes, p0.states.bytes);
  }
}

// ---- the decode update

struct UpdProblem {
  HostTensor state, x, w, bias, out, idx;
  std::vector<int64_t> slot;
};

// batch 4 (row 2 a pad), L tokens, D 5, W, S 6 slots; all fp32 unless told.
UpdProblem makeUpd(int W, int64_t L, uint64_t seed, DType stateT = DType::F32, DType xT = DType::F32) {
  std::mt19937_64 rng(seed);
  const int64_t B = 4, D = 5, S = 6;
  UpdProblem p;
  p.state = randomTensor(stateT, {S, D, W - 1}, rng);
  Layout lay;
  lay.padded = true;
  p.x = randomTensor(xT, {B, L, D}, rng, lay);
  p.w = randomTensor(xT == DType::F32 ? DType::F32 : xT, {D, W}, rng, {}, -0.5, 0.5);
  p.bias = randomTensor(DType::F32, {D}, rng);
  p.out = poisoned(xT, {B, L, D}, lay);
  p.slot = {4, 0, -1, 3};
  p.idx = hostTensor(DType::I32, {B}, {4, 0, -1, 3});
  return p;
}

CausalConv1dUpdateArgs updArgs(const UpdProblem& p, bool commit = true) {
  CausalConv1dUpdateArgs a;
  a.conv_state = viewOrNone(p.state);
  a.x = viewOrNone(p.x);
  a.weight = viewOrNone(p.w);
  a.bias = viewOrNone(p.bias);
  a.out = viewOrNone(p.out);
  a.state_indices = viewOrNone(p.idx);
  a.silu = true;
  a.commit = commit;
  return a;
}

TEST(ConvReference, UpdateEqualsSingleTokenUpdatesBitwise) {
  for (int W : {2, 4, 8}) {
    const int64_t L = 7;
    SCOPED_TRACE("W " + std::to_string(W));
    const UpdProblem p0 = makeUpd(W, L, 30 + W);
    UpdProblem fused = p0, chain = p0;
    ssmjit::reference::causal_conv1d_update(updArgs(fused));
    for (int64_t t = 0; t < L; ++t) {
      CausalConv1dUpdateArgs a = updArgs(chain);
      a.x = slice(a.x, 1, t, 1);
      a.out = slice(a.out, 1, t, 1);
      ssmjit::reference::causal_conv1d_update(a);
    }
    EXPECT_EQ(fused.out.bytes, chain.out.bytes);
    EXPECT_EQ(fused.state.bytes, chain.state.bytes);
    EXPECT_NE(fused.state.bytes, p0.state.bytes);
  }
}

TEST(ConvReference, UpdateWithoutCommitLeavesTheState) {
  const UpdProblem p0 = makeUpd(4, 5, 41, DType::BF16, DType::F16);
  UpdProblem committed = p0, verify = p0;
  ssmjit::reference::causal_conv1d_update(updArgs(committed, true));
  ssmjit::reference::causal_conv1d_update(updArgs(verify, false));
  EXPECT_EQ(verify.state.bytes, p0.state.bytes);
  EXPECT_EQ(verify.out.bytes, committed.out.bytes);  // the same outputs either way
  EXPECT_NE(committed.state.bytes, p0.state.bytes);
}

TEST(ConvReference, UpdatePadRowsAndUnusedSlotsAreUntouched) {
  const int64_t L = 3, D = 5, W = 4;
  const UpdProblem p0 = makeUpd(int(W), L, 43);
  UpdProblem r = p0;
  ssmjit::reference::causal_conv1d_update(updArgs(r));
  // out: row 2 (pad) still poisoned (NaN), every other element written and finite.
  const TensorView ov = r.out.view();
  int64_t poison = 0, written = 0;
  forEachElement(ov, [&](int64_t off, const std::vector<int64_t>& i) {
    const double x = loadElement(ov, off);
    if (i[0] == 2)
      poison += std::isnan(x);
    else
      written += std::isfinite(x);
  });
  EXPECT_EQ(poison, L * D);
  EXPECT_EQ(written, 3 * L * D);
  // Bytes outside rows 0, 1, 3 (pad row and layout gaps) are unchanged.
  std::vector<char> touched(r.out.bytes.size(), 0);
  forEachElement(ov, [&](int64_t off, const std::vector<int64_t>& i) {
    if (i[0] != 2) std::fill_n(touched.begin() + r.out.byteOffset + off * 4, 4, 1);
  });
  for (size_t k = 0; k < touched.size(); ++k)
    if (!touched[k]) ASSERT_EQ(r.out.bytes[k], p0.out.bytes[k]) << "byte " << k;
  // State: slots 1, 2, 5 are nobody's; 4, 0, 3 advanced.
  const std::vector<double> s0 = valuesOf(p0.state), s1 = valuesOf(r.state);
  const size_t slot = size_t(D * (W - 1));
  for (int64_t s = 0; s < 6; ++s) {
    const bool used = s == 4 || s == 0 || s == 3;
    const bool same = std::equal(s0.begin() + s * slot, s0.begin() + (s + 1) * slot, s1.begin() + s * slot);
    EXPECT_EQ(same, !used) << "slot " << s;
  }
}

// The update over L tokens from a state equals the forward over those tokens with that state as
// the initial state: the same out, and the final state is the committed state.
TEST(ConvReference, UpdateEqualsForwardWithStates) {
  const int64_t L = 6, D = 5, W = 4;
  const UpdProblem p0 = makeUpd(int(W), L, 47);
  UpdProblem u = p0;
  ssmjit::reference::causal_conv1d_update(updArgs(u));
  for (int64_t b : {0, 1, 3}) {
    HostTensor out = p0.out, st = p0.state;
    HostTensor slotIdx = hostTensor(DType::I32, {1}, {double(p0.slot[b])});
    CausalConv1dArgs a;
    a.x = slice(viewOrNone(p0.x), 0, b, 1);
    a.weight = viewOrNone(p0.w);
    a.bias = viewOrNone(p0.bias);
    a.out = slice(viewOrNone(out), 0, b, 1);
    a.layout = ConvLayout::ChannelLast;
    a.silu = true;
    a.initial_states = a.final_states = viewOrNone(st);
    a.initial_state_indices = a.final_state_indices = viewOrNone(slotIdx);
    ssmjit::reference::causal_conv1d(a);
    const TensorView uo = u.out.view(), fo = out.view();
    int64_t diffs = 0;
    forEachElement(uo, [&](int64_t off, const std::vector<int64_t>& i) {
      if (i[0] == b)
        diffs += std::memcmp(static_cast<char*>(uo.data) + off * 4, static_cast<char*>(fo.data) + off * 4, 4) != 0;
    });
    EXPECT_EQ(diffs, 0) << "row " << b;
    const std::vector<double> us = valuesOf(u.state), fs = valuesOf(st);
    const size_t slot = size_t(D * (W - 1)), s = size_t(p0.slot[b]);
    EXPECT_TRUE(std::equal(us.begin() + s * slot, us.begin() + (s + 1) * slot, fs.begin() + s * slot)) << "row " << b;
  }
}

TEST(ConvReference, UpdateBadSlotThrowsBeforeWriting) {
  const UpdProblem p0 = makeUpd(3, 2, 49);
  UpdProblem r = p0;
  storeElement(r.idx.view(), 3, 6);
  const std::string m = invalidArgMessage([&] { ssmjit::reference::causal_conv1d_update(updArgs(r)); });
  EXPECT_MENTIONS(m, "reference::causal_conv1d_update: state_indices[3] = 6", "expected -1 (pad) or a slot in [0, 6)");
  EXPECT_EQ(r.out.bytes, p0.out.bytes);
  EXPECT_EQ(r.state.bytes, p0.state.bytes);
}

}  // namespace

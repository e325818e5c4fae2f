// mamba2_decode_step on the GPU, in both modes (commit every step, and deferred commit with a
// ring): over many rounds with random accept patterns (none, all, mixed per row), pad rows and
// slot indices, against the float64 reference (y, both states, the caches, cached_tokens, the
// ring, arrivals left zero); the committed states against decoding the accepted tokens one at a
// time with the one-token kernels (causal_conv1d_update + selective_state_update), and y against
// running the drafts one at a time; a CUDA graph of one step replayed with new drafts and counts
// equals eager steps; bad slots, counts and ring counts are reported and change nothing of that
// row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "DecodeStepCheck.h"
#include "GpuTest.h"
#include "runtime/CudaGraph.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tools/problems/DecodeProblem.h"

using namespace ssmjit;
using namespace ssmjit::testing;

namespace {

// all() indices (DecodeProblem.h).
enum : size_t {
  kConv = 0,
  kSsm,
  kXbcCache,
  kDtCache,
  kCached,
  kArrivals,
  kIdx = 11,
  kAcc,
  kXbc,
  kDt,
  kZ,
  kY,
  kXbcRing,
  kDtRing,
  kRing
};

// Token t of a (B, L, ...) view as (B, 1, ...).
TensorView tokenView(TensorView v, int64_t t) {
  v.data = static_cast<char*>(v.data) + t * v.strides[1] * dtypeBytes(v.dtype);
  v.shape[1] = 1;
  return v;
}

int64_t at(const HostTensor& t, int64_t i) { return static_cast<int64_t>(loadElement(t.view(), i)); }

// The slot row b uses, or -1.
int64_t slotOf(const DecodeProblem& p, int64_t b) { return p.idx.defined ? at(p.idx, b) : b; }

void uploadStep(DecodeProblem& p, DeviceTensors& d) {
  auto all = p.all();
  for (size_t k : {size_t(kIdx), size_t(kAcc), size_t(kXbc), size_t(kDt), size_t(kZ), size_t(kY)})
    if (all[k]->defined) d.bufs[k].uploadBytes(all[k]->bytes.data(), all[k]->bytes.size());
}
void uploadAll(DecodeProblem& p, DeviceTensors& d) {
  auto all = p.all();
  for (size_t k = 0; k < all.size(); ++k)
    if (all[k]->defined) d.bufs[k].uploadBytes(all[k]->bytes.data(), all[k]->bytes.size());
}

// Runs `rounds` steps on the GPU and the reference from the same start; after each, compares
// everything the step may write, and that nothing else changed.
void runRounds(const DecodeCase& c, int rounds) {
  DecodeProblem p(c);
  DeviceTensors d(p.all());
  for (int r = 0; r < rounds; ++r) {
    SCOPED_TRACE("round " + std::to_string(r));
    if (r > 0) {
      p.nextRound(r % 3);  // 1: all accepted, 2: mixed, 0: none
      uploadStep(p, d);
    }
    const DecodeStepBefore before(p);
    reference::mamba2_decode_step(p.state(), p.weights(), p.args());
    mamba2_decode_step(deviceState(p, d), deviceWeights(p, d), deviceArgs(p, d));
    checkDeviceErrors();
    expectStepMatches(p, d, before);
    // Both continue from the reference's results, so every round compares one step from the
    // same inputs (errors do not compound over the rounds).
    uploadAll(p, d);
  }
}

class DecodeStepRounds : public ::testing::TestWithParam<DecodeCase> {
 protected:
  void SetUp() override { SSMJIT_REQUIRE_GPU(); }
};

TEST_P(DecodeStepRounds, MatchesReference) { runRounds(GetParam(), 7); }

std::vector<DecodeCase> roundCases() {
  std::vector<DecodeCase> out;
  uint64_t seed = 100;
  auto add = [&](DecodeCase c) {
    c.seed = seed++;
    out.push_back(c);
  };
  DecodeCase base;  // H 4, P 16, N 16, G 2, W 4, L 4
  auto addSixteenBit = [&](const DecodeCase& from) {  // 16-bit states and drafts, odd sizes
    for (DType st : {DType::BF16, DType::F16}) {
      DecodeCase c = from;
      c.ssmStateType = c.convStateType = st;
      c.xType = c.dtType = DType::BF16;
      c.P = 7, c.N = 13;
      add(c);
    }
  };
  add(base);
  for (DecodeStepParts parts : {DecodeStepParts::ReplayOnly, DecodeStepParts::VerifyOnly}) {
    DecodeCase c = base;
    c.parts = parts;
    add(c);
  }
  for (int W : {2, 3, 5, 8}) {
    DecodeCase c = base;
    c.W = W;
    add(c);
  }
  {  // odd sizes, three groups, one row, no extras
    DecodeCase c = base;
    c.H = 6, c.P = 24, c.N = 20, c.G = 3, c.batch = 1, c.slots = 2, c.L = 3, c.Lc = 5;
    c.convBias = c.D = c.z = c.dtBias = false;
    c.indices = false;
    c.slots = c.batch;
    add(c);
  }
  {  // Mamba-2 2.7B head shapes at a small batch, with the clamp
    DecodeCase c = base;
    c.H = 8, c.P = 64, c.N = 128, c.G = 1, c.batch = 5, c.slots = 7, c.L = 8, c.Lc = 8;
    c.clamp = true;
    add(c);
  }
  {  // a large batch (batch x H >= kDecodeLargeBatchHeads): half-row tiles, 3 programs a head of 96 rows
    DecodeCase c = base;
    c.H = 16, c.P = 96, c.N = 128, c.G = 2, c.batch = 64, c.slots = 66, c.L = 4, c.Lc = 4;
    add(c);
  }
  addSixteenBit(base);
  {  // L = 1, a deeper cache, no softplus
    DecodeCase c = base;
    c.L = 1, c.Lc = 6, c.softplus = false;
    add(c);
  }
  // Deferred commit: rings of random counts that fill and overflow over the rounds.
  DecodeCase ring = base;
  ring.R = 3;
  add(ring);
  for (DecodeStepParts parts : {DecodeStepParts::ReplayOnly, DecodeStepParts::VerifyOnly}) {
    DecodeCase c = ring;
    c.parts = parts;
    add(c);
  }
  for (int W : {2, 8}) {
    DecodeCase c = ring;
    c.W = W;
    add(c);
  }
  {  // R = 1: a ring of one token (most steps with accepts commit)
    DecodeCase c = ring;
    c.R = 1;
    add(c);
  }
  {  // odd sizes, three groups, no extras
    DecodeCase c = ring;
    c.H = 6, c.P = 24, c.N = 20, c.G = 3, c.L = 3, c.Lc = 5, c.R = 5;
    c.convBias = c.D = c.z = c.dtBias = false;
    add(c);
  }
  for (int64_t R : {8, 32}) {  // Mamba-2 2.7B heads: R + Lc + L = 24 tokens staged at once (past
    DecodeCase c = ring;      // 48 KiB of shared memory), 48 in chunks; the clamp
    c.H = 8, c.P = 64, c.N = 128, c.G = 1, c.batch = 5, c.slots = 7, c.L = 8, c.Lc = 8, c.R = R;
    c.clamp = true;
    add(c);
  }
  {  // the same heads in one chunk (R 4, L 4)
    DecodeCase c = ring;
    c.H = 8, c.P = 64, c.N = 128, c.G = 1, c.batch = 5, c.slots = 7, c.L = 4, c.Lc = 4, c.R = 4;
    add(c);
  }
  {  // a large batch: the half-row tiles
    DecodeCase c = ring;
    c.H = 16, c.P = 96, c.N = 128, c.G = 2, c.batch = 64, c.slots = 66, c.L = 4, c.Lc = 4, c.R = 4;
    add(c);
  }
  addSixteenBit(ring);
  return out;
}
INSTANTIATE_TEST_SUITE_P(Cases, DecodeStepRounds, ::testing::ValuesIn(roundCases()), ByName());

// ---- against the one-token kernels ------------------------------------------------------------

struct ULPStats {
  int64_t n = 0, exact = 0, nonFinite = 0;  // nonFinite: values not bitwise equal, one not finite
  double maxRel = 0;
};
void compareF32(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, ULPStats& st) {
  ASSERT_EQ(a.size(), b.size());
  const size_t n = a.size() / 4;
  std::vector<float> x(n), y(n);
  std::memcpy(x.data(), a.data(), n * 4);
  std::memcpy(y.data(), b.data(), n * 4);
  for (size_t i = 0; i < n; ++i) {
    ++st.n;
    if (std::memcmp(&x[i], &y[i], 4) == 0) {
      ++st.exact;
      continue;
    }
    if (!std::isfinite(x[i]) || !std::isfinite(y[i])) {
      ++st.nonFinite;
      continue;
    }
    st.maxRel = std::max(st.maxRel, std::fabs(double(x[i]) - y[i]) / std::max(1e-30, std::fabs(double(y[i]))));
  }
}

// One token through the one-token ops for the rows with slots in idx (int32, -1 skipped): the
// conv update of xBC row b (B, 1, Dc) into conv_state, then the SSM update from its output.
void oneTokenStep(const DecodeCase& c, const Mamba2MixerWeights& w, TensorView convState, TensorView ssmState,
                  const DeviceBuffer& idx, const TensorView& xbc1, const TensorView& dt1, const TensorView& z1,
                  DeviceBuffer& convOut, DeviceBuffer& y1) {
  const int64_t B = c.batch, Dc = c.H * c.P + 2 * c.G * c.N, HP = c.H * c.P, GN = c.G * c.N;
  CausalConv1dUpdateArgs cu;
  cu.conv_state = convState;
  cu.x = xbc1;
  cu.weight = w.conv_weight;
  cu.bias = w.conv_bias;
  cu.state_indices = TensorView::contiguous(idx.data(), DType::I32, {B});
  cu.out = TensorView::contiguous(convOut.data(), DType::F32, {B, 1, Dc});
  cu.silu = true;
  causal_conv1d_update(cu);
  SelectiveStateUpdateArgs su;
  su.state = ssmState;
  auto part = [&](int64_t off, int64_t d1, int64_t d2) {
    TensorView v = TensorView::contiguous(static_cast<float*>(convOut.data()) + off, DType::F32, {B, d1, d2});
    v.strides[0] = Dc;
    return v;
  };
  su.x = part(0, c.H, c.P);
  su.B = part(HP, c.G, c.N);
  su.C = part(HP + GN, c.G, c.N);
  su.dt = dt1;
  su.A = w.A;
  su.D = w.D;
  su.dt_bias = w.dt_bias;
  su.z = z1;
  su.state_batch_indices = cu.state_indices;
  su.out = TensorView::contiguous(y1.data(), DType::F32, {B, c.H, c.P});
  su.dt_softplus = w.dt_softplus;
  su.dt_min = w.dt_min;
  su.dt_max = w.dt_max;
  selective_state_update(su);
}

// Slot s's elements of a and b (downloads of the contiguous per-slot fp32 tensor h, whose bytes
// also hold a tail guard) compared where mask[s].
void compareSlotsF32(const HostTensor& h, const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                     const std::vector<char>& mask, ULPStats& st) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(int64_t(mask.size()), h.meta.shape[0]);
  const size_t per = size_t(h.meta.strides[0]) * 4, first = size_t(h.byteOffset);
  ASSERT_LE(first + mask.size() * per, a.size());
  for (size_t s = 0; s < mask.size(); ++s)
    if (mask[s])
      compareF32(std::vector<uint8_t>(a.begin() + first + s * per, a.begin() + first + (s + 1) * per),
                 std::vector<uint8_t>(b.begin() + first + s * per, b.begin() + first + (s + 1) * per), st);
}

// The step against the one-token kernels over rounds of accept patterns. With a ring (R > 0, the
// rings empty at the start) the step's states are compared where it writes them (the ring
// overflowed), and after the rounds a flush (ReplayOnly, nothing accepted) leaves every slot's.
void expectEqualsOneTokenKernels(int64_t R) {
  DecodeCase c;
  c.H = 6, c.P = 24, c.N = 20, c.G = 2, c.W = 4, c.L = 4, c.Lc = 4, c.batch = 4, c.slots = 6, c.R = R;
  DecodeProblem p(c);
  if (R > 0) std::fill(p.ringTokens.bytes.begin(), p.ringTokens.bytes.end(), 0);
  DeviceTensors fused(p.all()), seq(p.all());
  const int64_t B = c.batch, Dc = c.H * c.P + 2 * c.G * c.N;
  DeviceBuffer idx(size_t(B) * 4), convOut(size_t(B * Dc) * 4), y1(size_t(B * c.H * c.P) * 4), xg(size_t(B * Dc) * 4),
      dg(size_t(B * c.H) * 4);
  DeviceBuffer convScratch(fused.bufs[kConv].bytes()), ssmScratch(fused.bufs[kSsm].bytes());
  ULPStats stState, stY;
  int64_t ringCommits = 0;
  for (int r = 0; r < 8; ++r) {
    SCOPED_TRACE("round " + std::to_string(r));
    if (r > 0) {
      // The GPU's cached_tokens decide the counts (they equal the reference's: L after a verify).
      p.cachedTokens.bytes = fused.download(kCached);
      p.nextRound(r % 3 == 0 ? 2 : r % 3);
      uploadStep(p, fused);
      uploadStep(p, seq);
    }
    // 1. Replay by hand on `seq`: token t of every row with accepted > t, gathered from the fused
    // copy's cache (the drafts the last fused verify cached).
    const std::vector<uint8_t> xc = fused.download(kXbcCache), dc = fused.download(kDtCache);
    int64_t maxc = 0;
    for (int64_t b = 0; b < B; ++b)
      if (slotOf(p, b) >= 0) maxc = std::max(maxc, at(p.accepted, b));
    const Mamba2MixerWeights w = deviceWeights(p, seq);
    for (int64_t t = 0; t < maxc; ++t) {
      std::vector<int32_t> ids(size_t(B), -1);
      std::vector<float> xs(size_t(B * Dc), 0.f), ds(size_t(B * c.H), 0.f);
      for (int64_t b = 0; b < B; ++b) {
        const int64_t s = slotOf(p, b);
        if (s < 0 || at(p.accepted, b) <= t) continue;
        ids[size_t(b)] = int32_t(s);
        std::memcpy(&xs[size_t(b * Dc)], xc.data() + size_t((s * c.Lc + t) * Dc) * 4, size_t(Dc) * 4);
        std::memcpy(&ds[size_t(b * c.H)], dc.data() + size_t((s * c.Lc + t) * c.H) * 4, size_t(c.H) * 4);
      }
      idx.upload(ids);
      xg.upload(xs);
      dg.upload(ds);
      oneTokenStep(c, w, seq.view(kConv, p.convState), seq.view(kSsm, p.ssmState), idx,
                   TensorView::contiguous(xg.data(), DType::F32, {B, 1, Dc}),
                   TensorView::contiguous(dg.data(), DType::F32, {B, c.H}), {}, convOut, y1);
    }
    checkDeviceErrors();
    // 2. The fused step (the slots whose states it writes: all with accepted drafts, or with a
    // ring those that overflow it).
    std::vector<char> written(static_cast<size_t>(c.slots), R == 0);
    if (R > 0) {
      p.ringTokens.bytes = fused.download(kRing);
      for (int64_t b = 0; b < B; ++b)
        if (slotOf(p, b) >= 0 && at(p.ringTokens, slotOf(p, b)) + at(p.accepted, b) > R) {
          written[size_t(slotOf(p, b))] = 1;
          ++ringCommits;
        }
    }
    mamba2_decode_step(deviceState(p, fused), deviceWeights(p, fused), deviceArgs(p, fused));
    checkDeviceErrors();
    compareSlotsF32(p.convState, fused.download(kConv), seq.download(kConv), written, stState);
    compareSlotsF32(p.ssmState, fused.download(kSsm), seq.download(kSsm), written, stState);
    // 3. The drafts one at a time from a scratch copy of the corrected state: y per draft.
    std::vector<uint8_t> bytes = seq.download(kConv);
    convScratch.uploadBytes(bytes.data(), bytes.size());
    bytes = seq.download(kSsm);
    ssmScratch.uploadBytes(bytes.data(), bytes.size());
    TensorView cs = seq.view(kConv, p.convState), ss = seq.view(kSsm, p.ssmState);
    cs.data = convScratch.data();
    ss.data = ssmScratch.data();
    std::vector<int32_t> ids(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) ids[size_t(b)] = int32_t(slotOf(p, b));
    idx.upload(ids);
    const std::vector<uint8_t> yFused = fused.download(kY);
    for (int64_t t = 0; t < c.L; ++t) {
      y1.fill(kPoison);  // an element a one-token call leaves unwritten stays NaN, not last token's
      oneTokenStep(c, w, cs, ss, idx, tokenView(seq.view(kXbc, p.xbc), t), tokenSlice(seq.view(kDt, p.dt), t),
                   tokenSlice(seq.view(kZ, p.z), t), convOut, y1);
      const std::vector<float> yt = y1.download<float>();
      for (int64_t b = 0; b < B; ++b) {
        if (ids[size_t(b)] < 0) continue;
        std::vector<uint8_t> a(size_t(c.H * c.P) * 4), e(a.size());
        std::memcpy(a.data(), yFused.data() + size_t((b * c.L + t) * c.H * c.P) * 4, a.size());
        std::memcpy(e.data(), yt.data() + size_t(b * c.H * c.P), e.size());
        compareF32(a, e, stY);
      }
    }
    // The cache and counts continue on both copies from the fused one.
    for (size_t k : {size_t(kXbcCache), size_t(kDtCache), size_t(kCached)}) {
      bytes = fused.download(k);
      seq.bufs[k].uploadBytes(bytes.data(), bytes.size());
    }
  }
  if (R > 0) {  // the flush: every slot's states, the ring empty
    std::vector<uint8_t> zeros(fused.bufs[kAcc].bytes(), 0);
    fused.bufs[kAcc].uploadBytes(zeros.data(), zeros.size());
    Mamba2DecodeStepArgs a = deviceArgs(p, fused);
    a.parts = DecodeStepParts::ReplayOnly;
    a.xBC = a.dt = a.z = a.y = TensorView{};
    mamba2_decode_step(deviceState(p, fused), deviceWeights(p, fused), a);
    checkDeviceErrors();
    const std::vector<char> all(static_cast<size_t>(c.slots), 1);
    compareSlotsF32(p.convState, fused.download(kConv), seq.download(kConv), all, stState);
    compareSlotsF32(p.ssmState, fused.download(kSsm), seq.download(kSsm), all, stState);
    const std::vector<uint8_t> ring = fused.download(kRing);
    EXPECT_TRUE(std::all_of(ring.begin(), ring.end(), [](uint8_t v) { return v == 0; })) << "ring not emptied";
    EXPECT_GT(ringCommits, 0) << "no ring overflowed over the rounds";
  }
  // The bar: bitwise where the arithmetic order matches, else within 1e-6 relative.
  std::printf(
      "[decode-step R %lld] committed states: %lld of %lld values bitwise equal, max rel diff %.3g; "
      "y: %lld of %lld bitwise, max rel diff %.3g\n",
      (long long)R, (long long)stState.exact, (long long)stState.n, stState.maxRel, (long long)stY.exact,
      (long long)stY.n, stY.maxRel);
  EXPECT_GT(stState.n, 0);
  EXPECT_GT(stY.n, 0);
  // An element unwritten on one side (NaN poison) or a NaN result differs from a finite one.
  EXPECT_EQ(stState.nonFinite, 0) << "committed states: values not finite on one side";
  EXPECT_EQ(stY.nonFinite, 0) << "y: values not finite on one side";
  EXPECT_LE(stState.maxRel, 1e-6);
  EXPECT_LE(stY.maxRel, 1e-6);
}

TEST(DecodeStep, EqualsOneTokenKernels) {
  SSMJIT_REQUIRE_GPU();
  expectEqualsOneTokenKernels(0);
}
TEST(DecodeStep, DeferredCommitEqualsOneTokenKernels) {
  SSMJIT_REQUIRE_GPU();
  expectEqualsOneTokenKernels(3);
}

// ---- CUDA graph -------------------------------------------------------------------------------

void expectGraphReplayEqualsEagerSteps(int64_t R) {
  DecodeCase c;
  c.H = 8, c.P = 64, c.N = 128, c.G = 1, c.L = 4, c.Lc = 4, c.batch = 3, c.slots = 5, c.R = R;
  DecodeProblem p(c);
  DeviceTensors eager(p.all()), graphed(p.all());
  OwnedStream stream;
  checkDeviceErrors(stream);  // the device status record is allocated on first use: not in a capture
  CudaGraph g = CudaGraph::capture(stream, [&](CUstream s) {
    mamba2_decode_step(deviceState(p, graphed), deviceWeights(p, graphed), deviceArgs(p, graphed), s);
  });
  for (int r = 0; r < 6; ++r) {
    if (r > 0) {
      p.cachedTokens.bytes = eager.download(kCached);
      p.nextRound(2);
      uploadStep(p, eager);
      uploadStep(p, graphed);
    }
    mamba2_decode_step(deviceState(p, eager), deviceWeights(p, eager), deviceArgs(p, eager), stream);
    g.launch(stream);
    stream.synchronize();
    checkDeviceErrors(stream);
    for (size_t k : {size_t(kConv), size_t(kSsm), size_t(kXbcCache), size_t(kDtCache), size_t(kCached), size_t(kY)})
      EXPECT_EQ(eager.download(k), graphed.download(k)) << "tensor " << k << " round " << r;
    if (R > 0)
      for (size_t k : {size_t(kXbcRing), size_t(kDtRing), size_t(kRing)})
        EXPECT_EQ(eager.download(k), graphed.download(k)) << "tensor " << k << " round " << r;
  }
}

TEST(DecodeStep, GraphReplayEqualsEagerSteps) {
  SSMJIT_REQUIRE_GPU();
  expectGraphReplayEqualsEagerSteps(0);
}
// The ring's count lives on the device: one captured step fills, overflows and empties rings.
TEST(DecodeStep, DeferredCommitGraphReplayEqualsEagerSteps) {
  SSMJIT_REQUIRE_GPU();
  expectGraphReplayEqualsEagerSteps(2);
}

// ---- bad input --------------------------------------------------------------------------------

// A bad slot, count or ring count in one row: reported; that row is skipped as if it were a pad
// (its slot, cache, ring and y untouched) and every other row is done, as the reference does with
// the row padded.
enum class Bad { Slot, Count, Ring };
void expectRowSkipped(int64_t badRow, Bad what) {
  DecodeCase c;
  c.batch = 3, c.slots = 5;
  if (what == Bad::Ring) c.R = 3;
  DecodeProblem p(c);
  ASSERT_GE(slotOf(p, badRow), 0) << "the bad row must not be a pad already";
  // A bad ring count (R is 3) is in the expected problem too: there the row is a pad, its slot unread.
  if (what == Bad::Ring) storeElement(p.ringTokens.view(), slotOf(p, badRow), 4.0);
  DecodeProblem expected = p;
  storeElement(expected.idx.view(), badRow, -1.0);
  const std::vector<char> rows = expected.rowsVerified();
  ASSERT_TRUE(std::count(rows.begin(), rows.end(), 1) > 0) << "no good row left to check";
  const DecodeStepBefore before(expected);
  reference::mamba2_decode_step(expected.state(), expected.weights(), expected.args());

  if (what == Bad::Slot)
    storeElement(p.idx.view(), badRow, 9.0);  // slots are 5
  else if (what == Bad::Count)
    storeElement(p.accepted.view(), badRow, double(at(p.cachedTokens, slotOf(p, badRow)) + 1));
  DeviceTensors d(p.all());
  checkDeviceErrors();
  mamba2_decode_step(deviceState(p, d), deviceWeights(p, d), deviceArgs(p, d));
  try {
    checkDeviceErrors();
    ADD_FAILURE() << "no device error reported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::InvalidArgument);
    const std::string row = std::to_string(badRow);
    const std::string want = what == Bad::Slot    ? "state_indices[" + row + "]"
                             : what == Bad::Count ? "num_accepted[" + row + "]"
                                                  : "ring_tokens of row " + row + "'s slot";
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
  expectStepMatches(expected, d, before);
}

TEST(DecodeStep, BadAcceptedCountIsReportedAndSkipped) {
  SSMJIT_REQUIRE_GPU();
  expectRowSkipped(2, Bad::Count);
}
TEST(DecodeStep, BadRingCountIsReportedAndSkipped) {
  SSMJIT_REQUIRE_GPU();
  expectRowSkipped(2, Bad::Ring);
}
TEST(DecodeStep, BadSlotIsReportedAndSkipped) {
  SSMJIT_REQUIRE_GPU();
  expectRowSkipped(0, Bad::Slot);
}

TEST(DecodeStep, BadShapeThrowsBeforeLaunch) {
  SSMJIT_REQUIRE_GPU();
  DecodeCase c;
  DecodeProblem p(c);
  DeviceTensors d(p.all());
  Mamba2DecodeState s = deviceState(p, d);
  s.xbc_cache.shape[2] -= 1;  // the cache's channels do not match the conv state's
  const auto before = d.download(kSsm);
  EXPECT_THROW(mamba2_decode_step(s, deviceWeights(p, d), deviceArgs(p, d)), Error);
  checkDeviceErrors();
  EXPECT_EQ(before, d.download(kSsm));
}

}  // namespace

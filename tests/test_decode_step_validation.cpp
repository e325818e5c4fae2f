// mamba2_decode_step on the CPU: the argument check (every bad input gets an InvalidArgument
// error naming the argument, the expected and the actual value, before anything is launched:
// the tensors are fake device pointers, never dereferenced), and self-tests of the float64
// reference the GPU tests compare against (it equals the one-token references applied token by
// token; bad slots and counts throw before writing; the parts and the cache bookkeeping).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "runtime/ops/Mamba2DecodeStepCheck.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tests/support/DecodeProblem.h"

using namespace ssmjit;
using namespace ssmjit::testing;

namespace {

void* fake(int k) { return reinterpret_cast<void*>(uintptr_t{0x10000} + uintptr_t(k) * 0x1000000); }
TensorView cuda(int k, DType t, std::initializer_list<int64_t> shape) { return TensorView::contiguous(fake(k), t, shape); }

// A valid call: H 4, P 8, N 16, G 2 (Dc 96), W 4, batch 3, L 4, cache depth 6, 5 slots.
struct Call {
  Mamba2DecodeState s;
  Mamba2MixerWeights w;
  Mamba2DecodeStepArgs a;
};
Call valid() {
  const int64_t H = 4, P = 8, N = 16, Dc = 96, W = 4, B = 3, L = 4, Lc = 6, S = 5;
  Call c;
  c.s.conv_state = cuda(1, DType::BF16, {S, Dc, W - 1});
  c.s.ssm_state = cuda(2, DType::F32, {S, H, P, N});
  c.s.xbc_cache = cuda(3, DType::BF16, {S, Lc, Dc});
  c.s.dt_cache = cuda(4, DType::BF16, {S, Lc, H});
  c.s.cached_tokens = cuda(5, DType::I32, {S});
  c.s.arrivals = cuda(6, DType::I32, {S, 2});
  c.s.scratch = cuda(18, DType::F32, {S, 2 * Lc, 2 * 2 * N + H});
  c.w.conv_weight = cuda(7, DType::F32, {Dc, W});
  c.w.conv_bias = cuda(8, DType::BF16, {Dc});
  c.w.A = cuda(9, DType::F32, {H});
  c.w.D = cuda(10, DType::F32, {H});
  c.w.dt_bias = cuda(11, DType::F32, {H});
  c.a.state_indices = cuda(12, DType::I64, {B});
  c.a.num_accepted = cuda(13, DType::I32, {B});
  c.a.xBC = cuda(14, DType::BF16, {B, L, Dc});
  c.a.dt = cuda(15, DType::BF16, {B, L, H});
  c.a.z = cuda(16, DType::BF16, {B, L, H, P});
  c.a.y = cuda(17, DType::BF16, {B, L, H, P});
  return c;
}

// The op throws InvalidArgument whose message holds every one of `parts`.
void expectRejected(const Call& c, std::initializer_list<const char*> parts) {
  try {
    mamba2_decode_step(c.s, c.w, c.a);
    ADD_FAILURE() << "accepted a bad call (expected a message with " << *parts.begin() << ")";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::InvalidArgument) << e.what();
    for (const char* p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "missing '" << p << "' in: " << e.what();
  }
}

TEST(DecodeStepCheck, ValidCallPasses) {
  const Call c = valid();
  const detail::DecodeStepDims d = detail::checkDecodeStepArgs(c.s, c.w, c.a, DeviceKind::CUDA, "op");
  EXPECT_EQ(d.G, 2);
  EXPECT_EQ(d.W, 4);
  EXPECT_EQ(d.L, 4);
  EXPECT_EQ(d.Lc, 6);
  EXPECT_EQ(d.batch, 3);
  EXPECT_TRUE(d.replay && d.verify);
}

TEST(DecodeStepCheck, BadArgumentsAreNamed) {
  const std::vector<std::pair<std::function<void(Call&)>, std::vector<const char*>>> bad = {
      {[](Call& c) { c.s.ssm_state = cuda(2, DType::F32, {5, 4, 8}); }, {"ssm_state", "rank", "3"}},
      {[](Call& c) { c.s.conv_state = cuda(1, DType::BF16, {5, 97, 3}); }, {"conv_state", "97", "H*P + 2*G*N"}},
      {[](Call& c) {  // G = 3 groups do not divide H = 4
         c.s.conv_state = cuda(1, DType::BF16, {5, 32 + 96, 3});
         c.s.xbc_cache = cuda(3, DType::BF16, {5, 6, 128});
       }, {"conv_state", "G = 3", "divide H = 4"}},
      {[](Call& c) { c.s.conv_state = cuda(1, DType::BF16, {5, 96, 8}); }, {"conv_state", "width - 1 = 8", "2 <= W <= 8"}},
      {[](Call& c) { c.s.conv_state = cuda(1, DType::I32, {5, 96, 3}); }, {"conv_state", "int32"}},
      {[](Call& c) { c.s.xbc_cache = cuda(3, DType::BF16, {5, 6, 95}); }, {"xbc_cache", "95", "96"}},
      {[](Call& c) { c.s.xbc_cache = cuda(3, DType::F32, {5, 6, 96}); }, {"xbc_cache", "float32", "bfloat16", "exactly"}},
      {[](Call& c) { c.s.dt_cache = cuda(4, DType::F32, {5, 6, 4}); }, {"dt_cache", "float32", "bfloat16"}},
      {[](Call& c) { c.s.dt_cache = cuda(4, DType::BF16, {5, 6, 3}); }, {"dt_cache", "3", "4"}},
      {[](Call& c) { c.s.cached_tokens = cuda(5, DType::I64, {5}); }, {"cached_tokens", "int64", "int32"}},
      {[](Call& c) { c.s.arrivals = cuda(6, DType::I32, {5}); }, {"arrivals", "rank"}},
      {[](Call& c) { c.s.arrivals.strides[0] = 3; }, {"arrivals", "(3, 1)", "(2, 1)"}},
      {[](Call& c) { c.s.scratch = cuda(18, DType::F32, {5, 6, 36}); }, {"scratch", "6", "12"}},
      {[](Call& c) { c.s.scratch = cuda(18, DType::BF16, {5, 12, 68}); }, {"scratch", "bfloat16", "float32"}},
      {[](Call& c) { c.s.cached_tokens = {}; }, {"cached_tokens"}},
      {[](Call& c) {
         c.a.xBC = cuda(14, DType::BF16, {3, 7, 96});
         c.a.dt = cuda(15, DType::BF16, {3, 7, 4});
       }, {"xBC", "7 drafts", "1 <= L <= 6", "cache depth"}},
      {[](Call& c) { c.a.dt = cuda(15, DType::BF16, {3, 4, 5}); }, {"dt", "5", "4"}},
      {[](Call& c) { c.a.y = cuda(17, DType::BF16, {3, 4, 4, 9}); }, {"y", "9", "8"}},
      {[](Call& c) { c.a.y = {}; }, {"y"}},
      {[](Call& c) { c.a.y.data = c.a.xBC.data; c.a.y.dtype = DType::BF16; }, {"y", "same as an input"}},
      {[](Call& c) { c.a.num_accepted = {}; }, {"num_accepted"}},
      {[](Call& c) { c.a.num_accepted = cuda(13, DType::I32, {2}); }, {"num_accepted", "2", "3"}},
      {[](Call& c) { c.a.num_accepted = cuda(13, DType::F32, {3}); }, {"num_accepted", "float32"}},
      {[](Call& c) { c.a.parts = DecodeStepParts::ReplayOnly; }, {"xBC", "ReplayOnly"}},
      {[](Call& c) { c.a.parts = DecodeStepParts::VerifyOnly; }, {"num_accepted", "VerifyOnly"}},
      {[](Call& c) { c.a.parts = static_cast<DecodeStepParts>(7); }, {"parts", "7"}},
      {[](Call& c) { c.a.state_indices = {}; }, {"slots", "batch = 3", "state_indices"}},
      {[](Call& c) { c.a.state_indices = cuda(12, DType::I32, {4}); }, {"state_indices", "4", "3"}},
      {[](Call& c) { c.a.xBC.strides[0] = 0; }, {"xBC"}},
      {[](Call& c) { c.a.xBC.data = static_cast<char*>(c.a.xBC.data) + 1; }, {"xBC"}},
      {[](Call& c) { c.w.conv_weight = cuda(7, DType::F32, {96, 3}); }, {"conv_weight", "3", "4"}},
      {[](Call& c) { c.w.conv_weight = cuda(7, DType::F16, {96, 4}); }, {"conv_weight", "float16"}},
      {[](Call& c) { c.w.A = cuda(9, DType::BF16, {4}); }, {"A", "bfloat16", "float32"}},
      {[](Call& c) { c.w.A = {}; }, {"A"}},
      {[](Call& c) { c.w.dt_bias = cuda(11, DType::F32, {5}); }, {"dt_bias", "5", "4"}},
      {[](Call& c) { c.w.dt_min = NAN; }, {"dt_min"}},
      {[](Call& c) { c.a.z.deviceId = 1; }, {"z"}},
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    Call c = valid();
    bad[i].first(c);
    const std::vector<const char*>& parts = bad[i].second;
    try {
      mamba2_decode_step(c.s, c.w, c.a);
      ADD_FAILURE() << "accepted a bad call (expected a message naming " << parts[0] << ")";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::InvalidArgument) << e.what();
      for (const char* part : parts)
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "missing '" << part << "' in: " << e.what();
    }
  }
}

// ---- the reference ----------------------------------------------------------------------------

int64_t at(const HostTensor& t, std::initializer_list<int64_t> idx) {
  int64_t off = 0, d = 0;
  for (int64_t v : idx) off += v * t.meta.strides[d++];
  return static_cast<int64_t>(loadElement(t.view(), off));
}
double val(const HostTensor& t, std::initializer_list<int64_t> idx) {
  int64_t off = 0, d = 0;
  for (int64_t v : idx) off += v * t.meta.strides[d++];
  return loadElement(t.view(), off);
}

// One token for slot `slot` of q through the one-token references: causal_conv1d_update (commit)
// on the pre-conv values xin (Dc), then selective_state_update (Mamba-2 form) on its output with
// raw dt per head; returns y (H*P).
std::vector<double> oneToken(DecodeProblem& q, int64_t slot, const std::vector<float>& xin,
                             const std::vector<float>& dtRaw, const std::vector<float>* z) {
  const DecodeCase& c = q.c;
  const int64_t Dc = c.H * c.P + 2 * c.G * c.N, HP = c.H * c.P, GN = c.G * c.N;
  std::vector<float> xs = xin, out(static_cast<size_t>(Dc)), dts = dtRaw, zs, ys(static_cast<size_t>(HP));
  int32_t idx = int32_t(slot);
  CausalConv1dUpdateArgs cu;
  cu.conv_state = q.convState.view();
  cu.x = TensorView::contiguous(xs.data(), DType::F32, {1, 1, Dc}, DeviceKind::CPU);
  cu.out = TensorView::contiguous(out.data(), DType::F32, {1, 1, Dc}, DeviceKind::CPU);
  cu.weight = q.convW.view();
  if (q.convB.defined) cu.bias = q.convB.view();
  cu.state_indices = TensorView::contiguous(&idx, DType::I32, {1}, DeviceKind::CPU);
  cu.silu = true;
  reference::causal_conv1d_update(cu);
  SelectiveStateUpdateArgs su;
  su.state = q.ssmState.view();
  auto part = [&](int64_t off, int64_t d1, int64_t d2) {
    return TensorView::contiguous(out.data() + off, DType::F32, {1, d1, d2}, DeviceKind::CPU);
  };
  su.x = part(0, c.H, c.P);
  su.B = part(HP, c.G, c.N);
  su.C = part(HP + GN, c.G, c.N);
  su.dt = TensorView::contiguous(dts.data(), DType::F32, {1, c.H}, DeviceKind::CPU);
  su.A = q.A.view();
  if (q.D.defined) su.D = q.D.view();
  if (q.dtBias.defined) su.dt_bias = q.dtBias.view();
  if (z) {
    zs = *z;
    su.z = TensorView::contiguous(zs.data(), DType::F32, {1, c.H, c.P}, DeviceKind::CPU);
  }
  su.out = TensorView::contiguous(ys.data(), DType::F32, {1, c.H, c.P}, DeviceKind::CPU);
  su.state_batch_indices = cu.state_indices;
  su.dt_softplus = c.softplus;
  reference::selective_state_update(su);
  return std::vector<double>(ys.begin(), ys.end());
}

// The reference step equals the one-token references applied token by token: the accepted
// cached drafts (commit), then the new drafts on a scratch copy (y), over several rounds of
// random accept patterns (none, all, mixed) with a pad row and permuted slots.
TEST(DecodeStepReference, EqualsOneTokenReferences) {
  DecodeCase c;
  c.H = 4, c.P = 5, c.N = 6, c.G = 2, c.W = 3, c.batch = 3, c.slots = 4, c.L = 3, c.Lc = 3;
  DecodeProblem p(c);
  const int64_t Dc = c.H * c.P + 2 * c.G * c.N, HP = c.H * c.P;
  int64_t replayed = 0;
  for (int r = 0; r < 6; ++r) {
    SCOPED_TRACE("round " + std::to_string(r));
    if (r > 0) p.nextRound(r % 3);
    DecodeProblem q = p;  // by hand, from the same start
    reference::mamba2_decode_step(p.state(), p.weights(), p.args());
    for (int64_t b = 0; b < c.batch; ++b) {
      const int64_t s = at(p.idx, {b});
      if (s < 0) continue;
      const int64_t n = at(p.accepted, {b});
      replayed += n;
      for (int64_t t = 0; t < n; ++t) {
        std::vector<float> xin(static_cast<size_t>(Dc)), dtr(static_cast<size_t>(c.H));
        for (int64_t ch = 0; ch < Dc; ++ch) xin[size_t(ch)] = float(val(q.xbcCache, {s, t, ch}));
        for (int64_t h = 0; h < c.H; ++h) dtr[size_t(h)] = float(val(q.dtCache, {s, t, h}));
        oneToken(q, s, xin, dtr, nullptr);
      }
      // Committed states (q rounds to fp32 after every token, p once: a few ulps apart).
      for (int64_t i = 0; i < Dc * (c.W - 1); ++i)
        EXPECT_NEAR(val(q.convState, {s, i / (c.W - 1), i % (c.W - 1)}), val(p.convState, {s, i / (c.W - 1), i % (c.W - 1)}), 1e-6);
      for (int64_t i = 0; i < HP * c.N; ++i) {
        const double e = val(q.ssmState, {s, i / (c.P * c.N), (i / c.N) % c.P, i % c.N});
        EXPECT_NEAR(val(p.ssmState, {s, i / (c.P * c.N), (i / c.N) % c.P, i % c.N}), e, 1e-5 * (1 + std::fabs(e)));
      }
      // y of each draft from the corrected state.
      for (int64_t t = 0; t < c.L; ++t) {
        std::vector<float> xin(static_cast<size_t>(Dc)), dtr(static_cast<size_t>(c.H)), zv(static_cast<size_t>(HP));
        for (int64_t ch = 0; ch < Dc; ++ch) xin[size_t(ch)] = float(val(q.xbc, {b, t, ch}));
        for (int64_t h = 0; h < c.H; ++h) dtr[size_t(h)] = float(val(q.dt, {b, t, h}));
        for (int64_t i = 0; i < HP; ++i) zv[size_t(i)] = float(val(q.z, {b, t, i / c.P, i % c.P}));
        const std::vector<double> y = oneToken(q, s, xin, dtr, &zv);
        for (int64_t i = 0; i < HP; ++i)
          EXPECT_NEAR(val(p.y, {b, t, i / c.P, i % c.P}), y[size_t(i)], 1e-5 * (1 + std::fabs(y[size_t(i)])));
      }
      // The drafts are cached exactly; the count is L.
      EXPECT_EQ(at(p.cachedTokens, {s}), c.L);
      for (int64_t t = 0; t < c.L; ++t)
        for (int64_t ch = 0; ch < Dc; ++ch) EXPECT_EQ(val(p.xbcCache, {s, t, ch}), val(p.xbc, {b, t, ch}));
    }
  }
  EXPECT_GT(replayed, 0);  // the rounds replayed something
}

// A bad slot or count throws before anything is written.
TEST(DecodeStepReference, BadSlotOrCountThrowsBeforeWriting) {
  for (bool badSlot : {true, false}) {
    DecodeProblem p(DecodeCase{});
    if (badSlot) storeElement(p.idx.view(), 2, 9.0);
    else storeElement(p.accepted.view(), 2, double(at(p.cachedTokens, {at(p.idx, {2})}) + 1));
    const DecodeProblem before = p;
    try {
      reference::mamba2_decode_step(p.state(), p.weights(), p.args());
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find(badSlot ? "state_indices[2]" : "num_accepted[2]"), std::string::npos) << e.what();
    }
    EXPECT_EQ(p.ssmState.bytes, before.ssmState.bytes);
    EXPECT_EQ(p.convState.bytes, before.convState.bytes);
    EXPECT_EQ(p.y.bytes, before.y.bytes);
    EXPECT_EQ(p.cachedTokens.bytes, before.cachedTokens.bytes);
  }
}

// ReplayOnly commits and empties the cache (a second replay of c > 0 is refused); VerifyOnly
// leaves both states alone and fills the cache.
TEST(DecodeStepReference, PartsKeepTheCacheBookkeeping) {
  DecodeCase c;
  c.parts = DecodeStepParts::ReplayOnly;
  DecodeProblem p(c);
  for (int64_t b = 0; b < c.batch; ++b) {  // replay everything cached
    const int64_t s = at(p.idx, {b});
    storeElement(p.accepted.view(), b, s < 0 ? 0.0 : double(at(p.cachedTokens, {s})));
  }
  reference::mamba2_decode_step(p.state(), p.weights(), p.args());
  for (int64_t b = 0; b < c.batch; ++b)
    if (at(p.idx, {b}) >= 0) EXPECT_EQ(at(p.cachedTokens, {at(p.idx, {b})}), 0);
  storeElement(p.accepted.view(), 0, 1.0);
  EXPECT_THROW(reference::mamba2_decode_step(p.state(), p.weights(), p.args()), Error);

  DecodeCase v;
  v.parts = DecodeStepParts::VerifyOnly;
  DecodeProblem q(v);
  const DecodeProblem before = q;
  reference::mamba2_decode_step(q.state(), q.weights(), q.args());
  EXPECT_EQ(q.ssmState.bytes, before.ssmState.bytes);
  EXPECT_EQ(q.convState.bytes, before.convState.bytes);
  for (int64_t b = 0; b < v.batch; ++b)
    if (at(q.idx, {b}) >= 0) EXPECT_EQ(at(q.cachedTokens, {at(q.idx, {b})}), v.L);
  EXPECT_NE(q.y.bytes, before.y.bytes);
}

// Each optional input changes y: the reference does not ignore it.
TEST(DecodeStepReference, OptionalInputsMatter) {
  DecodeCase c;
  DecodeProblem base(c);
  DecodeProblem ref = base;
  reference::mamba2_decode_step(ref.state(), ref.weights(), ref.args());
  for (int k : {0, 1, 2, 3}) {
    DecodeProblem p = base;
    HostTensor& t = k == 0 ? p.convB : k == 1 ? p.D : k == 2 ? p.dtBias : p.z;
    storeElement(t.view(), 0, loadElement(t.view(), 0) + 0.5);
    reference::mamba2_decode_step(p.state(), p.weights(), p.args());
    EXPECT_NE(p.y.bytes, ref.y.bytes) << "input " << k << " ignored";
  }
}

}  // namespace

// mamba2_decode_step on the CPU: the argument check (every bad input gets an InvalidArgument
// error naming the argument, the expected and the actual value, before anything is launched:
// the tensors are fake device pointers, never dereferenced), and self-tests of the float64
// reference the GPU tests compare against (it equals the one-token references applied token by
// token; bad slots and counts throw before writing; the parts and the cache bookkeeping).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "runtime/ops/Mamba2DecodeStepCheck.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tests/support/FakeDecodeStepCall.h"
#include "tests/support/FakeTensors.h"
#include "tests/support/HostTensors.h"
#include "tools/problems/DecodeProblem.h"

using namespace ssmjit;
using namespace ssmjit::testing;

namespace {

// A valid call: H 4, P 8, N 16, G 2 (Dc 96), W 4, batch 3, L 4, cache depth 6, 5 slots.
using Call = FakeDecodeStepCall;
Call valid() { return fakeDecodeStepCall({}); }

// The call with a ring of depth 3 (deferred commit).
Call withRing() {
  Call c = valid();
  c.s.xbc_ring = fakeView(18, DType::BF16, {5, 3, 96});
  c.s.dt_ring = fakeView(19, DType::BF16, {5, 3, 4});
  c.s.ring_tokens = fakeView(20, DType::I32, {5});
  return c;
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

  Call b = valid();  // the weights may broadcast (read once per program)
  b.w.conv_weight.strides[0] = 0;
  b.w.A.strides[0] = b.w.D.strides[0] = b.w.dt_bias.strides[0] = b.w.conv_bias.strides[0] = 0;
  EXPECT_NO_THROW(detail::checkDecodeStepArgs(b.s, b.w, b.a, DeviceKind::CUDA, "op"));

  Call m = valid();  // L = kMaxTokens with a deeper cache; ReplayOnly takes the batch from num_accepted
  m.s.xbc_cache = fakeView(3, DType::BF16, {5, 40, 96});
  m.s.dt_cache = fakeView(4, DType::BF16, {5, 40, 4});
  m.a.xBC = fakeView(14, DType::BF16, {3, kMaxTokens, 96});
  m.a.dt = fakeView(15, DType::BF16, {3, kMaxTokens, 4});
  m.a.z = fakeView(16, DType::BF16, {3, kMaxTokens, 4, 8});
  m.a.y = fakeView(17, DType::BF16, {3, kMaxTokens, 4, 8});
  EXPECT_EQ(detail::checkDecodeStepArgs(m.s, m.w, m.a, DeviceKind::CUDA, "op").L, kMaxTokens);
  m.a.xBC = m.a.dt = m.a.z = m.a.y = TensorView{};
  m.a.parts = DecodeStepParts::ReplayOnly;
  const detail::DecodeStepDims r = detail::checkDecodeStepArgs(m.s, m.w, m.a, DeviceKind::CUDA, "op");
  EXPECT_EQ(r.batch, 3);
  EXPECT_TRUE(r.replay && !r.verify);
  EXPECT_FALSE(r.deferred());

  const Call g = withRing();
  const detail::DecodeStepDims dg = detail::checkDecodeStepArgs(g.s, g.w, g.a, DeviceKind::CUDA, "op");
  EXPECT_EQ(dg.R, 3);
  EXPECT_TRUE(dg.deferred());
}

// Each edit of a valid call (from `make`) is refused with InvalidArgument, its message holding
// every listed part (the argument first).
void expectNamed(const std::vector<std::pair<std::function<void(Call&)>, std::vector<const char*>>>& bad,
                 Call (*make)()) {
  for (size_t i = 0; i < bad.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    Call c = make();
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

TEST(DecodeStepCheck, BadArgumentsAreNamed) {
  const std::vector<std::pair<std::function<void(Call&)>, std::vector<const char*>>> bad = {
      {[](Call& c) {
         c.s.ssm_state = fakeView(2, DType::F32, {5, 4, 8});
       },
       {"ssm_state", "rank 3", "expected rank 4"}},
      {[](Call& c) {
         c.s.ssm_state = fakeView(2, DType::F32, {5, 0, 8, 16});
       },
       {"ssm_state", "(5, 0, 8, 16)", ">= 1"}},
      {[](Call& c) { c.s.ssm_state.strides[3] = -1; }, {"ssm_state", "stride -1", "stride >= 0"}},
      {[](Call& c) { c.s.ssm_state.strides[0] = 0; }, {"ssm_state", "stride 0", "nonzero stride"}},
      {[](Call& c) {
         c.s.conv_state = fakeView(1, DType::BF16, {5, 97, 3});
       },
       {"conv_state", "97", "H*P + 2*G*N"}},
      {[](Call& c) {  // G = 3 groups do not divide H = 4
         c.s.conv_state = fakeView(1, DType::BF16, {5, 32 + 96, 3});
         c.s.xbc_cache = fakeView(3, DType::BF16, {5, 6, 128});
       },
       {"conv_state", "G = 3", "divide H = 4"}},
      {[](Call& c) {
         c.s.conv_state = fakeView(1, DType::BF16, {5, 96, 8});
       },
       {"conv_state", "width - 1 = 8", "2 <= W <= 8"}},
      {[](Call& c) {
         c.s.conv_state = fakeView(1, DType::I32, {5, 96, 3});
       },
       {"conv_state", "int32", "float32, bfloat16 or float16"}},
      {[](Call& c) {
         c.s.xbc_cache = fakeView(3, DType::BF16, {5, 6, 95});
       },
       {"xbc_cache", "95", "96"}},
      {[](Call& c) {
         c.s.xbc_cache = fakeView(3, DType::F32, {5, 6, 96});
       },
       {"xbc_cache", "float32", "bfloat16", "exactly"}},
      {[](Call& c) {
         c.s.dt_cache = fakeView(4, DType::F32, {5, 6, 4});
       },
       {"dt_cache", "float32", "bfloat16"}},
      {[](Call& c) {
         c.s.dt_cache = fakeView(4, DType::BF16, {5, 6, 3});
       },
       {"dt_cache", "3", "4"}},
      {[](Call& c) { c.s.cached_tokens = fakeView(5, DType::I64, {5}); }, {"cached_tokens", "int64", "int32"}},
      {[](Call& c) {
         c.s.arrivals = fakeView(6, DType::I32, {5, 2});
       },
       {"arrivals", "rank 2", "expected rank 1"}},
      {[](Call& c) { c.s.arrivals = fakeView(6, DType::I32, {4}); }, {"arrivals", "is 4", "expected 5"}},
      {[](Call& c) { c.s.arrivals.strides[0] = 2; }, {"arrivals", "stride 2", "expected 1"}},
      {[](Call& c) { c.s.arrivals = fakeView(6, DType::I64, {5}); }, {"arrivals", "int64", "int32"}},
      {[](Call& c) { c.s.cached_tokens = {}; }, {"cached_tokens", "required"}},
      {[](Call& c) {  // L > kMaxTokens although the cache is deep enough
         c.s.xbc_cache = fakeView(3, DType::BF16, {5, 40, 96});
         c.s.dt_cache = fakeView(4, DType::BF16, {5, 40, 4});
         c.a.xBC = fakeView(14, DType::BF16, {3, 33, 96});
         c.a.dt = fakeView(15, DType::BF16, {3, 33, 4});
         c.a.z = fakeView(16, DType::BF16, {3, 33, 4, 8});
         c.a.y = fakeView(17, DType::BF16, {3, 33, 4, 8});
       },
       {"xBC", "33 drafts", "1 <= L <= 32", "kMaxTokens = 32"}},
      {[](Call& c) {
         c.a.xBC = fakeView(14, DType::BF16, {3, 7, 96});
         c.a.dt = fakeView(15, DType::BF16, {3, 7, 4});
       },
       {"xBC", "7 drafts", "1 <= L <= 6", "cache depth"}},
      {[](Call& c) {
         c.a.dt = fakeView(15, DType::BF16, {3, 4, 5});
       },
       {"dt", "5", "4"}},
      {[](Call& c) {
         c.a.y = fakeView(17, DType::BF16, {3, 4, 4, 9});
       },
       {"y", "9", "8"}},
      {[](Call& c) { c.a.y = {}; }, {"y is required"}},
      {[](Call& c) { c.a.y.data = c.a.xBC.data; }, {"y", "same as an input", "its own memory"}},
      {[](Call& c) { c.a.y.data = c.a.z.data; }, {"y", "same as an input"}},
      {[](Call& c) { c.a.num_accepted = {}; }, {"num_accepted is required"}},
      {[](Call& c) { c.a.num_accepted = fakeView(13, DType::I32, {2}); }, {"num_accepted", "2", "3"}},
      {[](Call& c) { c.a.num_accepted = fakeView(13, DType::F32, {3}); },
       {"num_accepted", "float32", "int32 or int64"}},
      {[](Call& c) { c.a.parts = DecodeStepParts::ReplayOnly; }, {"xBC is given", "expected none", "ReplayOnly"}},
      {[](Call& c) {  // z alone left over with ReplayOnly
         c.a.parts = DecodeStepParts::ReplayOnly;
         c.a.xBC = c.a.dt = c.a.y = TensorView{};
       },
       {"z is given", "ReplayOnly"}},
      {[](Call& c) { c.a.parts = DecodeStepParts::VerifyOnly; },
       {"num_accepted is given", "expected none", "VerifyOnly"}},
      {[](Call& c) {  // ReplayOnly without drafts: the batch comes from num_accepted, and S must equal it
         c.a.parts = DecodeStepParts::ReplayOnly;
         c.a.xBC = c.a.dt = c.a.y = c.a.z = c.a.state_indices = TensorView{};
       },
       {"5 slots", "batch = 3"}},
      {[](Call& c) { c.a.parts = static_cast<DecodeStepParts>(7); }, {"parts is 7", "ReplayAndVerify (0)"}},
      {[](Call& c) { c.a.state_indices = {}; }, {"slots", "batch = 3", "state_indices"}},
      {[](Call& c) { c.a.state_indices = fakeView(12, DType::I32, {4}); }, {"state_indices", "4", "3"}},
      {[](Call& c) { c.a.xBC.strides[0] = 0; }, {"xBC", "stride 0", "nonzero stride"}},
      {[](Call& c) { c.a.xBC.data = static_cast<char*>(c.a.xBC.data) + 1; },
       {"xBC", "data pointer 0x", "multiple of its element size"}},
      {[](Call& c) {
         c.w.conv_weight = fakeView(7, DType::F32, {96, 3});
       },
       {"conv_weight", "3", "4"}},
      {[](Call& c) {
         c.w.conv_weight = fakeView(7, DType::F16, {96, 4});
       },
       {"conv_weight", "float16", "float32 or bfloat16"}},
      {[](Call& c) { c.w.A = fakeView(9, DType::BF16, {4}); }, {"A", "bfloat16", "float32"}},
      {[](Call& c) { c.w.A = {}; }, {"A is required"}},
      {[](Call& c) { c.w.dt_bias = fakeView(11, DType::F32, {5}); }, {"dt_bias", "5", "4"}},
      {[](Call& c) { c.w.dt_min = NAN; }, {"dt_min", "expected numbers"}},
      {[](Call& c) { c.a.z.deviceId = 1; }, {"z", "device 1", "expected device 0"}},
      {[](Call& c) { c.s.dt_cache.device = DeviceKind::CPU; }, {"dt_cache", "CPU tensor", "expected a CUDA tensor"}},
      {[](Call& c) {  // more rows than grid z can hold
         const int64_t B = 70000;
         c.a.state_indices = fakeView(12, DType::I64, {B});
         c.a.num_accepted = fakeView(13, DType::I32, {B});
         c.a.xBC = fakeView(14, DType::BF16, {B, 4, 96});
         c.a.dt = fakeView(15, DType::BF16, {B, 4, 4});
         c.a.z = fakeView(16, DType::BF16, {B, 4, 4, 8});
         c.a.y = fakeView(17, DType::BF16, {B, 4, 4, 8});
       },
       {"batch = 70000", "at most 65535"}},
  };
  expectNamed(bad, valid);
}

// The ring: all three tensors or none, its depth, shapes and dtypes (the caches').
TEST(DecodeStepCheck, BadRingArgumentsAreNamed) {
  const std::vector<std::pair<std::function<void(Call&)>, std::vector<const char*>>> bad = {
      {[](Call& c) { c.s.dt_ring = {}; }, {"dt_ring is not given", "come together", "or not at all"}},
      {[](Call& c) { c.s.xbc_ring = {}; }, {"xbc_ring is not given", "come together"}},
      {[](Call& c) { c.s.ring_tokens = {}; }, {"ring_tokens is not given"}},
      {[](Call& c) {
         c.s.xbc_ring = fakeView(18, DType::BF16, {5, 0, 96});
         c.s.dt_ring = fakeView(19, DType::BF16, {5, 0, 4});
       },
       {"xbc_ring", "ring depth 0", "at least 1"}},
      {[](Call& c) {
         c.s.xbc_ring = fakeView(18, DType::BF16, {5, 3});
       },
       {"xbc_ring", "rank 2", "expected rank 3"}},
      {[](Call& c) {
         c.s.xbc_ring = fakeView(18, DType::BF16, {4, 3, 96});
       },
       {"xbc_ring", "4", "5"}},
      {[](Call& c) {
         c.s.xbc_ring = fakeView(18, DType::BF16, {5, 3, 95});
       },
       {"xbc_ring", "95", "96"}},
      {[](Call& c) {
         c.s.xbc_ring = fakeView(18, DType::F16, {5, 3, 96});
       },
       {"xbc_ring", "float16", "xbc_cache's dtype bfloat16"}},
      {[](Call& c) {
         c.s.dt_ring = fakeView(19, DType::BF16, {5, 2, 4});
       },
       {"dt_ring", "2", "3"}},
      {[](Call& c) {
         c.s.dt_ring = fakeView(19, DType::BF16, {5, 3, 5});
       },
       {"dt_ring", "5", "4"}},
      {[](Call& c) {
         c.s.dt_ring = fakeView(19, DType::F32, {5, 3, 4});
       },
       {"dt_ring", "float32", "dt_cache's dtype bfloat16"}},
      {[](Call& c) { c.s.ring_tokens = fakeView(20, DType::I64, {5}); }, {"ring_tokens", "int64", "int32"}},
      {[](Call& c) { c.s.ring_tokens = fakeView(20, DType::I32, {6}); }, {"ring_tokens", "6", "5"}},
      {[](Call& c) { c.s.ring_tokens.strides[0] = 0; }, {"ring_tokens", "stride 0"}},
      {[](Call& c) { c.s.xbc_ring.deviceId = 1; }, {"xbc_ring", "device 1", "expected device 0"}},
  };
  expectNamed(bad, withRing);
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
int64_t slotOf(const DecodeProblem& p, int64_t b) { return p.idx.defined ? at(p.idx, {b}) : b; }
int64_t numSlots(const DecodeProblem& p) { return p.ssmState.meta.shape[0]; }

void expectUnchanged(DecodeProblem& p, DecodeProblem& before) {
  const auto a = bytesOf(p), b = bytesOf(before);
  for (size_t k = 0; k < a.size(); ++k) EXPECT_EQ(a[k], b[k]) << "all()[" << k << "] was written";
}

// The bytes of slot (or row) s of a contiguous tensor.
std::vector<uint8_t> slotBytes(const HostTensor& t, int64_t s) {
  const int64_t per = t.meta.strides[0] * dtypeBytes(t.meta.dtype), start = t.byteOffset + s * per;
  return std::vector<uint8_t>(t.bytes.begin() + start, t.bytes.begin() + start + per);
}

// dst takes src's element values (same shape; exact when dst's dtype holds src's).
void copyValues(HostTensor& dst, const HostTensor& src) {
  if (!src.defined) return;
  const TensorView d = dst.view();
  forEachElement(src.view(), [&](int64_t off, const std::vector<int64_t>& idx) {
    int64_t o = 0;
    for (int k = 0; k < d.ndim; ++k) o += idx[size_t(k)] * d.strides[k];
    storeElement(d, o, loadElement(src.view(), off));
  });
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
  // x, B and C: (1, heads or groups, P or N) views into the conv output, in xBC channel order.
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
  if (c.clamp) {
    su.dt_min = 0.01f;
    su.dt_max = 0.3f;
  }
  reference::selective_state_update(su);
  return std::vector<double>(ys.begin(), ys.end());
}

// The step done by hand on q (fp32 tensors) with the one-token references: per non-pad row, the
// accepted cached drafts one at a time (committing), a snapshot of the committed states, then the
// L new drafts one at a time from there (q is the caller's scratch copy, so committing them is
// harmless). conv / ssm per slot (empty: no row), y per row (L*H*P; empty: pad row or no verify).
struct ByHand {
  std::vector<std::vector<double>> conv, ssm, y;
};
ByHand stepByHand(DecodeProblem& q) {
  const DecodeCase& c = q.c;
  const int64_t Dc = c.H * c.P + 2 * c.G * c.N, HP = c.H * c.P;
  ByHand r;
  r.conv.resize(size_t(numSlots(q)));
  r.ssm.resize(size_t(numSlots(q)));
  r.y.resize(size_t(c.batch));
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t s = slotOf(q, b);
    if (s < 0) continue;
    const int64_t n = q.accepted.defined ? at(q.accepted, {b}) : 0;
    for (int64_t t = 0; t < n; ++t) {
      std::vector<float> xin(static_cast<size_t>(Dc)), dtr(static_cast<size_t>(c.H));
      for (int64_t ch = 0; ch < Dc; ++ch) xin[size_t(ch)] = float(val(q.xbcCache, {s, t, ch}));
      for (int64_t h = 0; h < c.H; ++h) dtr[size_t(h)] = float(val(q.dtCache, {s, t, h}));
      oneToken(q, s, xin, dtr, nullptr);
    }
    for (int64_t i = 0; i < Dc * (c.W - 1); ++i)
      r.conv[size_t(s)].push_back(val(q.convState, {s, i / (c.W - 1), i % (c.W - 1)}));
    for (int64_t i = 0; i < HP * c.N; ++i)
      r.ssm[size_t(s)].push_back(val(q.ssmState, {s, i / (c.P * c.N), (i / c.N) % c.P, i % c.N}));
    if (!q.xbc.defined) continue;
    for (int64_t t = 0; t < c.L; ++t) {
      std::vector<float> xin(static_cast<size_t>(Dc)), dtr(static_cast<size_t>(c.H)), zv(static_cast<size_t>(HP));
      for (int64_t ch = 0; ch < Dc; ++ch) xin[size_t(ch)] = float(val(q.xbc, {b, t, ch}));
      for (int64_t h = 0; h < c.H; ++h) dtr[size_t(h)] = float(val(q.dt, {b, t, h}));
      if (q.z.defined)
        for (int64_t i = 0; i < HP; ++i) zv[size_t(i)] = float(val(q.z, {b, t, i / c.P, i % c.P}));
      const std::vector<double> y = oneToken(q, s, xin, dtr, q.z.defined ? &zv : nullptr);
      r.y[size_t(b)].insert(r.y[size_t(b)].end(), y.begin(), y.end());
    }
  }
  return r;
}

// p (after the reference step) against the step by hand: committed states, y, the caches and
// counts, and nothing written for pad rows, unused slots or arrivals. `tol(e)`: allowed
// |got - e| for a state or y value e (the hand chain rounds the state to q's dtype per token, the
// reference keeps it in double until the commit).
template <class Tol>
void expectStepMatches(DecodeProblem& p, DecodeProblem& start, const ByHand& e, Tol tol) {
  const DecodeCase& c = p.c;
  const int64_t Dc = c.H * c.P + 2 * c.G * c.N, HP = c.H * c.P;
  const bool replay = c.parts != DecodeStepParts::VerifyOnly, verify = c.parts != DecodeStepParts::ReplayOnly;
  std::vector<char> used(size_t(numSlots(p)), 0);
  for (int64_t b = 0; b < c.batch; ++b) {
    SCOPED_TRACE("row " + std::to_string(b));
    const int64_t s = slotOf(p, b);
    if (s < 0) {  // pad row: y untouched (still poisoned)
      if (verify) {
        EXPECT_EQ(slotBytes(p.y, b), slotBytes(start.y, b));
      }
      continue;
    }
    used[size_t(s)] = 1;
    // The conv window holds inputs (state columns and cached drafts), stored exactly.
    for (int64_t i = 0; i < Dc * (c.W - 1); ++i)
      ASSERT_EQ(val(p.convState, {s, i / (c.W - 1), i % (c.W - 1)}), e.conv[size_t(s)][size_t(i)])
          << "conv state " << i;
    for (int64_t i = 0; i < HP * c.N; ++i) {
      const double x = e.ssm[size_t(s)][size_t(i)];
      ASSERT_NEAR(val(p.ssmState, {s, i / (c.P * c.N), (i / c.N) % c.P, i % c.N}), x, tol(x)) << "ssm state " << i;
    }
    if (!replay) {  // nothing committed, bit for bit
      EXPECT_EQ(slotBytes(p.ssmState, s), slotBytes(start.ssmState, s));
      EXPECT_EQ(slotBytes(p.convState, s), slotBytes(start.convState, s));
    }
    if (!verify) {
      EXPECT_EQ(at(p.cachedTokens, {s}), 0);
      EXPECT_EQ(slotBytes(p.xbcCache, s), slotBytes(start.xbcCache, s));
      EXPECT_EQ(slotBytes(p.dtCache, s), slotBytes(start.dtCache, s));
      continue;
    }
    for (int64_t t = 0; t < c.L; ++t)
      for (int64_t i = 0; i < HP; ++i) {
        const double x = e.y[size_t(b)][size_t(t * HP + i)];
        ASSERT_NEAR(val(p.y, {b, t, i / c.P, i % c.P}), x, tol(x)) << "y token " << t << " channel " << i;
      }
    // The drafts are cached exactly (bit for bit: the same dtype), the rest of the cache kept.
    EXPECT_EQ(at(p.cachedTokens, {s}), c.L);
    const std::vector<uint8_t> xc = slotBytes(p.xbcCache, s), dc = slotBytes(p.dtCache, s), xs = slotBytes(p.xbc, b),
                               ds = slotBytes(p.dt, b), xc0 = slotBytes(start.xbcCache, s),
                               dc0 = slotBytes(start.dtCache, s);
    EXPECT_TRUE(std::equal(xs.begin(), xs.end(), xc.begin()));
    EXPECT_TRUE(std::equal(xc.begin() + long(xs.size()), xc.end(), xc0.begin() + long(xs.size())));
    EXPECT_TRUE(std::equal(ds.begin(), ds.end(), dc.begin()));
    EXPECT_TRUE(std::equal(dc.begin() + long(ds.size()), dc.end(), dc0.begin() + long(ds.size())));
  }
  for (int64_t s = 0; s < numSlots(p); ++s) {
    if (used[size_t(s)]) continue;
    SCOPED_TRACE("unused slot " + std::to_string(s));
    for (auto [got, was] : {std::pair<const HostTensor*, const HostTensor*>{&p.convState, &start.convState},
                            {&p.ssmState, &start.ssmState},
                            {&p.xbcCache, &start.xbcCache},
                            {&p.dtCache, &start.dtCache},
                            {&p.cachedTokens, &start.cachedTokens}})
      EXPECT_EQ(slotBytes(*got, s), slotBytes(*was, s));
  }
  EXPECT_EQ(p.arrivals.bytes, start.arrivals.bytes);
}

// Rounds of: pad rows that change per round (row 1 always, and row r % batch), accept mode
// r % 3 (none, all, uniform), the reference step on p and the step by hand on a copy.
void runRoundsByHand(const DecodeCase& c, int rounds, const std::function<double(double)>& tol,
                     const std::function<void(DecodeProblem&, DecodeProblem&)>& toHand = nullptr) {
  DecodeProblem p(c);
  std::vector<int64_t> slots;
  for (int64_t b = 0; b < c.batch; ++b) slots.push_back(slotOf(p, b));
  int64_t replayed = 0;
  for (int r = 0; r < rounds; ++r) {
    SCOPED_TRACE("round " + std::to_string(r));
    if (p.idx.defined)
      for (int64_t b = 0; b < c.batch; ++b)
        storeElement(p.idx.view(), b, b == r % c.batch ? -1.0 : double(slots[size_t(b)]));
    if (c.parts == DecodeStepParts::ReplayOnly)  // each replay empties its cache: refill the counts
      for (int64_t s = 0; s < numSlots(p); ++s)
        storeElement(p.cachedTokens.view(), s, double(std::uniform_int_distribution<int64_t>(1, c.Lc)(p.rng)));
    p.nextRound(r % 3);
    if (p.accepted.defined)
      for (int64_t b = 0; b < c.batch; ++b) replayed += at(p.accepted, {b});
    DecodeProblem start = p;
    DecodeProblem q = p;  // the hand chain's copy (fp32 by default)
    if (toHand) toHand(q, p);
    const ByHand e = stepByHand(q);
    reference::mamba2_decode_step(p.state(), p.weights(), p.args());
    expectStepMatches(p, start, e, tol);
    if (::testing::Test::HasFatalFailure()) return;
  }
  if (c.parts != DecodeStepParts::VerifyOnly) {
    EXPECT_GT(replayed, 0);  // the rounds replayed something
  }
}

// The reference step equals the one-token references applied token by token (the accepted
// cached drafts committed, then the new drafts from there), for every part, over rounds of
// random accept patterns and pad rows. Both sides compute in double, but the hand chain stores
// the fp32 state (and the fp32 conv output and y) after every token, and the op's tensors are
// at most fp32: they agree to a few fp32 ulps, not to 1e-12.
TEST(DecodeStepReference, EqualsOneTokenReferences) {
  for (DecodeStepParts parts :
       {DecodeStepParts::ReplayAndVerify, DecodeStepParts::ReplayOnly, DecodeStepParts::VerifyOnly}) {
    for (bool extras : {true, false}) {
      DecodeCase c;
      c.H = 4, c.P = 5, c.N = 6, c.G = 2, c.W = 3, c.batch = 4, c.slots = 6, c.L = 3, c.Lc = 4;
      c.parts = parts;
      c.convBias = c.D = c.z = c.dtBias = extras;
      c.clamp = !extras;
      c.seed = 11 + uint64_t(extras);
      SCOPED_TRACE(c.name());
      runRoundsByHand(c, 9, [](double e) { return 2e-7 * (1 + std::fabs(e)); });  // a few fp32 ulps (seen: 1.5e-8)
      if (HasFatalFailure()) return;
    }
  }
}

// 16-bit states and drafts: the reference rounds each state once at the commit (y once), so it
// is within half a 16-bit ulp (2^-8 relative for bfloat16, which has 8 significant bits) of the
// fp32 hand chain run on the same values; the conv window holds 16-bit inputs: exact.
TEST(DecodeStepReference, SixteenBitWithinRounding) {
  DecodeCase c;
  c.H = 4, c.P = 5, c.N = 6, c.G = 2, c.W = 4, c.batch = 3, c.slots = 4, c.L = 3, c.Lc = 3;
  c.ssmStateType = c.convStateType = c.xType = c.dtType = c.wType = DType::BF16;
  c.seed = 5;
  DecodeCase c32 = c;
  c32.ssmStateType = c32.convStateType = c32.xType = c32.dtType = c32.wType = DType::F32;
  runRoundsByHand(
      c, 6, [](double e) { return std::ldexp(std::fabs(e), -8) + 1e-5 * (1 + std::fabs(e)); },
      [&](DecodeProblem& q, DecodeProblem& p) {  // the fp32 hand copy of p's values
        q = DecodeProblem(c32);
        const std::vector<HostTensor*> qa = q.all(), pa = p.all();
        for (size_t k = 0; k < qa.size(); ++k) copyValues(*qa[k], *pa[k]);
      });
}

// Bad arguments through the reference on real host tensors: InvalidArgument naming the argument,
// the expected and the actual value, and not a byte of any tensor written.
TEST(DecodeStepReference, BadArgumentsWriteNothing) {
  using Mut = std::function<void(Call&)>;
  const std::vector<std::pair<Mut, std::vector<const char*>>> bad = {
      {[](Call& c) { c.s.ssm_state.ndim = 3; }, {"ssm_state has rank 3", "expected rank 4"}},
      {[](Call& c) { c.s.ssm_state.shape[1] = 0; }, {"ssm_state", "(5, 0, 16, 16)", ">= 1"}},
      {[](Call& c) { c.s.conv_state.shape[1] = 127; }, {"conv_state", "127 conv channels", "H*P + 2*G*N"}},
      {[](Call& c) { c.s.ssm_state.shape[2] = 8; }, {"conv_state", "G = 3", "divide H = 4"}},  // 128 = 32 + 2*16*3
      {[](Call& c) { c.s.conv_state.shape[2] = 0; }, {"conv_state", "width - 1 = 0", "2 <= W <= 8"}},
      {[](Call& c) {  // L = 4 > Lc = 2
         c.s.xbc_cache.shape[1] = c.s.dt_cache.shape[1] = 2;
       },
       {"xBC", "4 drafts", "1 <= L <= 2", "cache depth 2"}},
      {[](Call& c) { c.s.xbc_cache.dtype = DType::BF16; }, {"xbc_cache", "bfloat16", "xBC's dtype float32", "exactly"}},
      {[](Call& c) { c.s.dt_cache.dtype = DType::F16; }, {"dt_cache", "float16", "dt's dtype float32"}},
      {[](Call& c) { c.s.cached_tokens.dtype = DType::F32; }, {"cached_tokens", "float32", "expected int32"}},
      {[](Call& c) { c.s.cached_tokens.shape[0] = 4; }, {"cached_tokens", "is 4", "expected 5"}},
      {[](Call& c) { c.s.arrivals.strides[0] = 2; }, {"arrivals", "stride 2", "expected 1"}},
      {[](Call& c) { c.s.arrivals.shape[0] = 4; }, {"arrivals", "is 4", "expected 5"}},
      {[](Call& c) { c.s.ssm_state.strides[0] = 0; }, {"ssm_state", "stride 0", "nonzero stride"}},
      {[](Call& c) { c.s.ssm_state.strides[3] = -1; }, {"ssm_state", "stride -1", "stride >= 0"}},
      {[](Call& c) { c.a.num_accepted = {}; }, {"num_accepted is required"}},
      {[](Call& c) { c.a.num_accepted.shape[0] = 2; }, {"num_accepted", "is 2", "expected 3"}},
      {[](Call& c) { c.a.parts = DecodeStepParts::ReplayOnly; }, {"xBC is given", "ReplayOnly"}},
      {[](Call& c) { c.a.parts = DecodeStepParts::VerifyOnly; }, {"num_accepted is given", "VerifyOnly"}},
      {[](Call& c) { c.a.parts = static_cast<DecodeStepParts>(5); }, {"parts is 5", "ReplayAndVerify (0)"}},
      {[](Call& c) { c.a.state_indices = {}; }, {"5 slots", "batch = 3", "state_indices is not given"}},
      {[](Call& c) { c.a.state_indices.dtype = DType::F32; }, {"state_indices", "float32", "int32 or int64"}},
      {[](Call& c) { c.a.xBC.strides[0] = 0; }, {"xBC", "stride 0", "nonzero stride"}},
      {[](Call& c) { c.a.xBC.data = static_cast<char*>(c.a.xBC.data) + 2; },
       {"xBC", "data pointer", "multiple of its element size"}},
      {[](Call& c) { c.a.y.data = c.a.xBC.data; }, {"y", "same as an input", "its own memory"}},
      {[](Call& c) { c.a.y.data = c.a.dt.data; }, {"y", "same as an input"}},
      {[](Call& c) { c.a.z.shape[3] = 15; }, {"z", "is 15", "expected 16"}},
      {[](Call& c) { c.w.A.dtype = DType::BF16; }, {"A", "bfloat16", "expected float32"}},
      {[](Call& c) { c.w.conv_weight.shape[1] = 3; }, {"conv_weight", "is 3", "expected 4"}},
      {[](Call& c) { c.w.dt_max = NAN; }, {"dt_max", "expected numbers"}},
      {[](Call& c) { c.w.D.device = DeviceKind::CUDA; }, {"D", "CUDA tensor", "expected a CPU tensor"}},
  };
  const DecodeProblem base(DecodeCase{});  // H 4, P 16, N 16, G 2 (Dc 128), W 4, batch 3, 5 slots, L = Lc = 4
  for (size_t i = 0; i < bad.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    DecodeProblem p = base, before = base;
    Call c{p.state(), p.weights(), p.args()};
    bad[i].first(c);
    try {
      reference::mamba2_decode_step(c.s, c.w, c.a);
      ADD_FAILURE() << "accepted a bad call (expected a message with " << bad[i].second[0] << ")";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::InvalidArgument) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("reference::mamba2_decode_step: ", 0), 0u) << e.what();
      for (const char* part : bad[i].second)
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "missing '" << part << "' in: " << e.what();
    }
    expectUnchanged(p, before);
  }

  // L > kMaxTokens with a cache deep enough for it (real buffers); L = kMaxTokens runs.
  DecodeCase k;
  k.H = 2, k.P = 2, k.N = 2, k.G = 1, k.W = 2, k.batch = 2, k.slots = 3, k.L = kMaxTokens + 1, k.Lc = kMaxTokens + 1;
  DecodeProblem p(k), before = p;
  try {
    reference::mamba2_decode_step(p.state(), p.weights(), p.args());
    ADD_FAILURE() << "accepted L > kMaxTokens";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::InvalidArgument);
    for (const char* part : {"xBC", "33 drafts", "1 <= L <= 32", "kMaxTokens = 32"})
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "missing '" << part << "' in: " << e.what();
  }
  expectUnchanged(p, before);
  k.L = kMaxTokens;
  DecodeProblem ok(k);
  EXPECT_NO_THROW(reference::mamba2_decode_step(ok.state(), ok.weights(), ok.args()));
}

// A bad slot or count (row 2, after a good row 0) throws before anything is written, naming the
// row, the value and the bound; int64 extremes are read exactly.
TEST(DecodeStepReference, BadSlotOrCountThrowsBeforeWriting) {
  struct Bad {
    const char* what;
    std::function<void(DecodeProblem&)> make;
    std::vector<std::string> parts;
  };
  const int64_t big = std::numeric_limits<int64_t>::max();
  auto int64Tensor = [](std::vector<int64_t> v) {
    std::mt19937_64 rng(0);
    HostTensor t = makeTensor(DType::I64, {int64_t(v.size())}, Layout{}, rng);
    std::memcpy(t.bytes.data(), v.data(), v.size() * 8);  // exact: no trip through double
    return t;
  };
  const DecodeProblem base(DecodeCase{});
  const int64_t s2 = slotOf(base, 2), cached2 = at(base.cachedTokens, {s2});
  const std::vector<Bad> bad = {
      {"slot 9", [](DecodeProblem& p) { storeElement(p.idx.view(), 2, 9.0); }, {"state_indices[2] = 9", "[0, 5)"}},
      {"slot -2", [](DecodeProblem& p) { storeElement(p.idx.view(), 2, -2.0); }, {"state_indices[2] = -2", "or -1"}},
      {"int64 slot",
       [&](DecodeProblem& p) {
         p.idx = int64Tensor({slotOf(p, 0), -1, big});
       },
       {"state_indices[2] = " + std::to_string(big)}},
      {"count > cached",
       [&](DecodeProblem& p) { storeElement(p.accepted.view(), 2, double(cached2 + 1)); },
       {"num_accepted[2] = " + std::to_string(cached2 + 1), "0.." + std::to_string(cached2),
        "slot " + std::to_string(s2)}},
      {"count -1", [](DecodeProblem& p) { storeElement(p.accepted.view(), 2, -1.0); }, {"num_accepted[2] = -1"}},
      {"int64 count",
       [&](DecodeProblem& p) {
         p.accepted = int64Tensor({0, 0, big});
       },
       {"num_accepted[2] = " + std::to_string(big)}},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.what);
    DecodeProblem p = base;
    b.make(p);
    DecodeProblem before = p;
    try {
      reference::mamba2_decode_step(p.state(), p.weights(), p.args());
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::InvalidArgument);
      for (const std::string& part : b.parts)
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "missing '" << part << "' in: " << e.what();
    }
    expectUnchanged(p, before);
  }
}

// ReplayOnly commits and empties the cache, also for a row that replays nothing (then a replay
// of c > 0 is refused, writing nothing); VerifyOnly commits nothing, fills the cache, and its y
// equals a ReplayAndVerify step with nothing accepted.
TEST(DecodeStepReference, PartsKeepTheCacheBookkeeping) {
  DecodeCase c;
  c.parts = DecodeStepParts::ReplayOnly;
  DecodeProblem p(c);
  const int64_t s0 = slotOf(p, 0), s2 = slotOf(p, 2);
  storeElement(p.cachedTokens.view(), s0, double(c.Lc));  // row 0 replays none of its 4
  storeElement(p.cachedTokens.view(), s2, double(c.Lc));  // row 2 all of them
  storeElement(p.accepted.view(), 0, 0.0);
  storeElement(p.accepted.view(), 2, double(c.Lc));
  const DecodeProblem start = p;
  reference::mamba2_decode_step(p.state(), p.weights(), p.args());
  EXPECT_EQ(at(p.cachedTokens, {s0}), 0);
  EXPECT_EQ(at(p.cachedTokens, {s2}), 0);
  EXPECT_EQ(slotBytes(p.ssmState, s0), slotBytes(start.ssmState, s0));  // c = 0 commits nothing
  EXPECT_EQ(slotBytes(p.convState, s0), slotBytes(start.convState, s0));
  EXPECT_NE(slotBytes(p.ssmState, s2), slotBytes(start.ssmState, s2));
  EXPECT_NE(slotBytes(p.convState, s2), slotBytes(start.convState, s2));
  EXPECT_EQ(p.xbcCache.bytes, start.xbcCache.bytes);  // replay reads the cache, never writes it
  EXPECT_EQ(p.dtCache.bytes, start.dtCache.bytes);
  storeElement(p.accepted.view(), 2, 1.0);  // the cache is empty now
  DecodeProblem before = p;
  EXPECT_THROW(reference::mamba2_decode_step(p.state(), p.weights(), p.args()), Error);
  expectUnchanged(p, before);

  DecodeCase v;
  v.parts = DecodeStepParts::VerifyOnly;
  DecodeProblem q(v);
  DecodeProblem rv = q;  // the same problem as ReplayAndVerify with nothing accepted
  rv.c.parts = DecodeStepParts::ReplayAndVerify;
  std::mt19937_64 rng(0);
  rv.accepted = makeTensor(DType::I32, {v.batch}, Layout{}, rng);
  std::fill(rv.accepted.bytes.begin(), rv.accepted.bytes.end(), 0);
  const DecodeProblem qStart = q;
  reference::mamba2_decode_step(q.state(), q.weights(), q.args());
  reference::mamba2_decode_step(rv.state(), rv.weights(), rv.args());
  EXPECT_EQ(q.ssmState.bytes, qStart.ssmState.bytes);
  EXPECT_EQ(q.convState.bytes, qStart.convState.bytes);
  for (int64_t b = 0; b < v.batch; ++b)
    if (slotOf(q, b) >= 0) {
      EXPECT_EQ(at(q.cachedTokens, {slotOf(q, b)}), v.L);
    }
  EXPECT_NE(q.y.bytes, qStart.y.bytes);
  EXPECT_EQ(q.y.bytes, rv.y.bytes);
  EXPECT_EQ(q.xbcCache.bytes, rv.xbcCache.bytes);
  EXPECT_EQ(q.dtCache.bytes, rv.dtCache.bytes);
  EXPECT_EQ(q.cachedTokens.bytes, rv.cachedTokens.bytes);
  EXPECT_EQ(q.ssmState.bytes, rv.ssmState.bytes);
}

// Each optional input (and the clamp) changes y: the reference does not ignore it.
TEST(DecodeStepReference, OptionalInputsMatter) {
  DecodeCase c;
  DecodeProblem base(c);
  DecodeProblem ref = base;
  reference::mamba2_decode_step(ref.state(), ref.weights(), ref.args());
  for (int k : {0, 1, 2, 3, 4}) {
    SCOPED_TRACE(k == 0 ? "conv_bias" : k == 1 ? "D" : k == 2 ? "dt_bias" : k == 3 ? "z" : "clamp");
    DecodeProblem p = base;
    if (k == 4) {
      p.c.clamp = true;
    } else {
      HostTensor& t = k == 0 ? p.convB : k == 1 ? p.D : k == 2 ? p.dtBias : p.z;
      storeElement(t.view(), 0, loadElement(t.view(), 0) + 0.5);
    }
    reference::mamba2_decode_step(p.state(), p.weights(), p.args());
    EXPECT_NE(p.y.bytes, ref.y.bytes) << "ignored";
  }
}

}  // namespace

// ---- deferred commit (a ring) -------------------------------------------------------------------

namespace {

// The step without drafts that flushes a ring: ReplayOnly with nothing accepted.
void flush(DecodeProblem& p) {
  for (int64_t b = 0; b < p.c.batch; ++b) storeElement(p.accepted.view(), b, 0.0);
  Mamba2DecodeStepArgs a = p.args();
  a.parts = DecodeStepParts::ReplayOnly;
  a.xBC = a.dt = a.z = a.y = TensorView{};
  reference::mamba2_decode_step(p.state(), p.weights(), a);
}

}  // namespace

// Deferred commit gives the commit-every-step results: over rounds of mixed accepts (the ring
// filling and overflowing), y agrees with the commit-every-step chain from the same start, the
// ring takes the accepted drafts exactly and its count follows r + c (0 where the states are
// written), and a final flush (ReplayOnly) leaves that chain's states. Both chains compute in
// double; they differ by the fp32 rounding of the stored state at the commits.
TEST(DecodeStepReference, DeferredEqualsCommitEveryStep) {
  for (int64_t depth : {1, 3, 6}) {
    SCOPED_TRACE("R " + std::to_string(depth));
    DecodeCase c;
    c.R = depth;
    DecodeCase e = c;
    e.R = 0;
    DecodeProblem p(c), q(e);
    std::fill(p.ringTokens.bytes.begin(), p.ringTokens.bytes.end(), 0);  // both start from the states
    int commits = 0, appends = 0;
    for (int r = 0; r < 12; ++r) {
      SCOPED_TRACE("round " + std::to_string(r));
      if (r > 0) {
        p.nextRound(r % 4 == 0 ? 1 : 2);
        q.nextRound(r % 4 == 0 ? 1 : 2);
      }
      ASSERT_EQ(p.accepted.bytes, q.accepted.bytes);
      const DecodeProblem before = p;
      reference::mamba2_decode_step(p.state(), p.weights(), p.args());
      reference::mamba2_decode_step(q.state(), q.weights(), q.args());
      const int64_t Dc = c.H * c.P + 2 * c.G * c.N;
      for (int64_t b = 0; b < c.batch; ++b) {
        const int64_t s = slotOf(p, b);
        if (s < 0) continue;
        const int64_t r0 = at(before.ringTokens, {s}), n = at(p.accepted, {b});
        if (r0 + n > depth) {
          EXPECT_EQ(at(p.ringTokens, {s}), 0) << "slot " << s;
          ++commits;
          continue;
        }
        EXPECT_EQ(at(p.ringTokens, {s}), r0 + n) << "slot " << s;
        EXPECT_EQ(slotBytes(p.ssmState, s), slotBytes(before.ssmState, s)) << "slot " << s << " committed";
        EXPECT_EQ(slotBytes(p.convState, s), slotBytes(before.convState, s)) << "slot " << s << " committed";
        appends += n > 0;
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t ch = 0; ch < Dc; ++ch)
            ASSERT_EQ(val(p.xbcRing, {s, r0 + t, ch}), val(before.xbcCache, {s, t, ch})) << "slot " << s;
          for (int64_t h = 0; h < c.H; ++h)
            ASSERT_EQ(val(p.dtRing, {s, r0 + t, h}), val(before.dtCache, {s, t, h})) << "slot " << s;
        }
      }
      forEachElement(q.y.view(), [&](int64_t off, const std::vector<int64_t>&) {
        const double want = loadElement(q.y.view(), off), got = loadElement(p.y.view(), off);
        if (std::isnan(want)) return;  // a pad row's poison, on both sides
        ASSERT_NEAR(got, want, 1e-5 * (1 + std::fabs(want)));
      });
      EXPECT_EQ(p.xbcCache.bytes, q.xbcCache.bytes);
      EXPECT_EQ(p.cachedTokens.bytes, q.cachedTokens.bytes);
    }
    EXPECT_GT(commits, 0) << "no ring overflowed";
    EXPECT_GT(appends, 0) << "no ring took drafts";
    flush(p);
    flush(q);
    EXPECT_TRUE(std::all_of(p.ringTokens.bytes.begin(), p.ringTokens.bytes.end(), [](uint8_t v) { return v == 0; }));
    EXPECT_EQ(p.convState.bytes, q.convState.bytes);  // copies of the inputs
    forEachElement(q.ssmState.view(), [&](int64_t off, const std::vector<int64_t>&) {
      const double want = loadElement(q.ssmState.view(), off);
      ASSERT_NEAR(loadElement(p.ssmState.view(), off), want, 1e-5 * (1 + std::fabs(want)));
    });
  }
}

// A ring count outside [0, R] throws before anything is written, naming the slot, the value and
// the bound.
TEST(DecodeStepReference, BadRingCountThrowsBeforeWriting) {
  DecodeCase c;
  c.R = 3;
  for (double bad : {4.0, -1.0}) {
    DecodeProblem p(c);
    const int64_t s = slotOf(p, 2);
    storeElement(p.ringTokens.view(), s, bad);
    DecodeProblem before = p;
    try {
      reference::mamba2_decode_step(p.state(), p.weights(), p.args());
      ADD_FAILURE() << "accepted ring_tokens " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::InvalidArgument);
      const std::string want = "ring_tokens[" + std::to_string(s) + "] = " + std::to_string(int64_t(bad));
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("expected 0..3"), std::string::npos) << e.what();
    }
    expectUnchanged(p, before);
  }
}

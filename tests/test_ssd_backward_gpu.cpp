// The SSD backward on the GPU against the float64 reference (reference::ssd_backward): fresh
// random inputs and dout, poisoned gradients and workspace; Mamba-2 heads scaled down in bf16,
// groups with small heads and states in fp32 with D per channel, no z and the clamp, lengths 1, 7
// and 257 around the chunk sizes; packed rows in fp32 and bf16 (lengths 1 and one ending on a
// chunk boundary) with initial states and d(final states) through slots; with y kept by the forward
// (the forward's y checked too), bf16 without z as the Mamba-2 layer calls it. A packed sequence's gradients equal its
// own call bit for bit; two runs give the same bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "GpuTest.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/ops/SsdBackwardSpec.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tests/support/SsdForms.h"
#include "tools/problems/ConvProblem.h"  // DeviceTensors
#include "tools/problems/HostTensor.h"

using namespace ssmjit;
using namespace ssmjit::testing;

namespace {

struct BwdCase {
  std::string label;
  SsdCase f;
  DType grad = DType::F32;  // dout, dx, ddt, dB, dC, dz
  bool dfinal = false, dinit = false;
};

// The forward's problem, dout and dfinal_states (fresh), the gradients (poisoned).
struct BwdProblem {
  SsdProblem f;
  BwdCase c;
  HostTensor dout, dfinal, dx, ddt, dA, dB, dC, dD, dz, ddtBias, dinit;

  explicit BwdProblem(const BwdCase& bc) : f(bc.f), c(bc) {
    std::mt19937_64 rng(bc.f.seed + 1000);
    const SsdCase& k = f.c;
    auto fresh = [&](DType t, std::vector<int64_t> shape) {
      HostTensor h = makeTensor(t, shape, Layout{}, rng);
      fillUniform(h, rng, -1, 1);
      return h;
    };
    auto poisoned = [&](DType t, std::vector<int64_t> shape) { return makeTensor(t, shape, Layout{}, rng); };
    dout = fresh(c.grad, {k.batch, k.L, k.H, k.P});
    if (c.dfinal) dfinal = fresh(DType::F32, {f.S, k.H, k.P, k.N});
    dx = poisoned(c.grad, {k.batch, k.L, k.H, k.P});
    ddt = poisoned(c.grad, {k.batch, k.L, k.H});
    dA = poisoned(DType::F32, {k.H});
    dB = poisoned(c.grad, {k.batch, k.L, k.G, k.N});
    dC = poisoned(c.grad, {k.batch, k.L, k.G, k.N});
    if (k.hasD) dD = k.dPerChannel ? poisoned(DType::F32, {k.H, k.P}) : poisoned(DType::F32, {k.H});
    if (k.hasZ) dz = poisoned(c.grad, {k.batch, k.L, k.H, k.P});
    if (k.hasDtBias) ddtBias = poisoned(DType::F32, {k.H});
    if (c.dinit) dinit = poisoned(DType::F32, {f.S, k.H, k.P, k.N});
  }

  std::vector<HostTensor*> all() {
    std::vector<HostTensor*> v = f.all();
    for (HostTensor* t : {&dout, &dfinal, &dx, &ddt, &dA, &dB, &dC, &dD, &dz, &ddtBias, &dinit}) v.push_back(t);
    return v;
  }
  // The call on the tensors `v` (all()'s order, undefined views where a tensor is not).
  SsdBackwardArgs args(const std::vector<TensorView>& v) const {
    SsdBackwardArgs b;
    SsdArgs& a = b.forward;
    a.x = v[0], a.dt = v[1], a.A = v[2], a.B = v[3], a.C = v[4], a.D = v[5], a.z = v[6], a.dt_bias = v[7];
    a.dt_softplus = f.c.softplus, a.dt_min = f.c.dtMin, a.dt_max = f.c.dtMax, a.chunk_size = f.c.chunk;
    a.cu_seqlens = v[9], a.initial_states = v[10], a.initial_state_indices = v[11];
    if (c.dfinal) a.final_state_indices = v[13];
    a.y = v[kY];
    b.dout = v[18], b.dfinal_states = v[19], b.dx = v[20], b.ddt = v[21], b.dA = v[22], b.dB = v[23];
    b.dC = v[24], b.dD = v[25], b.dz = v[26], b.ddt_bias = v[27], b.dinitial_states = v[28];
    return b;
  }
  static constexpr int kOut = 8, kY = 17;
};

constexpr int kDx = 20, kDdt = 21, kDA = 22, kDB = 23, kDC = 24, kDD = 25, kDz = 26, kDdtBias = 27, kDinit = 28;
constexpr int kGrads[] = {kDx, kDdt, kDA, kDB, kDC, kDD, kDz, kDdtBias, kDinit};
const char* gradName(int k) {
  switch (k) {
    case kDx:
      return "dx";
    case kDdt:
      return "ddt";
    case kDA:
      return "dA";
    case kDB:
      return "dB";
    case kDC:
      return "dC";
    case kDD:
      return "dD";
    case kDz:
      return "dz";
    case kDdtBias:
      return "ddt_bias";
    default:
      return "dinitial_states";
  }
}

// Runs the backward on device copies with a poisoned workspace (after the forward, out and y, where
// the case keeps y); every tensor's device bytes after. `initialStateGradientOnly`: context
// parallelism's summary (ssdBackwardInitialStateGradient) instead of the op.
std::vector<std::vector<uint8_t>> runOnDevice(BwdProblem& p, bool initialStateGradientOnly = false) {
  const DeviceTensors d(p.all());
  SsdBackwardArgs a = p.args(d.views());
  if (p.f.c.keepY) {
    SsdArgs f = a.forward;
    f.out = d.views()[BwdProblem::kOut];
    f.final_state_indices = {};  // no final states written
    const int64_t fws = ssd_workspace_size(f);
    DeviceBuffer w(size_t(fws) * 4);
    f.workspace = TensorView::contiguous(w.data(), DType::F32, {fws});
    ssd(f);
    checkDeviceErrors();
  }
  const int64_t ws = ssd_backward_workspace_size(a);
  DeviceBuffer w(size_t(ws) * 4);
  w.fill(kPoison);  // its contents on entry must not matter
  a.workspace = TensorView::contiguous(w.data(), DType::F32, {ws});
  if (initialStateGradientOnly)
    detail::ssdBackwardInitialStateGradient(a, nullptr);
  else
    ssd_backward(a);
  checkDeviceErrors();
  std::vector<std::vector<uint8_t>> out;
  for (size_t k = 0; k < d.bufs.size(); ++k) out.push_back(d.download(k));
  return out;
}

std::vector<BwdCase> cases() {
  std::vector<BwdCase> v;
  BwdCase c;  // Mamba-2 2.7B heads scaled down: H 8, P 64, N 128, G 1, chunk 256, bf16
  c.label = "Heads27bBf16L1000", c.grad = DType::BF16;
  c.f.batch = 2, c.f.L = 1000, c.f.H = 8, c.f.P = 64, c.f.G = 1, c.f.N = 128, c.f.chunk = 256;
  c.f.xType = c.f.dtType = c.f.bcType = c.f.zType = c.f.outType = DType::BF16;
  c.f.initial = true, c.dinit = true;
  v.push_back(c);
  c = {};  // groups, small heads and states, D per channel, no z, the clamp binding
  c.label = "G2P32N64Q64F32Clamp";
  c.f.batch = 2, c.f.L = 300, c.f.H = 4, c.f.P = 32, c.f.G = 2, c.f.N = 64, c.f.chunk = 64;
  c.f.dPerChannel = true, c.f.hasZ = false, c.f.dtMin = 0.1f, c.f.dtMax = 0.8f;
  v.push_back(c);
  c = {};
  c.label = "L1", c.f.batch = 3, c.f.L = 1, c.f.H = 4, c.f.P = 32, c.f.G = 2, c.f.N = 16, c.f.chunk = 64;
  c.f.initial = c.f.final = true, c.dfinal = c.dinit = true;  // with no initial state dA is exactly 0
  v.push_back(c);
  c = {};
  c.label = "L7Bf16", c.grad = DType::BF16, c.f.L = 7, c.f.H = 4, c.f.P = 64, c.f.G = 1, c.f.N = 32, c.f.chunk = 64;
  c.f.xType = c.f.dtType = c.f.bcType = c.f.zType = DType::BF16;
  v.push_back(c);
  c = {};
  c.label = "L257Q128States", c.f.batch = 2, c.f.L = 257, c.f.H = 4, c.f.P = 48, c.f.G = 4, c.f.N = 40;
  c.f.chunk = 128, c.f.initial = c.f.final = true, c.dfinal = c.dinit = true;
  v.push_back(c);
  c = {};  // bf16 packed, the 16-bit kernels' rings on partial tiles: P 32, two groups, N 64
  c.label = "PackedSlotsBf16", c.grad = DType::BF16, c.f.lens = {300, 1, 256, 7, 129}, c.f.H = 4, c.f.P = 32;
  c.f.G = 2, c.f.N = 64, c.f.chunk = 128, c.f.xType = c.f.dtType = c.f.bcType = c.f.zType = DType::BF16;
  c.f.initial = c.f.final = c.f.slotIndices = true, c.dfinal = c.dinit = true;
  v.push_back(c);
  c = {};  // as the Mamba-2 layer calls it: no z (the gated norm takes it); then with the forward's y
  c.label = "NoZBf16", c.grad = DType::BF16, c.f.batch = 2, c.f.L = 300, c.f.H = 8, c.f.P = 64, c.f.G = 1;
  c.f.N = 128, c.f.chunk = 256, c.f.xType = c.f.dtType = c.f.bcType = c.f.outType = DType::BF16, c.f.hasZ = false;
  c.f.initial = true, c.dinit = true;
  v.push_back(c);
  c.label = "NoZSavedYBf16", c.f.keepY = true;
  v.push_back(c);
  c = {};  // packed, y kept, fp32
  c.label = "PackedSlotsSavedY", c.f.lens = {300, 1, 256, 7, 129}, c.f.H = 4, c.f.P = 32, c.f.G = 2, c.f.N = 64;
  c.f.chunk = 128, c.f.initial = c.f.final = c.f.slotIndices = true, c.dfinal = c.dinit = true, c.f.keepY = true;
  v.push_back(c);
  c = {};  // packed: lengths 1 and 256 (ends on a chunk boundary); states and d(final) by slot
  c.label = "PackedSlots", c.f.lens = {300, 1, 256, 7, 129}, c.f.H = 4, c.f.P = 32, c.f.G = 2, c.f.N = 64;
  c.f.chunk = 128, c.f.initial = c.f.final = c.f.slotIndices = true, c.dfinal = c.dinit = true;
  v.push_back(c);
  for (BwdCase& k : v) k.f.aLo = -2.0, k.f.seed = 44;
  return v;
}

std::vector<char> allRows(const HostTensor& t) { return std::vector<char>(size_t(t.meta.shape[0]), 1); }

class SsdBackwardGpu : public ::testing::TestWithParam<BwdCase> {};

TEST_P(SsdBackwardGpu, MatchesReference) {
  SSMJIT_REQUIRE_GPU();
  BwdProblem p(GetParam());
  std::vector<std::vector<uint8_t>> before;
  for (HostTensor* t : p.all()) before.push_back(t->bytes);
  const std::vector<std::vector<uint8_t>> got = runOnDevice(p);
  std::vector<TensorView> host;
  for (HostTensor* t : p.all()) host.push_back(t->defined ? t->view() : TensorView{});
  reference::ssd_backward(p.args(host));
  const std::vector<HostTensor*> all = p.all();
  const Fp32Error e = fp32RecurrenceGradient(p.f.longest());
  for (int k : kGrads) {
    const HostTensor& ref = *all[size_t(k)];
    if (!ref.defined) continue;
    std::vector<char> written = allRows(ref);
    if (k == kDinit) {
      std::fill(written.begin(), written.end(), 0);
      for (int64_t s : p.f.initSlot)
        if (s >= 0) written[size_t(s)] = 1;
    }
    expectWithin(compareTensor(ref, got[size_t(k)], before[size_t(k)], written), bound(ref.meta.dtype, e), gradName(k));
  }
  if (p.f.c.keepY) {  // the forward's y, which the backward read
    SsdProblem r = p.f;
    reference::ssd(r.args());
    expectWithin(compareTensor(r.y, got[BwdProblem::kY], before[BwdProblem::kY], allRows(r.y)),
                 bound(DType::F32, fp32Recurrence(p.f.longest())), "y");
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, SsdBackwardGpu, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.label; });

// Sequence i of a packed problem as a dense call of one row: its tokens and dout, its initial
// state in slot 0 and its d(final state) in slot 0 (none where the packed call has -1).
BwdProblem alone(const BwdProblem& packed, int64_t i) {
  BwdCase c = packed.c;
  c.f.lens.clear(), c.f.batch = 1, c.f.L = packed.f.len[size_t(i)], c.f.slotIndices = false;
  const int64_t is = packed.f.initSlot[size_t(i)], fs = packed.f.finalSlot[size_t(i)];
  c.f.initial = c.dinit = is >= 0;
  c.f.final = c.dfinal = fs >= 0;
  BwdProblem a(c);
  const int64_t t0 = packed.f.start[size_t(i)], n = a.f.c.L;
  auto copyTokens = [&](const HostTensor& from, HostTensor& to) {
    if (!from.defined) return;
    const int64_t perToken = from.meta.strides[1] * dtypeBytes(from.meta.dtype);
    std::memcpy(to.bytes.data(), from.bytes.data() + t0 * perToken, size_t(n * perToken));
  };
  copyTokens(packed.f.x, a.f.x), copyTokens(packed.f.dt, a.f.dt), copyTokens(packed.f.B, a.f.B);
  copyTokens(packed.f.C, a.f.C), copyTokens(packed.f.z, a.f.z), copyTokens(packed.dout, a.dout);
  a.f.A.bytes = packed.f.A.bytes, a.f.Dv.bytes = packed.f.Dv.bytes, a.f.dtBias.bytes = packed.f.dtBias.bytes;
  const SsdCase& k = packed.f.c;
  const size_t HPN = size_t(k.H * k.P * k.N);
  if (is >= 0)
    std::memcpy(a.f.init.bytes.data(), packed.f.init.bytes.data() + is * HPN * dtypeBytes(k.stateType),
                HPN * dtypeBytes(k.stateType));
  if (fs >= 0) std::memcpy(a.dfinal.bytes.data(), packed.dfinal.bytes.data() + fs * HPN * 4, HPN * 4);
  return a;
}

void expectPackedEqualsAlone(const BwdCase& c) {
  BwdProblem packed(c);
  const std::vector<std::vector<uint8_t>> rp = runOnDevice(packed);
  const SsdCase& k = packed.f.c;
  for (int64_t i = 0; i < packed.f.nseq; ++i) {
    SCOPED_TRACE("sequence " + std::to_string(i));
    BwdProblem a = alone(packed, i);
    const std::vector<std::vector<uint8_t>> ra = runOnDevice(a);
    const std::vector<HostTensor*> all = a.all();
    for (int g : {kDx, kDdt, kDB, kDC, kDz}) {
      const HostTensor& t = *all[size_t(g)];
      if (!t.defined) continue;
      const size_t perToken = size_t(t.meta.strides[1] * dtypeBytes(t.meta.dtype));
      EXPECT_EQ(0, std::memcmp(rp[size_t(g)].data() + packed.f.start[size_t(i)] * perToken, ra[size_t(g)].data(),
                               size_t(a.f.c.L) * perToken))
          << gradName(g);
    }
    const int64_t is = packed.f.initSlot[size_t(i)];
    if (is >= 0) {
      const size_t HPN4 = size_t(k.H * k.P * k.N) * 4;
      EXPECT_EQ(0, std::memcmp(rp[kDinit].data() + is * HPN4, ra[kDinit].data(), HPN4)) << "dinitial_states";
    }
  }
}

TEST(SsdBackwardGpuPacking, PackedSequenceEqualsItsOwnCall) {
  SSMJIT_REQUIRE_GPU();
  for (const BwdCase& c : cases())
    if (!c.f.lens.empty()) {
      SCOPED_TRACE(c.label);
      expectPackedEqualsAlone(c);
    }
}

TEST(SsdBackwardGpuPacking, RepeatedRunsAreBitwiseEqual) {
  SSMJIT_REQUIRE_GPU();
  for (const BwdCase& c : {cases()[0], cases().back()}) {
    SCOPED_TRACE(c.label);
    BwdProblem p(c);
    const std::vector<std::vector<uint8_t>> a = runOnDevice(p), b = runOnDevice(p);
    for (int k : kGrads) EXPECT_EQ(a[size_t(k)], b[size_t(k)]) << gradName(k);
  }
}

// Context parallelism's summary of a part's backward writes the op's dinitial_states, bit for
// bit, and no other gradient (they keep their poison).
TEST(SsdBackwardGpuPacking, InitialStateGradientAloneEqualsTheOps) {
  SSMJIT_REQUIRE_GPU();
  int ran = 0;
  for (const BwdCase& c : cases())
    if (c.dinit) {
      SCOPED_TRACE(c.label);
      BwdProblem p(c);
      const std::vector<std::vector<uint8_t>> poison = [&] {
        std::vector<std::vector<uint8_t>> v;
        for (HostTensor* t : p.all()) v.push_back(t->defined ? t->bytes : std::vector<uint8_t>{});
        return v;
      }();
      const std::vector<std::vector<uint8_t>> whole = runOnDevice(p), alone = runOnDevice(p, true);
      EXPECT_EQ(alone[size_t(kDinit)], whole[size_t(kDinit)]);
      for (int k : kGrads)
        if (k != kDinit) EXPECT_EQ(alone[size_t(k)], poison[size_t(k)]) << gradName(k) << " was written";
      ++ran;
    }
  EXPECT_GT(ran, 0) << "no case asks for dinitial_states";
}

}  // namespace

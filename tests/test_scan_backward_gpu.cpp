// The selective-scan backward on the GPU against the float64 reference: fresh random inputs and
// dout, poisoned gradients, odd channel counts, state sizes and lengths, constant and time-varying
// B/C with groups, 16-bit tensors, strided layouts, dense and packed rows, initial states through
// slots with d(final states) in and d(initial states) out. Two runs give the same bytes; a packed
// row's gradients equal running each sequence alone, bit for bit (the sums over sequences equal
// the fp32 sum of the alone ones, in order).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "GpuTest.h"
#include "ScanBackwardCheck.h"
#include "cache/KernelCache.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/OpSpecializations.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tools/problems/HostTensor.h"
#include "tools/problems/ScanBackwardProblem.h"

using namespace ssmjit;
using namespace ssmjit::testing;

namespace {

// Runs the backward on device copies with a poisoned workspace; the gradients' device bytes by
// all() index.
std::vector<std::vector<uint8_t>> runOnDevice(ScanBackwardProblem& p) {
  DeviceTensors d(p.all());
  SelectiveScanBackwardArgs a = deviceArgs(p, d);
  const int64_t ws = std::max<int64_t>(selective_scan_backward_workspace_size(a), 1);
  DeviceBuffer w(static_cast<size_t>(ws) * 4);
  w.fill(kPoison);
  a.workspace = TensorView::contiguous(w.data(), DType::F32, {ws});
  selective_scan_backward(a);
  checkDeviceErrors();
  std::vector<std::vector<uint8_t>> g(25);
  for (int i = kDu; i <= kDinit; ++i)
    if (p.all()[i]->defined) g[i] = d.download(i);
  return g;
}

ScanBackwardCase allDtypes(ScanBackwardCase c, DType t) {
  c.fwd.uType = c.fwd.deltaType = c.fwd.zType = c.fwd.bType = c.fwd.cType = t;
  c.doutType = c.duType = c.ddeltaType = c.dzType = c.dBType = c.dCType = t;
  return c;
}

std::vector<ScanBackwardCase> cases() {
  std::vector<ScanBackwardCase> v;
  ScanBackwardCase c;
  c.fwd.batch = 2, c.fwd.D = 37, c.fwd.N = 13, c.fwd.L = 300;
  v.push_back(c);
  c = allDtypes({}, DType::BF16);
  c.fwd.batch = 3, c.fwd.D = 64, c.fwd.N = 16, c.fwd.L = 257, c.fwd.G = 2;
  v.push_back(c);
  c = allDtypes({}, DType::F16);  // constant B/C, N 1, nothing optional
  c.fwd.batch = 2, c.fwd.D = 33, c.fwd.N = 1, c.fwd.L = 129, c.fwd.bVarying = c.fwd.cVarying = false;
  c.fwd.hasD = c.fwd.hasZ = c.fwd.hasDeltaBias = c.fwd.softplus = false;
  v.push_back(c);
  // Packed, states through permuted slots (one -1), d(final) in, d(initial) out; D 48: blocks of 16
  // channels in one group, so B/C are staged and whole tiles realigned (PackedRuns, StagedBC).
  c = {};
  c.fwd.D = 48, c.fwd.N = 8, c.fwd.lens = {5, 300, 1, 700, 64}, c.fwd.slotIndices = true, c.fwd.inPlace = false;
  c.dfinalStates = c.dinitialStates = true;
  v.push_back(c);
  c = {};  // strided, mixed dtypes, grouped constant C, G 3 (group 8 < BLOCK_D: blocks span groups)
  c.fwd.batch = 2, c.fwd.D = 24, c.fwd.N = 16, c.fwd.G = 3, c.fwd.L = 517, c.fwd.cVarying = false;
  c.fwd.strided = true, c.fwd.uType = DType::BF16, c.fwd.zType = DType::F16, c.fwd.bType = DType::BF16;
  c.doutType = DType::BF16, c.dBType = DType::BF16;
  v.push_back(c);
  c = allDtypes({}, DType::BF16);  // one sequence of 10 spans (256 tokens at D 20), d(final) in
  c.fwd.batch = 1, c.fwd.D = 20, c.fwd.N = 6, c.fwd.L = 2333;
  c.dfinalStates = c.dinitialStates = true;
  v.push_back(c);
  // State chunks (ScanStateChunks.h): N 40 as chunks of 16, 16 and 8 on a packed row with state
  // gradients through slots; N 200 as twelve chunks of 16 and one of 8, bf16, over two spans.
  c = {};
  c.fwd.D = 24, c.fwd.N = 40, c.fwd.lens = {2, 400, 33, 129}, c.fwd.slotIndices = true, c.fwd.inPlace = false;
  c.dfinalStates = c.dinitialStates = true;
  v.push_back(c);
  c = allDtypes({}, DType::BF16);
  c.fwd.batch = 2, c.fwd.D = 16, c.fwd.N = 200, c.fwd.L = 300;
  v.push_back(c);
  // Dense rows of whole tiles (L a multiple of 64, scanTilesWhole): two spans of 256 with state
  // gradients, bf16 with groups; and N 40 in chunks.
  c = allDtypes({}, DType::BF16);
  c.fwd.batch = 2, c.fwd.D = 64, c.fwd.N = 16, c.fwd.L = 512, c.fwd.G = 2, c.fwd.slotIndices = true;
  c.fwd.inPlace = false, c.dfinalStates = c.dinitialStates = true;
  v.push_back(c);
  c = {};
  c.fwd.batch = 3, c.fwd.D = 40, c.fwd.N = 40, c.fwd.L = 192;
  v.push_back(c);
  return v;
}

class ScanBackwardGpu : public GpuTest, public ::testing::WithParamInterface<ScanBackwardCase> {};

TEST_P(ScanBackwardGpu, MatchesReference) {
  ScanBackwardProblem p(GetParam());
  const std::vector<uint8_t> dinitBefore = p.dinit.defined ? p.dinit.bytes : std::vector<uint8_t>{};
  const auto g = runOnDevice(p);
  EXPECT_EQ(g, runOnDevice(p)) << "two runs differ";
  reference::selective_scan_backward(p.args());
  expectGradients(
      p, [&](int k) { return g[static_cast<size_t>(k)]; }, dinitBefore);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ScanBackwardGpu, ::testing::ValuesIn(cases()), ByName());

// An element's value and bits, for a mismatch message.
std::string bitsString(const unsigned char* p, DType t) {
  uint32_t bits = 0;
  std::memcpy(&bits, p, dtypeBytes(t));
  const double v = loadElement(TensorView::contiguous(const_cast<unsigned char*>(p), t, {1}), 0);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g (0x%x)", v, bits);
  return buf;
}

// Every sequence of a packed row gives, bit for bit, the per-token gradients, time-varying dB/dC
// and d(initial state) of running it alone; dA, dD, ddelta_bias are the fp32 sums of the alone
// ones in sequence order. One test per dtype, so that shards run them apart: each compiles four
// kernel sets (packed, alone, alone L = 1, alone L = 64).
class ScanBackwardGpuPacking : public ::testing::TestWithParam<DType> {};

TEST_P(ScanBackwardGpuPacking, PackedEqualsEachSequenceAlone) {
  SSMJIT_REQUIRE_GPU();
  const DType x = GetParam();
  ScanBackwardCase pc = allDtypes({}, x);
  pc.fwd.D = 48, pc.fwd.N = 16;  // B/C staged: see cases()
  pc.fwd.lens = {700, 5, 300, 1, 513, 64};
  pc.dinitialStates = pc.dfinalStates = true, pc.fwd.inPlace = false;
  ScanBackwardProblem packed(pc);
  const auto gp = runOnDevice(packed);
  const int64_t D = pc.fwd.D, N = pc.fwd.N, DN = D * N, eb = dtypeBytes(x), T = packed.f.u.meta.shape[2];
  ASSERT_EQ(T, 700 + 5 + 300 + 1 + 513 + 64) << "one packed row of the six sequences";
  std::vector<float> sumA(DN, 0.f), sumD(D, 0.f), sumBias(D, 0.f);
  for (size_t i = 0; i < pc.fwd.lens.size(); ++i) {
    ScanBackwardCase sc = pc;
    sc.fwd.lens.clear(), sc.fwd.batch = 1, sc.fwd.L = pc.fwd.lens[i];
    ScanBackwardProblem alone(sc);
    const int64_t start = packed.f.start[i];
    for (auto [from, to] : {std::pair{&packed.f.u, &alone.f.u},
                            {&packed.f.delta, &alone.f.delta},
                            {&packed.f.z, &alone.f.z},
                            {&packed.f.B, &alone.f.B},
                            {&packed.f.C, &alone.f.C},
                            {&packed.dout, &alone.dout}})
      copyTokens(*from, *to, start);
    for (auto [from, to] :
         {std::pair{&packed.f.A, &alone.f.A}, {&packed.f.Dv, &alone.f.Dv}, {&packed.f.deltaBias, &alone.f.deltaBias}})
      to->bytes = from->bytes;
    // Sequence i: slot i (no indices); alone, slot 0.
    std::memcpy(alone.f.initStates.bytes.data(), packed.f.initStates.bytes.data() + i * DN * 4, DN * 4);
    std::memcpy(alone.dfinal.bytes.data(), packed.dfinal.bytes.data() + i * DN * 4, DN * 4);  // fp32 states
    const auto ga = runOnDevice(alone);
    // Rows of `len` tokens: packed row r at token `start`, alone row r.
    auto sameRows = [&](int idx, int64_t rows, const char* what) {
      for (int64_t r = 0; r < rows; ++r) {
        const auto* p = gp[idx].data() + (r * T + start) * eb;
        const auto* q = ga[idx].data() + r * sc.fwd.L * eb;
        if (std::memcmp(p, q, sc.fwd.L * eb) == 0) continue;
        int64_t t = 0;
        while (std::memcmp(p + t * eb, q + t * eb, eb) == 0) ++t;
        FAIL() << dtypeName(x) << " gradient " << idx << " sequence " << i << " " << what << " " << r << " token " << t
               << " of " << sc.fwd.L << ": packed " << bitsString(p + t * eb, x) << ", alone "
               << bitsString(q + t * eb, x);
      }
    };
    for (int idx : {kDu, kDdelta, kDz}) sameRows(idx, D, "channel");
    for (int idx : {kDB, kDC}) sameRows(idx, N, "state");
    if (HasFatalFailure()) return;
    ASSERT_EQ(0, std::memcmp(gp[kDinit].data() + i * DN * 4, ga[kDinit].data(), DN * 4)) << "dinit of sequence " << i;
    auto add = [&](std::vector<float>& acc, int idx) {
      for (size_t e = 0; e < acc.size(); ++e) {
        float v;
        std::memcpy(&v, ga[idx].data() + e * 4, 4);
        acc[e] += v;
      }
    };
    add(sumA, kDA), add(sumD, kDD), add(sumBias, kDbias);
  }
  EXPECT_EQ(0, std::memcmp(gp[kDA].data(), sumA.data(), DN * 4)) << dtypeName(x) << " dA";
  EXPECT_EQ(0, std::memcmp(gp[kDD].data(), sumD.data(), D * 4)) << dtypeName(x) << " dD";
  EXPECT_EQ(0, std::memcmp(gp[kDbias].data(), sumBias.data(), D * 4)) << dtypeName(x) << " ddelta_bias";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ScanBackwardGpuPacking, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtypeName(info.param)); });

// compile_backward: the forward's first call compiles the kernels its backward (every gradient, no
// state gradients) launches, so the backward compiles nothing. A shape no other test runs, so its
// kernels are unknown to this process before the forward.
TEST(ScanBackwardGpuFirstCall, ForwardWithCompileBackwardCompilesTheBackwardsKernels) {
  SSMJIT_REQUIRE_GPU();
  ScanBackwardCase c;
  c.fwd.batch = 1, c.fwd.D = 29, c.fwd.N = 23, c.fwd.L = 45;
  ScanBackwardProblem p(c);
  DeviceTensors d(p.all());
  SelectiveScanBackwardArgs b = deviceArgs(p, d);
  const int64_t ws = std::max<int64_t>(selective_scan_backward_workspace_size(b), 1);
  DeviceBuffer w(static_cast<size_t>(ws) * 4);
  b.workspace = TensorView::contiguous(w.data(), DType::F32, {ws});
  const std::vector<Specialization> backward = opspec::scanBackward(b, driver::currentArch());
  ASSERT_FALSE(std::all_of(backward.begin(), backward.end(), [](const Specialization& s) { return kernelKnown(s); }))
      << "the backward's kernels are known before the forward: the check would pass without it";
  SelectiveScanArgs f = b.forward;
  ASSERT_TRUE(f.out.defined());
  const int64_t fws = std::max<int64_t>(selective_scan_workspace_size(f), 1);  // N 23: two chunks of states
  DeviceBuffer fw(static_cast<size_t>(fws) * 4);
  f.workspace = TensorView::contiguous(fw.data(), DType::F32, {fws});
  f.compile_backward = true;
  selective_scan(f);
  checkDeviceErrors();
  for (const Specialization& s : backward) EXPECT_TRUE(kernelKnown(s)) << s.canonical();
  selective_scan_backward(b);
  checkDeviceErrors();
}

}  // namespace

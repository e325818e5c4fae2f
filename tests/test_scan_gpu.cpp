// The selective scan on the GPU against the float64 reference: fresh random inputs, poisoned
// outputs, odd channel counts, state sizes and lengths, constant and time-varying B/C with groups,
// every dtype, sequences shorter than a span and longer than several (the states pass), packed
// rows with initial and final states through slots (in place, -1 slots); packed output and
// final states equal running each sequence alone, bit for bit; bad cu_seqlens are reported.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "GpuTest.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tests/support/ConvProblem.h"  // DeviceTensors
#include "tests/support/HostTensor.h"

using namespace ssmjit;
using namespace ssmjit::testing;

namespace {

struct Case {
  const char* name;
  int64_t batch = 2, D = 37, N = 13, L = 300, G = 1;
  DType x = DType::F32, state = DType::F32;
  bool bVarying = true, cVarying = true, extras = true, states = false;
  std::vector<int64_t> lens;  // packed when not empty (L = their sum)
  uint64_t seed = 1;
};

// Host tensors of one call, in a fixed order; the same args for the host and the device.
struct Problem {
  enum { U, Delta, Z, Out, A, Bm, Cm, Dv, Bias, Cu, Init, InitIdx, FinIdx, kCount };
  Case c;
  std::mt19937_64 rng;
  HostTensor t[kCount];
  int64_t S = 0;

  explicit Problem(const Case& cc) : c(cc), rng(cc.seed) {
    const bool packed = !c.lens.empty();
    const int64_t Bt = packed ? 1 : c.batch, L = packed ? std::accumulate(c.lens.begin(), c.lens.end(), int64_t{0}) : c.L;
    const int64_t nseq = packed ? static_cast<int64_t>(c.lens.size()) : c.batch;
    auto make = [&](int k, DType dt, std::vector<int64_t> shape, double lo, double hi) {
      t[k] = makeTensor(dt, shape, Layout{}, rng);
      fillUniform(t[k], rng, lo, hi);
    };
    make(U, c.x, {Bt, c.D, L}, -1, 1);
    if (c.extras) make(Delta, c.x, {Bt, c.D, L}, -3, 0);  // through softplus
    else make(Delta, c.x, {Bt, c.D, L}, 0.001, 0.3);
    make(Out, c.x, {Bt, c.D, L}, 0, 0);
    std::memset(t[Out].bytes.data(), kPoison, t[Out].bytes.size());
    make(A, DType::F32, {c.D, c.N}, -2, -0.5);
    if (c.bVarying) make(Bm, c.x, {Bt, c.G, c.N, L}, -1, 1);
    else make(Bm, DType::F32, {c.D, c.N}, -1, 1);
    if (c.cVarying) make(Cm, c.x, {Bt, c.G, c.N, L}, -1, 1);
    else make(Cm, DType::F32, {c.D, c.N}, -1, 1);
    if (c.extras) {
      make(Z, c.x, {Bt, c.D, L}, -2, 2);
      make(Dv, DType::F32, {c.D}, -1, 1);
      make(Bias, DType::F32, {c.D}, -1, 0.5);
    }
    if (packed) {
      make(Cu, DType::I32, {nseq + 1}, 0, 0);
      int64_t s = 0;
      for (int64_t i = 0; i <= nseq; ++i) {
        storeElement(t[Cu].view(), i, static_cast<double>(s));
        if (i < nseq) s += c.lens[static_cast<size_t>(i)];
      }
    }
    if (c.states) {  // in place, permuted slots, one sequence starting from zeros, one not written
      S = nseq + 2;
      make(Init, c.state, {S, c.D, c.N}, -1, 1);
      make(InitIdx, DType::I32, {nseq}, 0, 0);
      make(FinIdx, DType::I64, {nseq}, 0, 0);
      for (int64_t i = 0; i < nseq; ++i) {
        storeElement(t[InitIdx].view(), i, i == 1 ? -1.0 : static_cast<double>(S - 1 - i));
        storeElement(t[FinIdx].view(), i, i == 2 ? -1.0 : static_cast<double>(S - 1 - i));
      }
    }
  }
  std::vector<HostTensor*> all() {
    std::vector<HostTensor*> v;
    for (auto& h : t) v.push_back(&h);
    return v;
  }
  // view(k): the tensor k as the call sees it (host or device).
  template <class View>
  SelectiveScanArgs args(View view) const {
    SelectiveScanArgs a;
    a.u = view(U), a.delta = view(Delta), a.z = view(Z), a.out = view(Out), a.A = view(A), a.B = view(Bm);
    a.C = view(Cm), a.D = view(Dv), a.delta_bias = view(Bias), a.delta_softplus = c.extras;
    a.cu_seqlens = view(Cu);
    if (!c.lens.empty()) a.max_seqlen = *std::max_element(c.lens.begin(), c.lens.end());
    a.initial_states = view(Init), a.final_states = view(Init);
    a.initial_state_indices = view(InitIdx), a.final_state_indices = view(FinIdx);
    return a;
  }
  SelectiveScanArgs hostArgs() const {
    return args([&](int k) { return t[k].defined ? t[k].view() : TensorView{}; });
  }
};

// Runs the op on the device; returns the device bytes of out and the states.
struct DeviceRun {
  std::vector<uint8_t> out, states;
};
DeviceRun runOnDevice(Problem& p) {
  DeviceTensors d(p.all());
  SelectiveScanArgs a = p.args([&](int k) { return d.view(static_cast<size_t>(k), p.t[k]); });
  const int64_t ws = selective_scan_workspace_size(a);
  DeviceBuffer w(static_cast<size_t>(std::max<int64_t>(ws, 1)) * 4);
  w.fill(kPoison);  // its contents on entry must not matter
  a.workspace = TensorView::contiguous(w.data(), DType::F32, {std::max<int64_t>(ws, 1)});
  selective_scan(a);
  checkDeviceErrors();
  DeviceRun r;
  r.out = d.download(Problem::Out);
  if (p.t[Problem::Init].defined) r.states = d.download(Problem::Init);
  return r;
}

double tol(DType t) { return t == DType::F32 ? 1e-5 : 1e-2; }

class ScanGpu : public ::testing::TestWithParam<Case> {};

TEST_P(ScanGpu, MatchesReference) {
  SSMJIT_REQUIRE_GPU();
  Problem p(GetParam());
  const std::vector<uint8_t> statesBefore = p.t[Problem::Init].bytes;
  const DeviceRun r = runOnDevice(p);
  reference::selective_scan(p.hostArgs());
  const int64_t rows = p.t[Problem::Out].meta.shape[0];
  const Compared o = compareTensor(p.t[Problem::Out], r.out, std::vector<char>(static_cast<size_t>(rows), 1));
  EXPECT_EQ(o.violations, 0) << o.first;
  EXPECT_LE(o.relL2, tol(p.c.x)) << o.first;
  EXPECT_LE(o.maxErr, 10 * tol(p.c.x)) << o.first;
  if (p.c.states) {
    std::vector<char> written(static_cast<size_t>(p.S), 0);
    for (int64_t i = 0; i < p.t[Problem::FinIdx].meta.shape[0]; ++i) {
      const int64_t s = static_cast<int64_t>(loadElement(p.t[Problem::FinIdx].view(), i));
      if (s >= 0) written[static_cast<size_t>(s)] = 1;
    }
    const Compared st = compareTensor(p.t[Problem::Init], r.states, statesBefore, written);
    EXPECT_EQ(st.violations, 0) << st.first;
    EXPECT_LE(st.relL2, tol(p.c.state)) << st.first;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ScanGpu,
    ::testing::Values(
        Case{"fp32_odd"},
        Case{"bf16_groups", 3, 64, 16, 257, 2, DType::BF16},
        Case{"fp16_constBC_plain_N1", 2, 33, 1, 129, 1, DType::F16, DType::F32, false, false, false},
        Case{"fp32_N64_Bconst", 1, 40, 64, 50, 1, DType::F32, DType::F32, false, true},
        Case{"spans_states_fp32", 2, 32, 16, 1000, 1, DType::F32, DType::F32, true, true, true, true},
        Case{"packed_states_bf16", 1, 40, 8, 0, 1, DType::BF16, DType::BF16, true, true, true, true, {5, 300, 1, 700, 64}},
        Case{"packed_spans_fp32", 1, 24, 16, 0, 2, DType::F32, DType::F16, true, false, true, true, {1100, 3, 257, 256, 600}}),
    [](const auto& info) { return std::string(info.param.name); });

// Every sequence of a packed row (several longer than a span) gives, bit for bit, the out and
// final state of running it alone as a batch of one.
TEST(ScanGpuPacking, PackedEqualsEachSequenceAlone) {
  SSMJIT_REQUIRE_GPU();
  for (DType x : {DType::F32, DType::BF16}) {
    Case pc{"packed", 1, 40, 16, 0, 1, x, DType::F32, true, true, true, true, {700, 5, 300, 1, 513, 256}};
    Problem packed(pc);
    const DeviceRun rp = runOnDevice(packed);
    int64_t start = 0;
    for (size_t i = 0; i < pc.lens.size(); ++i) {
      const int64_t len = pc.lens[i];
      Case sc{"alone", 1, pc.D, pc.N, len, 1, x, DType::F32, true, true, true, true};
      Problem alone(sc);
      // Copy the sequence's inputs and its initial state into the single-sequence problem.
      auto copyTokens = [&](int k) {
        const TensorView src = packed.t[k].view(), dst = alone.t[k].view();
        forEachElement(dst, [&](int64_t off, const std::vector<int64_t>& idx) {
          int64_t so = 0;
          for (int dd = 0; dd < src.ndim; ++dd) so += (dd == src.ndim - 1 ? idx[dd] + start : idx[dd]) * src.strides[dd];
          storeElement(dst, off, loadElement(src, so));
        });
      };
      for (int k : {Problem::U, Problem::Delta, Problem::Z, Problem::Bm, Problem::Cm}) copyTokens(k);
      for (int k : {Problem::A, Problem::Dv, Problem::Bias}) alone.t[k].bytes = packed.t[k].bytes;
      const int64_t slotIn = static_cast<int64_t>(loadElement(packed.t[Problem::InitIdx].view(), static_cast<int64_t>(i)));
      const int64_t slotOut = static_cast<int64_t>(loadElement(packed.t[Problem::FinIdx].view(), static_cast<int64_t>(i)));
      // The single sequence reads slot S-1 (or -1) and writes slot S-1 (or not).
      storeElement(alone.t[Problem::InitIdx].view(), 0, slotIn < 0 ? -1.0 : static_cast<double>(alone.S - 1));
      storeElement(alone.t[Problem::FinIdx].view(), 0, slotOut < 0 ? -1.0 : static_cast<double>(alone.S - 1));
      const int64_t DN = pc.D * pc.N;
      if (slotIn >= 0)
        for (int64_t e = 0; e < DN; ++e)
          storeElement(alone.t[Problem::Init].view(), (alone.S - 1) * DN + e,
                       loadElement(packed.t[Problem::Init].view(), slotIn * DN + e));
      const DeviceRun ra = runOnDevice(alone);
      const int64_t eb = dtypeBytes(x), T = static_cast<int64_t>(packed.t[Problem::Out].meta.shape[2]);
      for (int64_t ch = 0; ch < pc.D; ++ch)
        ASSERT_EQ(0, std::memcmp(rp.out.data() + (ch * T + start) * eb, ra.out.data() + ch * len * eb, len * eb))
            << dtypeName(x) << " sequence " << i << " channel " << ch;
      if (slotOut >= 0)
        ASSERT_EQ(0, std::memcmp(rp.states.data() + slotOut * DN * 4, ra.states.data() + (alone.S - 1) * DN * 4, DN * 4))
            << dtypeName(x) << " final state of sequence " << i;
      start += len;
    }
  }
}

TEST(ScanGpuPacking, BadCuSeqlensAreReported) {
  SSMJIT_REQUIRE_GPU();
  Case c{"bad", 1, 16, 4, 0, 1, DType::F32, DType::F32, true, true, false, false, {10, 20, 30}};
  Problem p(c);
  storeElement(p.t[Problem::Cu].view(), 2, 5.0);  // 0, 10, 5, 60: not increasing
  DeviceTensors d(p.all());
  SelectiveScanArgs a = p.args([&](int k) { return d.view(static_cast<size_t>(k), p.t[k]); });
  selective_scan(a);
  try {
    checkDeviceErrors();
    FAIL() << "no error reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cu_seqlens[1] = 10"), std::string::npos) << e.what();
  }
}

}  // namespace

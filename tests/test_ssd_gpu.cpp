// The SSD chunked scan on the GPU against the float64 reference (reference::ssd, a plain
// recurrence checked on the CPU against the quadratic and chunked forms): fresh random inputs,
// poisoned outputs and workspace; Mamba-2 2.7B-like heads scaled down, groups, small heads and
// states, lengths 1 to 1000 around the chunk sizes 64, 128 and 256, bf16 and fp32, D per head and
// per channel, z on and off, dt_bias with softplus and the clamp; packed rows with initial and
// final states through slots, block (prefix-cache) states and the sequences' decays; a packed
// sequence equals its own call bitwise; a states-only call (no out) leaves the same states. The
// checks only the device can make (cu_seqlens and slot values) are reported by
// checkDeviceErrors() naming the argument, and the other sequences still match the reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "GpuTest.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/ops/SsdSpec.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tools/problems/ConvProblem.h"  // DeviceTensors
#include "tools/problems/HostTensor.h"

using namespace ssmjit;
using namespace ssmjit::testing;

namespace {

struct SsdCase {
  std::string label;
  int64_t batch = 1, L = 0;   // dense rows
  std::vector<int64_t> lens;  // packed: one row of these sequences
  int64_t H = 8, P = 64, G = 1, N = 128, Q = 256;
  DType x = DType::BF16;  // x, dt, B, C, z, out
  DType states = DType::F32;
  bool dPerChannel = false, z = true, bias = true, softplus = true, clamp = false;
  bool init = false, final = false, slots = false, blocks = false, decay = false;
  bool packed() const { return !lens.empty(); }
  std::string name() const { return label; }
};

HostTensor tensor(DType t, const std::vector<int64_t>& shape) {
  std::mt19937_64 unused(0);
  return makeTensor(t, shape, Layout{}, unused);
}
int64_t offsetOf(const HostTensor& t, std::initializer_list<int64_t> idx) {
  int64_t off = 0, d = 0;
  for (int64_t i : idx) off += i * t.meta.strides[d++];
  return off;
}
double get(const HostTensor& t, std::initializer_list<int64_t> idx) { return loadElement(t.view(), offsetOf(t, idx)); }
void set(HostTensor& t, std::initializer_list<int64_t> idx, double v) { storeElement(t.view(), offsetOf(t, idx), v); }

// One call's host tensors (contiguous), the float64 results, and its sequences.
struct SsdProblem {
  SsdCase c;
  int64_t Bt = 0, L = 0, nseq = 0, stateSlots = 0, kmax = 0, K = 0;
  std::vector<int64_t> row, start, len, initSlot, finalSlot;
  HostTensor x, dt, A, B, C, D, z, dtb, cu, initStates, initIdx, finalIdx, blk, blkIdx, decay, out;
  float dtMin = 0, dtMax = 0;

  SsdProblem(const SsdCase& cs, uint64_t seed) : c(cs) {
    std::mt19937_64 rng(seed);
    nseq = c.packed() ? int64_t(c.lens.size()) : c.batch;
    Bt = c.packed() ? 1 : c.batch;
    for (int64_t i = 0, t = 0; i < nseq; ++i) {
      const int64_t n = c.packed() ? c.lens[i] : c.L;
      row.push_back(c.packed() ? 0 : i), start.push_back(c.packed() ? t : 0), len.push_back(n);
      t += c.packed() ? n : 0;
      L = c.packed() ? t : c.L;
    }
    x = tensor(c.x, {Bt, L, c.H, c.P}), fillUniform(x, rng, -1, 1);
    dt = tensor(c.x, {Bt, L, c.H});
    if (c.softplus)
      fillUniform(dt, rng, -4, -1);
    else
      fillUniform(dt, rng, 0.01, 0.2);
    A = tensor(DType::F32, {c.H}), fillUniform(A, rng, -4, -0.5);
    B = tensor(c.x, {Bt, L, c.G, c.N}), fillUniform(B, rng, -1, 1);
    C = tensor(c.x, {Bt, L, c.G, c.N}), fillUniform(C, rng, -1, 1);
    D = c.dPerChannel ? tensor(DType::F32, {c.H, c.P}) : tensor(DType::F32, {c.H}), fillUniform(D, rng, -1, 1);
    if (c.z) z = tensor(c.x, {Bt, L, c.H, c.P}), fillUniform(z, rng, -2, 2);
    if (c.bias) dtb = tensor(DType::F32, {c.H}), fillUniform(dtb, rng, c.softplus ? -1 : 0, c.softplus ? 0 : 0.05);
    if (c.clamp) dtMin = 0.02f, dtMax = 0.15f;
    if (c.packed()) {
      cu = tensor(DType::I32, {nseq + 1});
      for (int64_t i = 0; i <= nseq; ++i) set(cu, {i}, i < nseq ? start[i] : L);
    }
    // Slots: with indices, sequence i updates slot (i + 1) % S of S = nseq + 2 in place, except
    // that sequence 0 starts from zeros (-1) and sequence 1 writes nothing (-1).
    stateSlots = c.slots ? nseq + 2 : nseq;
    for (int64_t i = 0; i < nseq; ++i) {
      initSlot.push_back(!c.init ? -1 : !c.slots ? i : i == 0 ? -1 : (i + 1) % stateSlots);
      finalSlot.push_back(!c.final ? -1 : !c.slots ? i : i == 1 ? -1 : (i + 1) % stateSlots);
    }
    if (c.init || c.final) {
      initStates = tensor(c.states, {stateSlots, c.H, c.P, c.N});
      fillUniform(initStates, rng, -1, 1);
    }
    if (c.slots) {
      initIdx = tensor(DType::I32, {nseq}), finalIdx = tensor(DType::I64, {nseq});
      for (int64_t i = 0; i < nseq; ++i) set(initIdx, {i}, initSlot[i]), set(finalIdx, {i}, finalSlot[i]);
    }
    if (c.blocks) {  // blocks of two chunks; block (i, k) in slot i kmax + k, block 1 of sequence 0: -1
      K = 2 * c.Q;
      for (int64_t n : len) kmax = std::max(kmax, n / K);
      kmax = std::max<int64_t>(kmax, 1);
      blk = tensor(DType::F32, {nseq * kmax, c.H, c.P, c.N});
      blkIdx = tensor(DType::I32, {nseq, kmax});
      for (int64_t i = 0; i < nseq; ++i)
        for (int64_t k = 0; k < kmax; ++k) set(blkIdx, {i, k}, i == 0 && k == 1 ? -1 : i * kmax + k);
    }
    if (c.decay) decay = tensor(DType::F32, {nseq, c.H});
    out = tensor(c.x, {Bt, L, c.H, c.P});
  }

  SsdArgs args(const std::vector<TensorView>& v) const {
    SsdArgs a;
    a.x = v[0], a.dt = v[1], a.A = v[2], a.B = v[3], a.C = v[4], a.D = v[5], a.z = v[6], a.dt_bias = v[7];
    a.cu_seqlens = v[8];
    a.initial_states = c.init ? v[9] : TensorView{};
    a.final_states = c.final ? v[9] : TensorView{};
    a.initial_state_indices = c.init ? v[10] : TensorView{};
    a.final_state_indices = c.final ? v[11] : TensorView{};
    a.block_states = v[12], a.block_state_indices = v[13], a.block_state_tokens = K;
    a.sequence_decay = v[14], a.out = v[15];
    a.dt_softplus = c.softplus, a.dt_min = dtMin, a.dt_max = dtMax, a.chunk_size = int(c.Q);
    return a;
  }
  std::vector<const HostTensor*> all() const {
    return {&x, &dt, &A, &B, &C, &D, &z, &dtb, &cu, &initStates, &initIdx, &finalIdx, &blk, &blkIdx, &decay, &out};
  }

  // The float64 reference on a copy of the problem: what out, the states holder (init and final
  // share it), the block states and the decays hold after the call.
  SsdProblem reference() const {
    SsdProblem r = *this;
    std::vector<TensorView> views;
    for (const HostTensor* h : r.all()) views.push_back(h->defined ? h->view() : TensorView{});
    reference::ssd(r.args(views));
    return r;
  }
};

// The device copies of a problem's tensors, the call on them, and what it left.
struct DeviceRun {
  std::vector<uint8_t> out, states, blk, decay;
};
// With `deviceError`, the report of checkDeviceErrors() after the call lands there ("" when none);
// without, a report fails the call. `split`: as context parallelism calls it, a summary (the
// decays only, from zero) then the call resumed (SsdSpec.h).
DeviceRun runOnDevice(const SsdProblem& p, bool withOut = true, std::string* deviceError = nullptr,
                      bool split = false) {
  const DeviceTensors d(p.all());
  SsdArgs a = p.args(d.views());
  if (!withOut) a.out = {};
  const int64_t ws = ssd_workspace_size(a);
  DeviceBuffer w(size_t(ws) * 4);
  w.fill(kPoison);  // its contents on entry must not matter
  a.workspace = TensorView::contiguous(w.data(), DType::F32, {ws});
  if (split) {
    SsdArgs summary = a;  // nothing the resumed call reads: no initial states, no slots written
    summary.out = summary.z = summary.D = summary.initial_states = summary.initial_state_indices = {};
    summary.final_states = summary.final_state_indices = summary.block_states = summary.block_state_indices = {};
    summary.block_state_tokens = 0;
    detail::ssdPhase(summary, detail::SsdPhase::Summary, nullptr);
    detail::ssdPhase(a, detail::SsdPhase::Resume, nullptr);
  } else {
    ssd(a);
  }
  try {
    checkDeviceErrors();
  } catch (const Error& e) {
    if (!deviceError) throw;
    *deviceError = e.what();
  }
  return {d.download(15), d.download(9), d.download(12), d.download(14)};
}

std::vector<char> allRows(const HostTensor& t) { return std::vector<char>(size_t(t.meta.shape[0]), 1); }

std::vector<SsdCase> cases() {
  std::vector<SsdCase> v;
  SsdCase c;
  c.label = "Heads27bBf16", c.batch = 2, c.L = 1000, c.init = c.final = c.decay = true;
  v.push_back(c);
  c = {};
  c.label = "Heads27bF32L257", c.L = 257, c.Q = 128, c.x = DType::F32, c.final = true, c.blocks = true;
  v.push_back(c);
  c = {};
  c.label = "G2P32N64Q64", c.batch = 2, c.L = 255, c.G = 2, c.P = 32, c.N = 64, c.Q = 64, c.dPerChannel = true;
  c.z = false, c.clamp = true, c.init = c.final = true;
  v.push_back(c);
  c = {};
  c.label = "L1Q128", c.batch = 3, c.L = 1, c.Q = 128, c.final = true;
  v.push_back(c);
  c = {};
  c.label = "L7F32Q64", c.L = 7, c.Q = 64, c.x = DType::F32, c.G = 2, c.P = 32, c.N = 64, c.init = c.final = true;
  v.push_back(c);
  c = {};
  c.label = "L256Q128RawDt", c.batch = 2, c.L = 256, c.Q = 128, c.z = c.bias = c.softplus = false, c.final = true;
  v.push_back(c);
  c = {};
  c.label = "PackedSlotsBlocksBf16", c.lens = {300, 1, 256, 7, 513}, c.Q = 128, c.init = c.final = c.slots = true;
  c.blocks = c.decay = true, c.states = DType::BF16;
  v.push_back(c);
  c = {};
  c.label = "F16Q128", c.batch = 2, c.L = 300, c.Q = 128, c.x = DType::F16, c.init = c.final = true;
  v.push_back(c);
  // The layer's call (no z): chunk_scan's D x from x's ring, row blocks that end inside a tile.
  c = {};
  c.label = "PackedNoZBf16Q128", c.lens = {100, 5, 300, 33}, c.Q = 128, c.z = false, c.final = true;
  v.push_back(c);
  c = {};
  c.label = "PackedF32Q64", c.lens = {64, 1000, 3}, c.Q = 64, c.x = DType::F32, c.P = 32, c.N = 64;
  c.init = c.final = c.slots = c.blocks = true, c.dPerChannel = true;
  v.push_back(c);
  return v;
}

int64_t longest(const SsdProblem& p) { return *std::max_element(p.len.begin(), p.len.end()); }

// What a run left against what the reference left on `ref` (a copy of p, its index tensors as
// the run should have followed them): out, the final states in the slots written (the others
// as they were), the block states likewise, the decays.
void expectMatchesReference(const SsdProblem& p, const SsdProblem& ref, const DeviceRun& r) {
  const Fp32Error e = fp32Recurrence(longest(p));
  expectWithin(compareTensor(ref.out, r.out, allRows(p.out)), bound(p.c.x, e), "out");
  if (p.c.final) {
    std::vector<char> written(size_t(p.stateSlots), 0);
    for (int64_t i = 0; i < p.nseq; ++i) {
      const int64_t s = p.c.slots ? int64_t(get(ref.finalIdx, {i})) : i;
      if (s >= 0) written[size_t(s)] = 1;
    }
    expectWithin(compareTensor(ref.initStates, r.states, p.initStates.bytes, written), bound(p.c.states, e),
                 "final_states");
  }
  if (p.c.blocks) {
    std::vector<char> written(size_t(p.blk.meta.shape[0]), 0);
    for (int64_t i = 0; i < p.nseq; ++i)
      for (int64_t k = 0; k < p.len[i] / p.K; ++k) {
        const int64_t s = int64_t(get(ref.blkIdx, {i, k}));
        if (s >= 0) written[size_t(s)] = 1;
      }
    expectWithin(compareTensor(ref.blk, r.blk, p.blk.bytes, written), bound(DType::F32, e), "block_states");
  }
  if (p.c.decay) expectWithin(compareTensor(ref.decay, r.decay, allRows(p.decay)), bound(DType::F32, e), "decay");
}

class SsdGpu : public ::testing::TestWithParam<SsdCase> {};

TEST_P(SsdGpu, MatchesReference) {
  SSMJIT_REQUIRE_GPU();
  const SsdProblem p(GetParam(), 44);
  const DeviceRun r = runOnDevice(p);
  const SsdProblem ref = p.reference();
  expectMatchesReference(p, ref, r);
}
INSTANTIATE_TEST_SUITE_P(Shapes, SsdGpu, ::testing::ValuesIn(cases()), ByName());

// Sequence i of a packed problem as a dense call of one row: the same tokens, its initial state
// in slot 0, its final state to slot 0.
SsdProblem alone(const SsdProblem& packed, int64_t i) {
  SsdCase c = packed.c;
  c.lens.clear(), c.batch = 1, c.L = packed.len[i], c.slots = false, c.blocks = false, c.decay = false;
  SsdProblem a(c, 1);
  const int64_t t0 = packed.start[i], n = packed.len[i];
  auto copyTokens = [&](const HostTensor& from, HostTensor& to) {
    if (!from.defined) return;
    const int64_t perToken = from.meta.strides[1] * dtypeBytes(from.meta.dtype);
    std::memcpy(to.bytes.data(), from.bytes.data() + t0 * perToken, size_t(n * perToken));
  };
  copyTokens(packed.x, a.x), copyTokens(packed.dt, a.dt), copyTokens(packed.B, a.B), copyTokens(packed.C, a.C);
  copyTokens(packed.z, a.z);
  a.A.bytes = packed.A.bytes, a.D.bytes = packed.D.bytes, a.dtb.bytes = packed.dtb.bytes;
  const int64_t HPN = c.H * c.P * c.N, eb = dtypeBytes(c.states);
  a.initSlot = {packed.initSlot[i] >= 0 ? 0 : -1};
  if (packed.initSlot[i] >= 0)
    std::memcpy(a.initStates.bytes.data(), packed.initStates.bytes.data() + packed.initSlot[i] * HPN * eb,
                size_t(HPN * eb));
  else
    a.c.init = false;
  return a;
}

void expectPackedEqualsEachAlone(const SsdCase& pc) {
  const SsdProblem packed(pc, 7);
  const DeviceRun rp = runOnDevice(packed);
  const int64_t perToken = packed.c.H * packed.c.P * dtypeBytes(pc.x), HPN = pc.H * pc.P * pc.N;
  const int64_t eb = dtypeBytes(pc.states);
  for (int64_t i = 0; i < packed.nseq; ++i) {
    const SsdProblem a = alone(packed, i);
    const DeviceRun ra = runOnDevice(a);
    ASSERT_EQ(0, std::memcmp(rp.out.data() + packed.start[i] * perToken, ra.out.data(), size_t(a.L * perToken)))
        << "out of sequence " << i;
    if (packed.finalSlot[i] >= 0) {
      ASSERT_EQ(0, std::memcmp(rp.states.data() + packed.finalSlot[i] * HPN * eb, ra.states.data(), size_t(HPN * eb)))
          << "final state of sequence " << i;
    }
  }
}

TEST(SsdGpuPacking, PackedEqualsEachSequenceAlone) {
  SSMJIT_REQUIRE_GPU();
  for (const SsdCase& c : cases())
    if (c.packed()) {
      SCOPED_TRACE(c.label);
      expectPackedEqualsEachAlone(c);
    }
}

// Without out only the states are computed (context parallelism's first pass): the same bits.
TEST(SsdGpuPacking, StatesOnlyCallLeavesTheSameStates) {
  SSMJIT_REQUIRE_GPU();
  const SsdProblem p(cases()[6], 9);
  const DeviceRun full = runOnDevice(p), statesOnly = runOnDevice(p, false);
  EXPECT_EQ(full.states, statesOnly.states);
  EXPECT_EQ(full.blk, statesOnly.blk);
  EXPECT_EQ(full.decay, statesOnly.decay);
  EXPECT_EQ(statesOnly.out, p.out.bytes) << "out is not written";
}

// Context parallelism's split call: the summary, which leaves the chunks' states from zero in the
// workspace, then the resumed call, equal one whole call bit for bit (dense rows with initial and
// final states; a packed row with slots and block states).
TEST(SsdGpuPacking, SummaryThenResumeEqualsOneCall) {
  SSMJIT_REQUIRE_GPU();
  for (int k : {0, 6}) {
    const SsdProblem p(cases()[k], 13);
    SCOPED_TRACE(p.c.label);
    ASSERT_TRUE(p.c.decay) << "the summary needs an output: the decays";
    const DeviceRun whole = runOnDevice(p), split = runOnDevice(p, true, nullptr, true);
    EXPECT_EQ(whole.out, split.out);
    EXPECT_EQ(whole.states, split.states);
    EXPECT_EQ(whole.blk, split.blk);
    EXPECT_EQ(whole.decay, split.decay);
  }
}

// chunk_state passes the states along itself (a chain of programs, no state_passing launch)
// unless the call asks for sequence decays: both forms leave the same bits (the same operations in
// the same order). Dense rows with initial and final states, a packed row with slots and block
// states, and two long chains (71 chunks a sequence) that span many waves of programs.
TEST(SsdGpuPacking, ChunkStatePassingTheStatesEqualsStatePassing) {
  SSMJIT_REQUIRE_GPU();
  SsdCase longChain;
  longChain.label = "LongChainQ64", longChain.batch = 2, longChain.L = 64 * 70 + 5, longChain.Q = 64;
  longChain.H = 24, longChain.init = longChain.final = longChain.decay = true;
  for (const SsdCase& c : {cases()[0], cases()[6], longChain}) {
    ASSERT_TRUE(c.decay) << c.label << ": the decays select state_passing";
    const SsdProblem p(c, 29);
    SCOPED_TRACE(c.label);
    SsdProblem chained = p;
    chained.decay = HostTensor{};
    const DeviceRun passed = runOnDevice(p), chain = runOnDevice(chained);
    EXPECT_EQ(passed.out, chain.out);
    EXPECT_EQ(passed.states, chain.states);
    EXPECT_EQ(passed.blk, chain.blk);
  }
}

// Two runs of the same call are equal bit for bit.
TEST(SsdGpuPacking, RepeatedRunsAreBitwiseEqual) {
  SSMJIT_REQUIRE_GPU();
  const SsdProblem p(cases()[0], 3);
  const DeviceRun a = runOnDevice(p), b = runOnDevice(p);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.states, b.states);
}

// ---- the checks only the device can make ------------------------------------------------------

// The packed case with slots and blocks (lengths 300, 1, 256, 7, 513; chunk 128; blocks of 256
// tokens; S = 7 state slots, 10 block slots).
const SsdCase& packedSlotsCase() {
  static const SsdCase c = cases()[6];
  return c;
}

// A bad slot index is reported naming the entry, that read or write is skipped, and every other
// result equals the reference's with the entry -1.
TEST(SsdDeviceChecksGpu, BadSlotsAreReportedAndSkipped) {
  SSMJIT_REQUIRE_GPU();
  ASSERT_TRUE(packedSlotsCase().slots && packedSlotsCase().blocks);
  const int64_t i = 2;
  for (int which : {0, 1, 2}) {
    SsdProblem p(packedSlotsCase(), 17 + uint64_t(which));
    SsdProblem expected = p;
    std::string want;
    if (which == 0) {
      set(p.initIdx, {i}, double(p.stateSlots + 7)), set(expected.initIdx, {i}, -1);
      want = "ssd: initial_state_indices[2] = " + std::to_string(p.stateSlots + 7) + " is out of range [0, " +
             std::to_string(p.stateSlots) + ")";
    } else if (which == 1) {
      set(p.finalIdx, {i}, double(p.stateSlots + 7)), set(expected.finalIdx, {i}, -1);
      want = "ssd: final_state_indices[2] = " + std::to_string(p.stateSlots + 7) + " is out of range [0, " +
             std::to_string(p.stateSlots) + ")";
    } else {
      ASSERT_GE(p.len[i] / p.K, 1);
      const int64_t slots = p.blk.meta.shape[0];
      set(p.blkIdx, {i, 0}, double(slots + 3)), set(expected.blkIdx, {i, 0}, -1);
      want = "ssd: block_state_indices[2, :] holds " + std::to_string(slots + 3) + ", which is out of range [0, " +
             std::to_string(slots) + ")";
    }
    SCOPED_TRACE(want);
    checkDeviceErrors();  // nothing stale from earlier tests
    std::string reported;
    const DeviceRun r = runOnDevice(p, true, &reported);
    EXPECT_EQ(reported.rfind(want, 0), 0u) << reported;
    EXPECT_NO_THROW(checkDeviceErrors()) << "the record is reset after a report";
    expectMatchesReference(p, expected.reference(), r);
  }
}

// A bad cu_seqlens entry (sequence 2 ends before it starts) and a sequence with more blocks than
// block_state_indices has columns are reported naming the entry and the sequence.
TEST(SsdDeviceChecksGpu, BadCuSeqlensAndBlockCountAreReported) {
  SSMJIT_REQUIRE_GPU();
  SsdProblem p(packedSlotsCase(), 23);
  const int64_t end2 = int64_t(get(p.cu, {3}));
  set(p.cu, {2}, double(end2 + 43));
  checkDeviceErrors();
  std::string reported;
  runOnDevice(p, true, &reported);
  const std::string want = "ssd: cu_seqlens[2] = " + std::to_string(end2 + 43) +
                           ", cu_seqlens[2 + 1] = " + std::to_string(end2) +
                           ": expected cu_seqlens[0] = 0, strictly increasing";
  EXPECT_EQ(reported.rfind(want, 0), 0u) << reported;
  EXPECT_NO_THROW(checkDeviceErrors());

  // One column of block slots; sequence 4 (513 tokens) completes two blocks of 256.
  SsdProblem q(packedSlotsCase(), 24);
  ASSERT_EQ(q.len[4] / q.K, 2);
  q.kmax = 1;
  q.blkIdx = tensor(DType::I32, {q.nseq, 1});
  for (int64_t s = 0; s < q.nseq; ++s) set(q.blkIdx, {s, 0}, double(s));
  checkDeviceErrors();
  reported.clear();
  runOnDevice(q, true, &reported);
  EXPECT_EQ(reported.rfind("ssd: sequence 4 completes 2 blocks of block_state_tokens, expected at most "
                           "block_state_indices' kmax = 1",
                           0),
            0u)
      << reported;
  EXPECT_NO_THROW(checkDeviceErrors());
}

}  // namespace

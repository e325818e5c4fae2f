// The selective scan on the GPU against the float64 reference: fresh random inputs, poisoned
// outputs, odd channel counts, state sizes and lengths, constant and time-varying B/C with groups,
// every dtype (mixed per tensor), strided layouts, sequences shorter than a span and longer than
// several (the states pass), dense and packed rows with initial and final states through slots
// (in place or separate, -1 slots); packed output and final states equal running each sequence
// alone, bit for bit; bad cu_seqlens are reported.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "GpuTest.h"
#include "runtime/DeviceBuffer.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tools/problems/HostTensor.h"
#include "tools/problems/ScanProblem.h"

using namespace ssmjit;
using namespace ssmjit::testing;

namespace {

// Runs the op on device copies of p's tensors with a poisoned workspace; returns the device bytes
// of out and of the final-states holder (empty without one).
struct DeviceRun {
  std::vector<uint8_t> out, states;
};
DeviceRun runOnDevice(ScanProblem& p) {
  DeviceTensors d(p.all());
  SelectiveScanArgs a = deviceArgs(p, d);
  const int64_t ws = std::max<int64_t>(selective_scan_workspace_size(a), 1);
  DeviceBuffer w(static_cast<size_t>(ws) * 4);
  w.fill(kPoison);  // its contents on entry must not matter
  a.workspace = TensorView::contiguous(w.data(), DType::F32, {ws});
  selective_scan(a);
  checkDeviceErrors();
  DeviceRun r;
  r.out = d.download(3);
  if (p.c.finalStates) r.states = d.download(p.inPlace() ? 10 : 12);
  return r;
}

ScanCase allDtypes(ScanCase c, DType all) {
  c.uType = c.deltaType = c.zType = c.outType = c.bType = c.cType = all;
  return c;
}

std::vector<ScanCase> cases() {
  std::vector<ScanCase> v;
  ScanCase c;
  c.batch = 2, c.D = 37, c.N = 13, c.L = 300;  // two spans of D 37's 256
  v.push_back(c);
  c = allDtypes({}, DType::BF16);
  c.batch = 3, c.D = 64, c.N = 16, c.L = 257, c.G = 2;
  v.push_back(c);
  c = allDtypes({}, DType::F16);  // constant B/C, N 1, nothing optional
  c.batch = 2, c.D = 33, c.N = 1, c.L = 129, c.bVarying = c.cVarying = false;
  c.hasD = c.hasZ = c.hasDeltaBias = c.softplus = false;
  v.push_back(c);
  c = {};
  c.batch = 1, c.D = 40, c.N = 64, c.L = 50, c.bVarying = false;
  v.push_back(c);
  c = {};  // four spans, states in place through permuted slots
  c.batch = 2, c.D = 32, c.N = 16, c.L = 1000, c.initialStates = c.finalStates = c.slotIndices = true;
  v.push_back(c);
  c = allDtypes({}, DType::BF16);
  c.D = 40, c.N = 8, c.lens = {5, 300, 1, 700, 64, 5, 300}, c.stateType = DType::BF16;  // ties ranked by index
  c.initialStates = c.finalStates = c.slotIndices = true;
  v.push_back(c);
  c = {};  // separate states, int64 indices, max_seqlen, fp16 states, grouped constant C
  c.D = 24, c.N = 16, c.G = 2, c.cVarying = false, c.lens = {1100, 3, 257, 256, 600}, c.maxSeqlen = 1100;
  c.stateType = DType::F16, c.initialStates = c.finalStates = c.slotIndices = true, c.inPlace = false;
  c.indexType = DType::I64;
  v.push_back(c);
  c = {};  // mixed dtypes, strided, initial states only
  c.batch = 3, c.D = 48, c.N = 12, c.L = 517, c.uType = DType::BF16, c.zType = DType::F16, c.bType = DType::BF16;
  c.strided = true, c.initialStates = true;
  v.push_back(c);
  c = allDtypes({}, DType::BF16);  // 150 sequences of 1..64 tokens: 1050 programs (min_blocks 5)
  c.D = 112, c.N = 16;
  for (int i = 0; i < 150; ++i) c.lens.push_back(1 + (i * 29) % 64);
  c.initialStates = c.finalStates = c.slotIndices = true;
  v.push_back(c);
  c = allDtypes({}, DType::BF16);  // 1104 tokens (div 16): vector runs beside partial tiles
  c.D = 64, c.N = 16, c.lens = {100, 37, 700, 3, 64, 200}, c.initialStates = c.finalStates = true;
  v.push_back(c);
  c = {};  // strided packed row, final states only, bf16 out
  c.D = 70, c.N = 5, c.lens = {31, 2, 513, 90}, c.outType = DType::BF16, c.deltaType = DType::BF16;
  c.strided = true, c.finalStates = true, c.slotIndices = true;
  v.push_back(c);
  // State chunks (ScanStateChunks.h): N 256 as sixteen chunks of 16 over two spans, states in
  // place through slots, bf16; N 100 as six chunks of 16 and one of 4 on a strided packed row
  // with constant B, fp16 final states only.
  c = allDtypes({}, DType::BF16);
  c.batch = 2, c.D = 24, c.N = 256, c.L = 700, c.initialStates = c.finalStates = c.slotIndices = true;
  v.push_back(c);
  c = {};
  c.D = 36, c.N = 100, c.lens = {3, 600, 41, 257}, c.bVarying = false, c.strided = true, c.finalStates = true;
  c.stateType = DType::F16;
  v.push_back(c);
  // D 4096 (serial_len 2048, SelectiveScan.h): a packed row in both length classes (equal lengths
  // ranked by index), with states through slots; and dense rows of the serial class.
  c = allDtypes({}, DType::BF16);
  c.D = 4096, c.N = 16, c.lens = {2049, 3, 2048, 700, 64, 1, 64, 2048}, c.serialSeqlen = 2048;
  c.initialStates = c.finalStates = c.slotIndices = true;
  v.push_back(c);
  c = {};
  c.batch = 2, c.D = 4096, c.N = 16, c.L = 333, c.serialSeqlen = 2048, c.initialStates = c.finalStates = true;
  v.push_back(c);
  // Dense rows of whole tiles (L a multiple of 64, scanTilesWhole): one tile body, no masks along
  // time; four spans with states in place through slots, and bf16 with groups.
  c = {};
  c.batch = 2, c.D = 32, c.N = 16, c.L = 1024, c.initialStates = c.finalStates = c.slotIndices = true;
  v.push_back(c);
  c = allDtypes({}, DType::BF16);
  c.batch = 3, c.D = 64, c.N = 16, c.L = 512, c.G = 2;
  v.push_back(c);
  // Dense rows of 1024 programs: held to 4 blocks an SM, the tile's register loops unrolled in the
  // source (unroll_lines); whole tiles in bf16 with states through slots, a partial one in fp32.
  c = allDtypes({}, DType::BF16);
  c.batch = 64, c.D = 256, c.N = 16, c.L = 128, c.initialStates = c.finalStates = c.slotIndices = true;
  v.push_back(c);
  c = {};
  c.batch = 64, c.D = 256, c.N = 16, c.L = 200;
  v.push_back(c);
  return v;
}

class ScanGpu : public GpuTest, public ::testing::WithParamInterface<ScanCase> {};

TEST_P(ScanGpu, MatchesReference) {
  ScanProblem p(GetParam());
  const std::vector<uint8_t> statesBefore = p.c.finalStates ? p.finalHolder().bytes : std::vector<uint8_t>{};
  const DeviceRun r = runOnDevice(p);
  reference::selective_scan(p.args());
  const int64_t rows = p.out.meta.shape[0];
  const Fp32Error e = fp32Recurrence(p.longest());
  expectWithin(compareTensor(p.out, r.out, std::vector<char>(static_cast<size_t>(rows), 1)), bound(p.c.outType, e),
               "out");
  if (p.c.finalStates)
    expectWithin(compareTensor(p.finalHolder(), r.states, statesBefore, p.slotsWritten()), bound(p.c.stateType, e),
                 "final_states");
}

INSTANTIATE_TEST_SUITE_P(Shapes, ScanGpu, ::testing::ValuesIn(cases()), ByName());

// Every sequence of a packed row gives, bit for bit, the out and final state of running it alone
// as a batch of one.
void expectPackedEqualsEachSequenceAlone(const ScanCase& pc) {
  const DType x = pc.uType;
  ScanProblem packed(pc);
  const DeviceRun rp = runOnDevice(packed);
  const int64_t DN = pc.D * pc.N, eb = dtypeBytes(x), T = packed.out.meta.shape[2];
  for (size_t i = 0; i < pc.lens.size(); ++i) {
    ScanCase sc = pc;
    sc.lens.clear(), sc.batch = 1, sc.L = pc.lens[i];
    ScanProblem alone(sc);
    const int64_t start = packed.start[i];
    copyTokens(packed.u, alone.u, start), copyTokens(packed.delta, alone.delta, start);
    copyTokens(packed.z, alone.z, start), copyTokens(packed.B, alone.B, start), copyTokens(packed.C, alone.C, start);
    for (auto [f, t] : {std::pair{&packed.A, &alone.A}, {&packed.Dv, &alone.Dv}, {&packed.deltaBias, &alone.deltaBias}})
      t->bytes = f->bytes;
    // Sequence i starts from slot i (no indices); alone, from slot 0.
    std::memcpy(alone.initStates.bytes.data(), packed.initStates.bytes.data() + i * DN * 4, DN * 4);
    const DeviceRun ra = runOnDevice(alone);
    for (int64_t ch = 0; ch < pc.D; ++ch)
      ASSERT_EQ(0, std::memcmp(rp.out.data() + (ch * T + start) * eb, ra.out.data() + ch * sc.L * eb, sc.L * eb))
          << dtypeName(x) << " sequence " << i << " channel " << ch;
    ASSERT_EQ(0, std::memcmp(rp.states.data() + i * DN * 4, ra.states.data(), DN * 4))
        << dtypeName(x) << " final state of sequence " << i;
  }
}

// Several sequences longer than a span.
TEST(ScanGpuPacking, PackedEqualsEachSequenceAlone) {
  SSMJIT_REQUIRE_GPU();
  for (DType x : {DType::F32, DType::BF16}) {
    ScanCase pc = allDtypes({}, x);
    pc.D = 40, pc.N = 16, pc.lens = {700, 5, 300, 1, 513, 256}, pc.initialStates = pc.finalStates = true;
    expectPackedEqualsEachSequenceAlone(pc);
    pc.lens = {700, 5, 300, 1, 513, 257};  // 1776 tokens (div 16): whole tiles' runs in vectors
    expectPackedEqualsEachSequenceAlone(pc);
  }
}

// serial_seqlen 2048: the sequences of at most 2048 tokens are scanned serially, tiles on the packed row's
// grid, and the longer ones in parallel: each class equals its sequences alone. The serial class
// splits a channel's states over threads by the call's sequences (runtime/ops/SelectiveScan.cpp):
// packed, 5 sequences take 2 a channel and 10 take 1, a sequence alone more; y's fixed tree of
// state groups keeps the bits.
TEST(ScanGpuPacking, LengthClassesEqualEachAlone) {
  SSMJIT_REQUIRE_GPU();
  ScanCase pc = allDtypes({}, DType::BF16);
  pc.D = 4096, pc.N = 16, pc.lens = {2100, 5, 2048, 301, 9}, pc.initialStates = pc.finalStates = true;
  pc.serialSeqlen = 2048;
  expectPackedEqualsEachSequenceAlone(pc);
  pc.lens = {2100, 5, 2048, 301, 9, 64, 1, 700, 33, 128};
  expectPackedEqualsEachSequenceAlone(pc);
  pc.N = 4;  // two groups of two states: one thread a channel packed, two alone
  expectPackedEqualsEachSequenceAlone(pc);
}

// Over 16 states, in chunks of states: the sums over states cross the chunks through the
// workspace in a fixed order, the same for a sequence packed or alone.
TEST(ScanGpuPacking, StateChunksEqualEachAlone) {
  SSMJIT_REQUIRE_GPU();
  ScanCase pc = allDtypes({}, DType::BF16);
  pc.D = 40, pc.N = 72, pc.lens = {300, 7, 520, 64}, pc.initialStates = pc.finalStates = true;
  expectPackedEqualsEachSequenceAlone(pc);
}

// 200 short sequences: enough programs (1200) that the packed row is compiled for 5 blocks an SM
// (registers capped, some spilled) while each sequence alone is not; the results stay bitwise.
TEST(ScanGpuPacking, ManySequencesEqualEachAlone) {
  SSMJIT_REQUIRE_GPU();
  ScanCase pc = allDtypes({}, DType::BF16);
  pc.D = 96, pc.N = 16, pc.initialStates = pc.finalStates = true;
  for (int i = 0; i < 200; ++i) pc.lens.push_back(1 + (i * 37) % 41);
  expectPackedEqualsEachSequenceAlone(pc);
}

// cu_seqlens 0, 0, 30, 60: sequence 0 is empty; 0, 1000, 30, 60: sequence 0 ends past the row's
// 60 tokens and sequence 1 ends before it starts (either may be the one reported). Reported, and
// (under compute-sanitizer) nothing is read or written outside the tensors.
TEST(ScanGpuPacking, BadCuSeqlensAreReported) {
  SSMJIT_REQUIRE_GPU();
  for (const auto& [cu1, expected] :
       {std::pair{0.0, "cu_seqlens[0] = 0, cu_seqlens[0 + 1] = 0"}, std::pair{1000.0, "= 1000"}}) {
    ScanCase c;
    c.D = 16, c.N = 4, c.lens = {10, 20, 30};
    ScanProblem p(c);
    storeElement(p.cu.view(), 1, cu1);
    DeviceTensors d(p.all());
    selective_scan(deviceArgs(p, d));
    try {
      checkDeviceErrors();
      ADD_FAILURE() << "no error reported for cu_seqlens[1] = " << cu1;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
}

}  // namespace

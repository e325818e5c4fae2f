// Every op on the layouts a model hands it (tests/LayoutCases.h): inputs sliced from one in_proj
// output, outputs and states inside wider buffers, pointers off 16-byte alignment, broadcast
// parameters, int64 indices and 16-bit dtypes, each against the float64 reference on the same
// bytes with the bounds of tools/problems/Tolerance.h. Outputs and every gap start as NaN poison;
// compareTensor holds every byte of a wider buffer outside the view to what it was.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "DecodeStepCheck.h"
#include "GpuTest.h"
#include "LayoutCases.h"
#include "ScanBackwardCheck.h"
#include "SsuTestUtil.h"
#include "runtime/DeviceBuffer.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"

using namespace ssmjit;
using namespace ssmjit::testing;
using namespace layouts;

namespace {

std::vector<char> allRows(const HostTensor& h) { return std::vector<char>(static_cast<size_t>(h.meta.shape[0]), 1); }
int64_t at(const HostTensor& t, int64_t i) {
  return static_cast<int64_t>(loadElement(t.view(), i * t.meta.strides[0]));
}

// A float32 workspace of `n` elements (at least one), poisoned: its contents must not matter.
TensorView poisonedWorkspace(DeviceBuffer& w, int64_t n) {
  n = std::max<int64_t>(n, 1);
  w = DeviceBuffer(static_cast<size_t>(n) * 4);
  w.fill(kPoison);
  return TensorView::contiguous(w.data(), DType::F32, {n});
}

// Runs `op` on the device copies d of p with a poisoned workspace of the size it asks for.
template <class Problem, class Args>
void runOnDevice(Problem& p, const DeviceTensors& d, int64_t (*workspaceSize)(const Args&),
                 void (*op)(const Args&, Stream)) {
  Args a = deviceArgs(p, d);
  DeviceBuffer ws;
  a.workspace = poisonedWorkspace(ws, workspaceSize(a));
  op(a, nullptr);
  checkDeviceErrors();
}

// ---- selective state update ---------------------------------------------------------------------

class SsuLayouts : public GpuTest, public ::testing::WithParamInterface<SsuLayoutCase> {};
TEST_P(SsuLayouts, MatchesFloat64Reference) {
  const SsuProblem p = placedProblem(GetParam());
  SsuProblem ref = p;
  runReference(ref);
  DeviceProblem dp(p);
  runOp(p.c.tokens, dp.args);
  checkDeviceErrors();
  ssutest::expectMatches(p, ref, dp.download(kOut), dp.download(kState), rowsWritten(p), p.slotMayBeWritten);
}
INSTANTIATE_TEST_SUITE_P(Layouts, SsuLayouts, ::testing::ValuesIn(ssuLayoutCases()), ByName());

// ---- causal conv1d --------------------------------------------------------------------------

// Slots the forward writes: the final slots (or 0..nseq-1).
std::vector<char> finalSlots(const ConvProblem& p) {
  std::vector<char> w(static_cast<size_t>(p.states.defined ? p.states.meta.shape[0] : 0), 0);
  if (!p.c.finalStates) return w;
  for (int64_t i = 0; i < static_cast<int64_t>(p.c.lens.size()); ++i) {
    const int64_t s = p.finalIdx.defined ? at(p.finalIdx, i) : i;
    if (s >= 0) w[static_cast<size_t>(s)] = 1;
  }
  return w;
}

class ConvLayouts : public GpuTest, public ::testing::WithParamInterface<ConvLayoutCase> {};
TEST_P(ConvLayouts, MatchesFloat64Reference) {
  ConvProblem ref = placedProblem(GetParam()), gpu = ref;
  DeviceTensors d(gpu.all());
  const std::vector<uint8_t> statesBefore = ref.states.bytes;
  reference::causal_conv1d(ref.args());
  causal_conv1d(deviceArgs(gpu, d));
  checkDeviceErrors();
  expectWithin(compareTensor(ref.out, d.download(3), allRows(ref.out)), bound(ref.c.xType, kFp32Short), "out");
  if (ref.c.initialStates || ref.c.finalStates)
    expectWithin(compareTensor(ref.states, d.download(6), statesBefore, finalSlots(ref)),
                 bound(ref.c.stateType, kExact), "states");
}
INSTANTIATE_TEST_SUITE_P(Layouts, ConvLayouts, ::testing::ValuesIn(convLayoutCases()), ByName());

class ConvBackwardLayouts : public GpuTest, public ::testing::WithParamInterface<ConvBackwardLayoutCase> {};
TEST_P(ConvBackwardLayouts, MatchesFloat64Reference) {
  enum : size_t { kDx = 10, kDweight = 11, kDbias = 12, kDinit = 13 };
  ConvBackwardProblem ref = placedProblem(GetParam()), gpu = ref;
  DeviceTensors d(gpu.all());
  const std::vector<uint8_t> dinitBefore = ref.dinit.bytes;
  reference::causal_conv1d_backward(ref.args());
  runOnDevice(gpu, d, causal_conv1d_backward_workspace_size, causal_conv1d_backward);
  const ConvBackwardCase& c = ref.c;
  expectWithin(compareTensor(ref.dx, d.download(kDx), allRows(ref.dx)), bound(c.xType, kFp32Short, c.dxTwiceRounded()),
               "dx");
  expectWithin(compareTensor(ref.dweight, d.download(kDweight), allRows(ref.dweight)), bound(c.wType, kFp32Short),
               "dweight");
  if (c.bias)
    expectWithin(compareTensor(ref.dbias, d.download(kDbias), allRows(ref.dbias)), bound(c.wType, kFp32Short), "dbias");
  if (c.dinitialStates) {
    std::vector<char> slots(static_cast<size_t>(ref.dinit.meta.shape[0]), 0);
    for (int64_t i = 0; i < static_cast<int64_t>(c.lens.size()); ++i) {
      const int64_t s = ref.initIdx.defined ? at(ref.initIdx, i) : i;
      if (s >= 0) slots[static_cast<size_t>(s)] = 1;
    }
    expectWithin(compareTensor(ref.dinit, d.download(kDinit), dinitBefore, slots), bound(c.stateType, kFp32Short),
                 "dinitial_states");
  }
}
INSTANTIATE_TEST_SUITE_P(Layouts, ConvBackwardLayouts, ::testing::ValuesIn(convBackwardLayoutCases()), ByName());

class ConvUpdateLayouts : public GpuTest, public ::testing::WithParamInterface<ConvUpdateLayoutCase> {};
TEST_P(ConvUpdateLayouts, MatchesFloat64Reference) {
  ConvUpdateProblem ref = placedProblem(GetParam()), gpu = ref;
  const ConvUpdateCase& c = ref.c;
  DeviceTensors d(gpu.all());
  const std::vector<uint8_t> before = ref.state.bytes;
  reference::causal_conv1d_update(ref.args());
  causal_conv1d_update(deviceArgs(gpu, d));
  checkDeviceErrors();
  std::vector<char> rows(static_cast<size_t>(c.batch), 1), slots(static_cast<size_t>(ref.state.meta.shape[0]), 0);
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t s = c.indices ? at(ref.idx, b) : b;
    if (s < 0)
      rows[static_cast<size_t>(b)] = 0;
    else if (c.commit)
      slots[static_cast<size_t>(s)] = 1;
  }
  expectWithin(compareTensor(ref.out, d.download(4), rows), bound(c.xType, kFp32Short), "out");
  expectWithin(compareTensor(ref.state, d.download(0), before, slots), bound(c.stateType, kExact), "state");
}
INSTANTIATE_TEST_SUITE_P(Layouts, ConvUpdateLayouts, ::testing::ValuesIn(convUpdateLayoutCases()), ByName());

// ---- Mamba-2 decode step --------------------------------------------------------------------

// Two steps (the drafts of the first replayed by the second, all accepted), each against the
// reference from the same start.
class DecodeLayouts : public GpuTest, public ::testing::WithParamInterface<DecodeLayoutCase> {};
TEST_P(DecodeLayouts, MatchesFloat64Reference) {
  DecodeProblem p = placedProblem(GetParam());
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    if (round > 0) p.nextRound(1);
    DeviceTensors d(p.all());  // the reference's state after the last round, the new drafts
    const DecodeStepBefore before(p);
    reference::mamba2_decode_step(p.state(), p.weights(), p.args());
    mamba2_decode_step(deviceState(p, d), deviceWeights(p, d), deviceArgs(p, d));
    checkDeviceErrors();
    expectStepMatches(p, d, before);
  }
}
INSTANTIATE_TEST_SUITE_P(Layouts, DecodeLayouts, ::testing::ValuesIn(decodeLayoutCases()), ByName());

// ---- selective scan ---------------------------------------------------------------------------

class ScanLayouts : public GpuTest, public ::testing::WithParamInterface<ScanLayoutCase> {};
TEST_P(ScanLayouts, MatchesFloat64Reference) {
  ScanProblem p = placedProblem(GetParam());
  const std::vector<uint8_t> statesBefore = p.c.finalStates ? p.finalHolder().bytes : std::vector<uint8_t>{};
  DeviceTensors d(p.all());
  runOnDevice(p, d, selective_scan_workspace_size, selective_scan);
  reference::selective_scan(p.args());
  const Fp32Error e = fp32Recurrence(p.longest());
  expectWithin(compareTensor(p.out, d.download(3), allRows(p.out)), bound(p.c.outType, e), "out");
  if (p.c.finalStates)
    expectWithin(compareTensor(p.finalHolder(), d.download(p.inPlace() ? 10 : 12), statesBefore, p.slotsWritten()),
                 bound(p.c.stateType, e), "final_states");
}
INSTANTIATE_TEST_SUITE_P(Layouts, ScanLayouts, ::testing::ValuesIn(scanLayoutCases()), ByName());

class ScanBackwardLayouts : public GpuTest, public ::testing::WithParamInterface<ScanBackwardLayoutCase> {};
TEST_P(ScanBackwardLayouts, MatchesFloat64Reference) {
  ScanBackwardProblem p = placedProblem(GetParam());
  const std::vector<uint8_t> dinitBefore = p.dinit.defined ? p.dinit.bytes : std::vector<uint8_t>{};
  DeviceTensors d(p.all());
  runOnDevice(p, d, selective_scan_backward_workspace_size, selective_scan_backward);
  reference::selective_scan_backward(p.args());
  expectGradients(
      p, [&](int k) { return d.download(static_cast<size_t>(k)); }, dinitBefore);
}
INSTANTIATE_TEST_SUITE_P(Layouts, ScanBackwardLayouts, ::testing::ValuesIn(scanBackwardLayoutCases()), ByName());

}  // namespace

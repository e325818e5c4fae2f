// Errors through the public ops on the GPU. Host-side checks the ops make themselves (not only
// the reference): the scan backward's arguments and workspace, the conv backward's workspace,
// each thrown before anything is launched, every output left as it was. Device-side checks: a
// bad slot in the conv update (the state update's are in test_ssu_gpu.cpp), bad conv and scan
// state slots, a scan sequence longer than max_seqlen and bad cu_seqlens in the scan backward,
// each reported by the next checkDeviceErrors() naming the argument and the entry.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "GpuTest.h"
#include "SsuTestUtil.h"
#include "runtime/DeviceBuffer.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tools/problems/ConvProblem.h"
#include "tools/problems/HostTensor.h"
#include "tools/problems/ScanBackwardProblem.h"
#include "tools/problems/ScanProblem.h"

using namespace ssmjit;
using namespace ssmjit::testing;

namespace {

// `call` throws InvalidArgument whose message holds `want`.
void expectThrowsNaming(const std::function<void()>& call, const std::string& want) {
  try {
    call();
    ADD_FAILURE() << "no error thrown, expected one naming \"" << want << "\"";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::InvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << "missing \"" << want << "\" in: " << e.what();
  }
}

// `launch` runs; the next checkDeviceErrors() reports InvalidArgument holding `want`, and the one
// after reports nothing (the record is reset).
void expectReported(const std::function<void()>& launch, const std::string& want) {
  checkDeviceErrors();  // nothing stale from earlier tests
  launch();
  expectThrowsNaming([] { checkDeviceErrors(); }, want);
  EXPECT_NO_THROW(checkDeviceErrors()) << "the record is reset after a report";
}

// ---- host-side checks of the ops themselves -------------------------------------------------

// The scan backward's own checks: a bad gradient or workspace throws naming it, and nothing is
// written (the gradients stay poisoned).
TEST(OpChecksGpu, ScanBackwardArgumentsAndWorkspace) {
  SSMJIT_REQUIRE_GPU();
  ScanBackwardCase c;
  c.fwd.batch = 2, c.fwd.D = 24, c.fwd.N = 8, c.fwd.L = 300;
  ScanBackwardProblem p(c);
  DeviceTensors d(p.all());
  const SelectiveScanBackwardArgs good = deviceArgs(p, d);
  const int64_t n = selective_scan_backward_workspace_size(good);
  ASSERT_GT(n, 0) << "the backward keeps checkpoints in its workspace";
  DeviceBuffer ws(static_cast<size_t>(n + 8) * 4);
  auto withWorkspace = [&](int64_t elems, DType t = DType::F32) {
    SelectiveScanBackwardArgs a = good;
    a.workspace = TensorView::contiguous(ws.data(), t, {elems});
    return a;
  };
  std::vector<std::pair<SelectiveScanBackwardArgs, std::string>> bad;
  bad.push_back({withWorkspace(n - 1), "workspace"});
  bad.push_back({withWorkspace(n, DType::F16), "workspace"});
  bad.push_back({good, "workspace"});  // none at all
  {
    SelectiveScanBackwardArgs a = withWorkspace(n);
    a.dz = {};  // forward.z is given
    bad.push_back({a, "dz"});
  }
  {
    SelectiveScanBackwardArgs a = withWorkspace(n);
    a.dA.shape[1] -= 1;
    bad.push_back({a, "dA"});
  }
  {
    SelectiveScanBackwardArgs a = withWorkspace(n);
    a.du = a.dout;  // an output aliasing an input
    bad.push_back({a, "du"});
  }
  for (const auto& [args, want] : bad) {
    SCOPED_TRACE(want);
    expectThrowsNaming([&] { selective_scan_backward(args); }, want);
  }
  checkDeviceErrors();
  for (int k = 16; k <= 24; ++k)
    if (p.all()[k]->defined) EXPECT_EQ(d.download(k), p.all()[k]->bytes) << "gradient " << k << " written";
  // The good call runs (the checks above did not reject it).
  selective_scan_backward(withWorkspace(n));
  EXPECT_NO_THROW(checkDeviceErrors());
}

// The conv backward's workspace checks: missing, too small, wrong dtype, strided.
TEST(OpChecksGpu, ConvBackwardWorkspace) {
  SSMJIT_REQUIRE_GPU();
  ConvBackwardCase c;
  c.lens = {300, 300};
  ConvBackwardProblem p(c);
  DeviceTensors d(p.all());
  const CausalConv1dBackwardArgs good = deviceArgs(p, d);
  const int64_t n = causal_conv1d_backward_workspace_size(good);
  ASSERT_GT(n, 1) << "dweight and dbias are summed through the workspace";
  DeviceBuffer ws(static_cast<size_t>(2 * n) * 4);
  auto with = [&](TensorView w) {
    CausalConv1dBackwardArgs a = good;
    a.workspace = w;
    return a;
  };
  TensorView strided = TensorView::contiguous(ws.data(), DType::F32, {n});
  strided.strides[0] = 2;
  const std::vector<CausalConv1dBackwardArgs> bad = {
      good,  // none
      with(TensorView::contiguous(ws.data(), DType::F32, {n - 1})),
      with(TensorView::contiguous(ws.data(), DType::BF16, {n})),
      with(strided),
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    expectThrowsNaming([&] { causal_conv1d_backward(bad[i]); }, "workspace");
  }
  checkDeviceErrors();
  for (int k = 10; k <= 13; ++k)
    if (p.all()[k]->defined) EXPECT_EQ(d.download(k), p.all()[k]->bytes) << "gradient " << k << " written";
}

// ---- device-side checks ---------------------------------------------------------------------

// The conv update: a bad slot skips its row (out untouched, no state written) and is reported.
TEST(DeviceChecksGpu, ConvUpdateBadSlot) {
  SSMJIT_REQUIRE_GPU();
  ConvUpdateCase c;
  c.batch = 4, c.slots = 6, c.L = 2, c.D = 40;
  ConvUpdateProblem p(c);
  const int64_t row = 0;
  ConvUpdateProblem expected = p;
  storeElement(expected.idx.view(), row, -1);
  const std::vector<uint8_t> stateBefore = p.state.bytes, outBefore = p.out.bytes;
  reference::causal_conv1d_update(expected.args());
  std::vector<char> rows(static_cast<size_t>(c.batch), 1), slots(static_cast<size_t>(c.slots), 0);
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t s = static_cast<int64_t>(loadElement(expected.idx.view(), b));
    if (s < 0)
      rows[size_t(b)] = 0;
    else
      slots[size_t(s)] = 1;
  }
  storeElement(p.idx.view(), row, double(c.slots + 3));
  DeviceTensors d(p.all());
  expectReported([&] { causal_conv1d_update(deviceArgs(p, d)); },
                 "state_indices[" + std::to_string(row) + "] = " + std::to_string(c.slots + 3));
  expectWithin(compareTensor(expected.out, d.download(4), outBefore, rows), bound(c.xType, kFp32Short), "out");
  expectWithin(compareTensor(expected.state, d.download(0), stateBefore, slots), bound(c.stateType, kExact), "state");
}

// The conv forward's initial and final state slots.
TEST(DeviceChecksGpu, ConvStateSlots) {
  SSMJIT_REQUIRE_GPU();
  for (int which : {0, 1}) {
    ConvCase c;
    c.packing = ConvPacking::CuSeqlens;
    c.lens = {10, 20, 30};
    c.initialStates = c.finalStates = c.slotIndices = true;
    ConvProblem p(c);
    HostTensor& idx = which == 0 ? p.initIdx : p.finalIdx;
    ASSERT_TRUE(idx.defined);
    const int64_t S = p.states.meta.shape[0];
    storeElement(idx.view(), 0, double(S + 2));
    DeviceTensors d(p.all());
    const std::string name = which == 0 ? "initial_state_indices[0] = " : "final_state_indices[0] = ";
    expectReported([&] { causal_conv1d(deviceArgs(p, d)); }, name + std::to_string(S + 2));
  }
}

// The scan's state slots and max_seqlen.
TEST(DeviceChecksGpu, ScanStateSlotsAndMaxSeqlen) {
  SSMJIT_REQUIRE_GPU();
  auto run = [](ScanProblem& p) {
    DeviceTensors d(p.all());
    SelectiveScanArgs a = deviceArgs(p, d);
    const int64_t n = std::max<int64_t>(selective_scan_workspace_size(a), 1);
    DeviceBuffer ws(static_cast<size_t>(n) * 4);
    a.workspace = TensorView::contiguous(ws.data(), DType::F32, {n});
    selective_scan(a);
    checkDeviceErrors();  // inside expectReported: the report is read here and rethrown
  };
  for (int which : {0, 1}) {
    ScanCase c;
    c.D = 16, c.N = 4, c.lens = {10, 20, 30};
    c.initialStates = c.finalStates = c.slotIndices = true;
    c.inPlace = false;
    ScanProblem p(c);
    HostTensor& idx = which == 0 ? p.initIdx : p.finalIdx;
    ASSERT_TRUE(idx.defined);
    storeElement(idx.view(), 0, double(p.S + 4));
    const std::string name = which == 0 ? "initial_state_indices[0] = " : "final_state_indices[0] = ";
    checkDeviceErrors();
    expectThrowsNaming([&] { run(p); }, name + std::to_string(p.S + 4));
    EXPECT_NO_THROW(checkDeviceErrors());
  }
  ScanCase c;
  c.D = 16, c.N = 4, c.lens = {10, 50, 5}, c.maxSeqlen = 20;  // sequence 1 is longer
  ScanProblem p(c);
  checkDeviceErrors();
  expectThrowsNaming([&] { run(p); }, "sequence 1 has 50 tokens, expected at most max_seqlen = 20");
  EXPECT_NO_THROW(checkDeviceErrors());
}

// The scan backward's cu_seqlens.
TEST(DeviceChecksGpu, ScanBackwardBadCuSeqlens) {
  SSMJIT_REQUIRE_GPU();
  ScanBackwardCase c;
  c.fwd.D = 16, c.fwd.N = 4, c.fwd.lens = {10, 20, 30};
  ScanBackwardProblem p(c);
  storeElement(p.f.cu.view(), 2, 5);  // {0, 10, 5, 60}: not increasing
  DeviceTensors d(p.all());
  SelectiveScanBackwardArgs a = deviceArgs(p, d);
  const int64_t n = selective_scan_backward_workspace_size(a);
  DeviceBuffer ws(static_cast<size_t>(n) * 4);
  a.workspace = TensorView::contiguous(ws.data(), DType::F32, {n});
  expectReported([&] { selective_scan_backward(a); }, "cu_seqlens[");
}

}  // namespace

// Causal conv1d backward on the GPU against the float64 reference: fresh random inputs, poisoned
// outputs, odd channel counts and lengths, every width 2..8, both memory orders, dense and packed
// rows (cu_seqlens and positions), initial-state and final-state gradients with slot indices;
// packed dx and d(initial states) equal each sequence's alone, bit for bit; dweight / dbias are
// bitwise the same on every run (fixed-order sums).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "GpuTest.h"
#include "runtime/DeviceBuffer.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tests/support/ExpectError.h"
#include "tools/problems/ConvProblem.h"

using namespace ssmjit;
using namespace ssmjit::testing;

namespace {

// Tensor indices in ConvBackwardProblem::all().
enum : size_t { kX = 0, kDout = 3, kStates = 6, kDx = 10, kDweight = 11, kDbias = 12, kDinit = 13 };

std::vector<char> allRows(int64_t n) { return std::vector<char>(static_cast<size_t>(n), 1); }

// The device arguments with a fresh, poisoned workspace of the size the call asks for.
struct DeviceCall {
  DeviceTensors t;
  DeviceBuffer ws;
  CausalConv1dBackwardArgs args;
  explicit DeviceCall(ConvBackwardProblem& p) : t(p.all()) {
    args = deviceArgs(p, t);
    const int64_t n = causal_conv1d_backward_workspace_size(args);
    ws = DeviceBuffer(static_cast<size_t>(std::max<int64_t>(n, 1)) * 4);
    ws.fill(0xFF);
    args.workspace = TensorView::contiguous(ws.data(), DType::F32, {std::max<int64_t>(n, 1)});
  }
};

// Slots whose initial-state gradient a call writes.
std::vector<char> dinitSlots(ConvBackwardProblem& p) {
  std::vector<char> w(static_cast<size_t>(p.dinit.defined ? p.dinit.meta.shape[0] : 0), 0);
  if (!p.dinit.defined) return w;
  for (size_t i = 0; i < p.c.lens.size(); ++i) {
    const int64_t s = p.initIdx.defined ? static_cast<int64_t>(loadElement(p.initIdx.view(), static_cast<int64_t>(i)))
                                        : static_cast<int64_t>(i);
    if (s >= 0) w[static_cast<size_t>(s)] = 1;
  }
  return w;
}

void runAndCompare(const ConvBackwardCase& c) {
  ConvBackwardProblem ref(c), gpu(c);
  DeviceCall d(gpu);
  const std::vector<uint8_t> dinitBefore = ref.dinit.bytes;
  reference::causal_conv1d_backward(ref.args());
  causal_conv1d_backward(d.args);
  checkDeviceErrors();
  expectWithin(compareTensor(ref.dx, d.t.download(kDx), allRows(ref.dx.meta.shape[0])),
               bound(c.xType, kFp32Short, c.dxTwiceRounded()), "dx");
  // dweight / dbias: sums over every token in fp32, in a fixed two-stage order.
  expectWithin(compareTensor(ref.dweight, d.t.download(kDweight), allRows(ref.dweight.meta.shape[0])),
               bound(c.wType, kFp32Short), "dweight");
  if (c.bias)
    expectWithin(compareTensor(ref.dbias, d.t.download(kDbias), allRows(ref.dbias.meta.shape[0])),
                 bound(c.wType, kFp32Short), "dbias");
  if (c.dinitialStates)
    expectWithin(compareTensor(ref.dinit, d.t.download(kDinit), dinitBefore, dinitSlots(ref)),
                 bound(c.stateType, kFp32Short), "dinitial_states");
}

std::vector<ConvBackwardCase> backwardCases() {
  std::vector<ConvBackwardCase> out;
  for (const ConvInputsCase& in : convInputsMatrix(500)) {
    ConvBackwardCase c{in};
    c.initialStates = c.dinitialStates = c.dfinalStates = in.packing != ConvPacking::Positions;
    out.push_back(c);
  }
  ConvBackwardCase plain;  // no bias, no SiLU, a long dense row (many chunks a row)
  plain.bias = plain.silu = false;
  plain.lens = {4099};
  plain.D = 200;
  out.push_back(plain);
  return out;
}

SSMJIT_REFERENCE_MATRIX(ConvBackward, ConvBackwardCase, backwardCases());

// Packed equals per-sequence, bit for bit: dx and the initial states' gradient. dweight and dbias
// sum over every sequence, so they are compared to the per-sequence sums within fp32 rounding
// (kFp32Short: two fixed-order sums of the same fp32 terms).
class ConvBackwardPacked : public GpuTest, public ::testing::WithParamInterface<ConvLayout> {};
TEST_P(ConvBackwardPacked, EqualsEachSequenceAlone) {
  ConvBackwardCase c{manyStartsRow(GetParam())};
  c.initialStates = c.dinitialStates = c.dfinalStates = true;
  ConvBackwardProblem packed(c);
  DeviceCall dp(packed);
  causal_conv1d_backward(dp.args);
  checkDeviceErrors();
  const std::vector<uint8_t> dxP = dp.t.download(kDx), dinitP = dp.t.download(kDinit);
  ASSERT_TRUE(c.bias && c.wType == DType::F32) << "dweight and dbias are read as fp32 below";
  const std::vector<float> dwP = dp.t.bufs[kDweight].download<float>(), dbP = dp.t.bufs[kDbias].download<float>();
  std::vector<double> dwSum(dwP.size(), 0.0), dbSum(dbP.size(), 0.0);
  std::vector<size_t> dwElems, dbElems;  // their elements (the buffers may hold poisoned gaps)
  for (int64_t dd = 0; dd < c.D; ++dd) {
    dbElems.push_back(static_cast<size_t>(dd * packed.dbias.meta.strides[0]));
    for (int64_t k = 0; k < c.W; ++k)
      dwElems.push_back(static_cast<size_t>(dd * packed.dweight.meta.strides[0] + k * packed.dweight.meta.strides[1]));
  }
  const bool cl = c.layout == ConvLayout::ChannelLast;
  const int64_t T = packed.x.meta.shape[cl ? 1 : 2], eb = dtypeBytes(c.xType), sb = dtypeBytes(c.stateType);
  int64_t start = 0;
  for (size_t i = 0; i < c.lens.size(); ++i) {
    SCOPED_TRACE("sequence " + std::to_string(i));
    const int64_t len = c.lens[i];
    // The same tensors viewed as one dense row holding sequence i alone, with its state slots.
    DeviceCall alone(packed);
    CausalConv1dBackwardArgs a = alone.args;
    a.cu_seqlens = {};
    auto rowView = [&](TensorView v) {
      v.data = static_cast<char*>(v.data) + start * v.strides[cl ? 1 : 2] * eb;
      v.shape[cl ? 1 : 2] = len;
      return v;
    };
    a.x = rowView(a.x);
    a.dout = rowView(a.dout);
    a.dx = rowView(a.dx);
    auto slotView = [&](TensorView v) {
      v.data = static_cast<char*>(v.data) + static_cast<int64_t>(i) * v.strides[0] * sb;
      v.shape[0] = 1;
      return v;
    };
    a.initial_states = slotView(a.initial_states);
    a.dinitial_states = slotView(a.dinitial_states);
    a.dfinal_states = slotView(a.dfinal_states);
    a.initial_state_indices = a.final_state_indices = {};
    const int64_t n = causal_conv1d_backward_workspace_size(a);
    DeviceBuffer ws(static_cast<size_t>(std::max<int64_t>(n, 1)) * 4);
    a.workspace = TensorView::contiguous(ws.data(), DType::F32, {std::max<int64_t>(n, 1)});
    causal_conv1d_backward(a);
    checkDeviceErrors();
    const std::vector<uint8_t> dx = alone.t.download(kDx);
    for (int64_t dd = 0; dd < c.D; ++dd)
      for (int64_t t = start; t < start + len; ++t) {
        const int64_t off = cl ? t * c.D + dd : dd * T + t;
        ASSERT_EQ(0, std::memcmp(&dxP[off * eb], &dx[off * eb], eb)) << "dx d=" << dd << " t=" << t;
      }
    const std::vector<uint8_t> di = alone.t.download(kDinit);
    const int64_t rowBytes = c.D * (c.W - 1) * sb;
    ASSERT_EQ(0, std::memcmp(&dinitP[i * rowBytes], &di[i * rowBytes], rowBytes)) << "dinitial_states";
    const std::vector<float> dw = alone.t.bufs[kDweight].download<float>();
    for (size_t k : dwElems) dwSum[k] += dw[k];
    const std::vector<float> db = alone.t.bufs[kDbias].download<float>();
    for (size_t k : dbElems) dbSum[k] += db[k];
    start += len;
  }
  // Relative L2 of the packed sums against the summed alone ones (NaN fails: the bound is <=).
  auto relL2 = [](const std::vector<float>& got, const std::vector<double>& want, const std::vector<size_t>& elems) {
    double num = 0, den = 0;
    for (size_t k : elems) {
      num += (got[k] - want[k]) * (got[k] - want[k]);
      den += want[k] * want[k];
    }
    return std::sqrt(num / den);
  };
  EXPECT_LE(relL2(dwP, dwSum, dwElems), kFp32Short.relL2) << "dweight vs the sum of the sequences' dweight";
  EXPECT_LE(relL2(dbP, dbSum, dbElems), kFp32Short.relL2) << "dbias vs the sum of the sequences' dbias";
}
INSTANTIATE_TEST_SUITE_P(Layouts, ConvBackwardPacked,
                         ::testing::Values(ConvLayout::ChannelFirst, ConvLayout::ChannelLast), [](const auto& i) {
                           return i.param == ConvLayout::ChannelLast ? "channel_last" : "channel_first";
                         });

// Deterministic: the same call twice gives the same bits everywhere.
TEST_F(GpuTest, ConvBackwardIsDeterministic) {
  ConvBackwardCase c;
  c.layout = ConvLayout::ChannelLast;
  c.xType = DType::BF16;
  c.D = 300;
  c.packing = ConvPacking::CuSeqlens;
  c.lens = {700, 3, 1500, 900};
  c.initialStates = c.dinitialStates = true;
  ConvBackwardProblem p(c);
  DeviceCall a(p), b(p);
  causal_conv1d_backward(a.args);
  causal_conv1d_backward(b.args);
  checkDeviceErrors();
  for (size_t k : {size_t{kDx}, size_t{kDweight}, size_t{kDbias}, size_t{kDinit}})
    EXPECT_EQ(a.t.download(k), b.t.download(k)) << "tensor " << k;
}

// Bad cu_seqlens is reported by checkDeviceErrors, naming it.
TEST_F(GpuTest, ConvBackwardBadCuSeqlensIsReported) {
  ConvBackwardCase c;
  c.packing = ConvPacking::CuSeqlens;
  c.lens = {10, 20, 30};
  ConvBackwardProblem p(c);
  storeElement(p.cu.view(), 2, 5);  // cu = {0, 10, 5, 60}: not increasing
  DeviceCall d(p);
  checkDeviceErrors();
  causal_conv1d_backward(d.args);
  EXPECT_MENTIONS(deviceErrorMessage(), "cu_seqlens");
}

// Bad positions are reported by the backward too.
TEST_F(GpuTest, ConvBackwardBadSeqPosIsReported) {
  ConvBackwardCase c;
  c.packing = ConvPacking::Positions;
  c.lens = {100, 100};
  ConvBackwardProblem p(c);
  storeElement(p.pos.view(), 0, 1);
  DeviceCall d(p);
  checkDeviceErrors();
  causal_conv1d_backward(d.args);
  EXPECT_MENTIONS(deviceErrorMessage(), "seq_pos[0, 0] = 1");
}

}  // namespace

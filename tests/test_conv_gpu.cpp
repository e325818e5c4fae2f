// Causal conv1d on the GPU against the float64 reference: fresh random inputs, poisoned outputs,
// odd channel counts and lengths, every width 2..8, both memory orders, dense and packed rows
// (cu_seqlens and positions), initial and final states with slot indices (in place), the decode
// update; packed output equals running each sequence alone, bit for bit; an L-token update equals
// L one-token updates, bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <tuple>
#include <vector>

#include "GpuTest.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tests/support/ExpectError.h"
#include "tools/problems/ConvProblem.h"

using namespace ssmjit;
using namespace ssmjit::testing;

namespace {

std::vector<char> allRows(int64_t n) { return std::vector<char>(static_cast<size_t>(n), 1); }

// Slots a call writes: the final slots (or 0..nseq-1), as a mask over state slots.
std::vector<char> writtenSlots(ConvProblem& p) {
  std::vector<char> w(static_cast<size_t>(p.states.meta.shape[0]), 0);
  if (!p.c.finalStates) return w;
  const int64_t nseq = static_cast<int64_t>(p.c.lens.size());
  for (int64_t i = 0; i < nseq; ++i) {
    const int64_t s = p.finalIdx.defined ? static_cast<int64_t>(loadElement(p.finalIdx.view(), i)) : i;
    if (s >= 0) w[static_cast<size_t>(s)] = 1;
  }
  return w;
}

void runAndCompare(const ConvCase& c) {
  ConvProblem ref(c), gpu(c);
  DeviceTensors d(gpu.all());
  const std::vector<uint8_t> statesBefore = ref.states.bytes;
  reference::causal_conv1d(ref.args());
  causal_conv1d(deviceArgs(gpu, d));
  checkDeviceErrors();
  expectWithin(compareTensor(ref.out, d.download(3), allRows(ref.out.meta.shape[0])), bound(c.xType, kFp32Short),
               "out");
  // The final states hold the last inputs (or initial columns): copies.
  if (c.initialStates || c.finalStates)
    expectWithin(compareTensor(ref.states, d.download(6), statesBefore, writtenSlots(ref)), bound(c.stateType, kExact),
                 "states");
}

std::vector<ConvCase> forwardCases() {
  std::vector<ConvCase> out;
  for (const ConvInputsCase& in : convInputsMatrix(1)) {
    ConvCase c{in};
    c.initialStates = c.finalStates = in.packing != ConvPacking::Positions;
    out.push_back(c);
  }
  ConvCase f16;  // fp16 input with an fp16 weight and no bias, no SiLU
  f16.xType = f16.wType = f16.stateType = DType::F16;
  f16.bias = f16.silu = false;
  f16.lens = {513};
  out.push_back(f16);
  return out;
}

SSMJIT_REFERENCE_MATRIX(ConvForward, ConvCase, forwardCases());

// Packed equals per-sequence, bit for bit: out and final states.
class ConvPacked : public GpuTest, public ::testing::WithParamInterface<ConvLayout> {};
TEST_P(ConvPacked, EqualsEachSequenceAlone) {
  ConvCase c{manyStartsRow(GetParam())};
  c.initialStates = c.finalStates = true;
  ConvProblem packed(c);
  DeviceTensors dp(packed.all());
  causal_conv1d(deviceArgs(packed, dp));
  checkDeviceErrors();
  const std::vector<uint8_t> outP = dp.download(3), statesP = dp.download(6);
  const bool cl = c.layout == ConvLayout::ChannelLast;
  const int64_t T = packed.x.meta.shape[cl ? 1 : 2];
  int64_t start = 0;
  for (size_t i = 0; i < c.lens.size(); ++i) {
    SCOPED_TRACE("sequence " + std::to_string(i));
    const int64_t len = c.lens[i];
    // The same tensors, viewed as one dense row holding sequence i alone, with its state slot.
    CausalConv1dArgs a = deviceArgs(packed, dp);
    a.cu_seqlens = {};
    a.out.data = nullptr;
    DeviceBuffer outAlone(static_cast<size_t>(c.D * len * dtypeBytes(c.xType)));
    outAlone.fill(0xFF);
    const int64_t eb = dtypeBytes(c.xType);
    a.x.data = static_cast<char*>(dp.bufs[0].data()) + start * a.x.strides[cl ? 1 : 2] * eb;
    a.x.shape[cl ? 1 : 2] = len;
    a.out = TensorView::contiguous(
        outAlone.data(), c.xType,
        cl ? std::initializer_list<int64_t>{1, len, c.D} : std::initializer_list<int64_t>{1, c.D, len});
    DeviceTensors fresh(packed.all());  // the states as they were before the packed call
    TensorView st = fresh.view(6, packed.states);
    st.data = static_cast<char*>(st.data) + static_cast<int64_t>(i) * st.strides[0] * dtypeBytes(c.stateType);
    st.shape[0] = 1;
    a.initial_states = a.final_states = st;
    causal_conv1d(a);
    checkDeviceErrors();
    const std::vector<uint8_t> o = outAlone.download<uint8_t>();
    for (int64_t dd = 0; dd < c.D; ++dd)
      for (int64_t t = 0; t < len; ++t) {
        const int64_t offP = cl ? (start + t) * c.D + dd : dd * T + start + t;
        const int64_t offA = cl ? t * c.D + dd : dd * len + t;
        ASSERT_EQ(0, std::memcmp(&outP[offP * eb], &o[offA * eb], eb)) << "out d=" << dd << " t=" << t;
      }
    const std::vector<uint8_t> s = fresh.download(6);
    const int64_t rowBytes = c.D * (c.W - 1) * dtypeBytes(c.stateType);
    ASSERT_EQ(0, std::memcmp(&statesP[i * rowBytes], &s[i * rowBytes], rowBytes)) << "final state";
    start += len;
  }
}
INSTANTIATE_TEST_SUITE_P(Layouts, ConvPacked, ::testing::Values(ConvLayout::ChannelFirst, ConvLayout::ChannelLast),
                         [](const auto& i) {
                           return i.param == ConvLayout::ChannelLast ? "channel_last" : "channel_first";
                         });

// Bad cu_seqlens is reported by checkDeviceErrors, naming it.
class ConvDeviceChecks : public GpuTest {};
// cu = {0, 10, 5, 60}: not increasing; {0, 1000, 30, 60}: sequence 0 ends past the row's 60
// tokens (skipped like any bad one: under compute-sanitizer, its final state reads nothing
// outside x).
TEST_F(ConvDeviceChecks, BadCuSeqlensIsReported) {
  for (const auto& [at, value, expected] : {std::tuple{2, 5.0, "cu_seqlens"}, std::tuple{1, 1000.0, "= 1000"}})
    for (bool finalStates : {false, true}) {
      ConvCase c;
      c.packing = ConvPacking::CuSeqlens;
      c.lens = {10, 20, 30};
      c.finalStates = finalStates;
      ConvProblem p(c);
      storeElement(p.cu.view(), at, value);
      DeviceTensors d(p.all());
      checkDeviceErrors();
      causal_conv1d(deviceArgs(p, d));
      try {
        checkDeviceErrors();
        ADD_FAILURE() << "expected a cu_seqlens error for cu_seqlens[" << at << "] = " << value;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
      }
    }
}

// The forward checks cu_seqlens itself, its entries shared out along the row's chunks: a bad
// entry far along a long row (in a later chunk) is reported and named, with and without the
// per-sequence launch that writes final states.
TEST_F(ConvDeviceChecks, BadCuSeqlensInALaterChunkIsReported) {
  for (ConvLayout layout : {ConvLayout::ChannelFirst, ConvLayout::ChannelLast})
    for (bool finalStates : {false, true}) {
      ConvCase c;
      c.layout = layout;
      c.packing = ConvPacking::CuSeqlens;
      c.lens = std::vector<int64_t>(300, 20);  // 6000 tokens: several chunks a row
      c.finalStates = finalStates;
      ConvProblem p(c);
      storeElement(p.cu.view(), 251, 5000);  // cu[250] = 5000 = cu[251]: not increasing
      DeviceTensors d(p.all());
      checkDeviceErrors();
      causal_conv1d(deviceArgs(p, d));
      try {
        checkDeviceErrors();
        ADD_FAILURE() << "expected a cu_seqlens error, " << c.name();
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("cu_seqlens[250] = 5000"), std::string::npos) << e.what();
      }
    }
}

// Positions that break the rule (0, or one more than the token before) are reported, naming the
// token.
TEST_F(ConvDeviceChecks, BadSeqPosIsReported) {
  ConvCase c;
  c.layout = ConvLayout::ChannelLast;
  c.packing = ConvPacking::Positions;
  c.lens = {10, 200, 30};
  ConvProblem p(c);
  storeElement(p.pos.view(), 150, 3);
  DeviceTensors d(p.all());
  checkDeviceErrors();
  causal_conv1d(deviceArgs(p, d));
  EXPECT_MENTIONS(deviceErrorMessage(), "seq_pos[0, 150] = 3");
}

// ---- decode update ----

std::vector<ConvUpdateCase> updateCases() {
  std::vector<ConvUpdateCase> out;
  uint64_t seed = 100;
  for (DType dt : {DType::F32, DType::BF16})
    for (int W : {2, 3, 4, 8})
      for (int64_t L : {1, 5})
        for (bool commit : {true, false}) {
          ConvUpdateCase c;
          c.xType = c.stateType = dt;
          c.W = W;
          c.D = 131;
          c.L = L;
          c.batch = 4;
          c.commit = commit;
          c.seed = seed++;
          out.push_back(c);
        }
  ConvUpdateCase big;
  big.batch = 257;
  big.slots = 300;
  big.D = 64;
  big.L = 2;
  out.push_back(big);
  return out;
}

class ConvUpdate : public GpuTest, public ::testing::WithParamInterface<ConvUpdateCase> {};
TEST_P(ConvUpdate, MatchesFloat64Reference) {
  const ConvUpdateCase& c = GetParam();
  ConvUpdateProblem ref(c), gpu(c);
  DeviceTensors d(gpu.all());
  const std::vector<uint8_t> before = ref.state.bytes;
  reference::causal_conv1d_update(ref.args());
  causal_conv1d_update(deviceArgs(gpu, d));
  checkDeviceErrors();
  expectWithin(compareTensor(ref.out, d.download(4), ref.rowsWritten()), bound(c.xType, kFp32Short), "out");
  // A committed state holds the last inputs: copies.
  expectWithin(compareTensor(ref.state, d.download(0), before, ref.slotsWritten()), bound(c.stateType, kExact),
               "state");
}
INSTANTIATE_TEST_SUITE_P(Matrix, ConvUpdate, ::testing::ValuesIn(updateCases()), ByName());

// L tokens in one launch equal L one-token launches, bit for bit (out and committed state).
TEST_F(GpuTest, ConvUpdateTokensEqualOneTokenCalls) {
  ConvUpdateCase c;
  c.xType = c.stateType = DType::BF16;
  c.W = 4;
  c.D = 200;
  c.L = 6;
  c.batch = 5;
  ConvUpdateProblem p(c);
  DeviceTensors all(p.all()), step(p.all());
  causal_conv1d_update(deviceArgs(p, all));
  CausalConv1dUpdateArgs one = deviceArgs(p, step);
  const int64_t eb = dtypeBytes(c.xType);
  for (int64_t t = 0; t < c.L; ++t) {
    CausalConv1dUpdateArgs a = one;
    a.x.shape[1] = a.out.shape[1] = 1;
    a.x.data = static_cast<char*>(a.x.data) + t * a.x.strides[1] * eb;
    a.out.data = static_cast<char*>(a.out.data) + t * a.out.strides[1] * eb;
    causal_conv1d_update(a);
  }
  checkDeviceErrors();
  EXPECT_EQ(all.download(4), step.download(4)) << "out";
  EXPECT_EQ(all.download(0), step.download(0)) << "state";
}

}  // namespace

// Causal conv1d backward on the CPU: the argument checks of the op and of its float64 reference
// (named errors, nothing written; fake device pointers that must never be dereferenced).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/ops/CausalConv1dCheck.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tests/support/ExpectError.h"
#include "tests/support/FakeTensors.h"
#include "tools/problems/ConvProblem.h"
#include "tools/problems/HostTensor.h"

using ssmjit::CausalConv1dBackwardArgs;
using ssmjit::ConvLayout;
using ssmjit::DeviceKind;
using ssmjit::DType;
using ssmjit::TensorView;
using namespace ssmjit::testing;

namespace {

// A valid call: one packed row of 3 sequences (T = 20 by cu_seqlens), D 64, W 4; bf16 x, dout and
// dx, fp32 weight, bias and their gradients; fp32 initial states and dfinal_states (5 slots each)
// with slot indices, and dinitial_states.
ConvBackwardCase checkCase() {
  ConvBackwardCase c;
  c.xType = DType::BF16;
  c.D = 64;
  c.lens = {7, 2, 11};
  c.packing = ConvPacking::CuSeqlens;
  c.initialStates = c.dfinalStates = c.dinitialStates = c.slotIndices = true;
  return c;
}

std::vector<TensorView*> tensorsOf(CausalConv1dBackwardArgs& a) {
  return {&a.x,
          &a.weight,
          &a.bias,
          &a.dout,
          &a.cu_seqlens,
          &a.seq_pos,
          &a.initial_states,
          &a.initial_state_indices,
          &a.dfinal_states,
          &a.final_state_indices,
          &a.dx,
          &a.dweight,
          &a.dbias,
          &a.dinitial_states,
          &a.workspace};
}

// The same call with fake device pointers (never dereferenced).
CausalConv1dBackwardArgs onDevice(CausalConv1dBackwardArgs a) {
  int k = 0;
  for (TensorView* t : tensorsOf(a)) {
    ++k;
    if (!t->defined()) continue;
    t->data = fakeAddress(k);
    t->device = DeviceKind::CUDA;
    t->deviceId = 0;
  }
  return a;
}

// The check's message; the op and its workspace query (both check first) must throw the same.
std::string bwdError(const CausalConv1dBackwardArgs& a) {
  const std::string m = invalidArgMessage(
      [&] { ssmjit::detail::checkConv1dBackwardArgs(a, DeviceKind::CUDA, "causal_conv1d_backward"); });
  if (!m.empty()) {
    EXPECT_EQ(invalidArgMessage([&] { ssmjit::causal_conv1d_backward(a); }), m);
    EXPECT_EQ(invalidArgMessage([&] { ssmjit::causal_conv1d_backward_workspace_size(a); }), m);
  }
  return m;
}

TEST(ConvBackwardValidation, ValidCallsPassTheCheck) {
  using ssmjit::detail::checkConv1dBackwardArgs;
  const char* op = "causal_conv1d_backward";
  for (ConvLayout lay : {ConvLayout::ChannelFirst, ConvLayout::ChannelLast}) {
    ConvBackwardCase c = checkCase();
    c.layout = lay;
    const ConvBackwardProblem p(c);
    const auto d = checkConv1dBackwardArgs(onDevice(p.args()), DeviceKind::CUDA, op);
    EXPECT_EQ(d.batch, 1);
    EXPECT_EQ(d.D, 64);
    EXPECT_EQ(d.L, 20);
    EXPECT_EQ(d.W, 4);
    EXPECT_EQ(d.nseq, 3);
    EXPECT_EQ(d.channelLast, lay == ConvLayout::ChannelLast);
    EXPECT_TRUE(d.packedCu);
    EXPECT_EQ(d.initSlots, 5);
    EXPECT_EQ(d.finalSlots, 0);
    EXPECT_EQ(d.dfinalSlots, 5);
    // The reference takes the same call on the CPU.
    const auto r = checkConv1dBackwardArgs(p.args(), DeviceKind::CPU, op);
    EXPECT_EQ(r.dfinalSlots, 5);

    // Dense rows; positions (no states); the minimum (no bias, no states).
    c.packing = ConvPacking::Dense;
    c.lens = {20, 20, 20};
    const auto dd = checkConv1dBackwardArgs(onDevice(ConvBackwardProblem(c).args()), DeviceKind::CUDA, op);
    EXPECT_EQ(dd.batch, 3);
    EXPECT_EQ(dd.nseq, 3);
    c.packing = ConvPacking::Positions;
    c.lens = {7, 2, 11};
    c.initialStates = c.dfinalStates = c.dinitialStates = c.slotIndices = false;
    const auto dp = checkConv1dBackwardArgs(onDevice(ConvBackwardProblem(c).args()), DeviceKind::CUDA, op);
    EXPECT_TRUE(dp.packedPos);
    EXPECT_EQ(dp.initSlots + dp.dfinalSlots, 0);
    c.packing = ConvPacking::Dense;
    c.lens = {20};
    c.bias = false;
    EXPECT_NO_THROW(checkConv1dBackwardArgs(onDevice(ConvBackwardProblem(c).args()), DeviceKind::CUDA, op));
  }
  // Gradients of another float type than their input: dx fp32 for bf16 x, dweight and dbias in
  // x's dtype, dinitial_states fp16 for fp32 states; no dbias although there is a bias; and the
  // gradient of the initial states without the final states' (and the other way round).
  CausalConv1dBackwardArgs a = onDevice(ConvBackwardProblem(checkCase()).args());
  a.dx.dtype = DType::F32;
  a.dweight.dtype = DType::BF16;
  a.dbias.dtype = DType::BF16;
  a.dinitial_states.dtype = DType::F16;
  EXPECT_NO_THROW(checkConv1dBackwardArgs(a, DeviceKind::CUDA, op));
  a.dbias = TensorView{};
  a.dfinal_states = a.final_state_indices = TensorView{};
  EXPECT_NO_THROW(checkConv1dBackwardArgs(a, DeviceKind::CUDA, op));
  a = onDevice(ConvBackwardProblem(checkCase()).args());
  a.dinitial_states = TensorView{};
  EXPECT_NO_THROW(checkConv1dBackwardArgs(a, DeviceKind::CUDA, op));
  // The workspace is the op's to check (it knows the size): any value passes here.
  a.workspace = fakeView(20, DType::BF16, {3, 3});
  EXPECT_NO_THROW(checkConv1dBackwardArgs(a, DeviceKind::CUDA, op));
}

// Each bad argument: the op and its check throw naming it, and the reference throws the same on
// the CPU tensors, writing nothing.
TEST(ConvBackwardValidation, BadArgumentsAreNamedAndNothingIsWritten) {
  using Mutate = void (*)(CausalConv1dBackwardArgs&);
  struct Bad {
    const char* what;
    Mutate mutate;
    std::vector<std::string> mentions;
  };
  const std::vector<Bad> bad = {
      {"dx missing", [](CausalConv1dBackwardArgs& a) { a.dx = TensorView{}; }, {"dx is required"}},
      {"dx shape",
       [](CausalConv1dBackwardArgs& a) { a.dx.shape[1] = 63; },
       {"dx has shape (1, 63, 20)", "expected (1, 64, 20) [batch, dim, seqlen]", "dim 1 (dim) is 63, expected 64",
        "ChannelFirst"}},
      {"dx dtype",
       [](CausalConv1dBackwardArgs& a) { a.dx.dtype = DType::I32; },
       {"dx has dtype int32", "expected float32, bfloat16 or float16"}},
      {"dx broadcast",
       [](CausalConv1dBackwardArgs& a) { a.dx.strides[1] = 0; },
       {"dx has strides (1280, 0, 1)", "dim 1 (dim, size 64) has stride 0"}},
      {"dx aliases dout",
       [](CausalConv1dBackwardArgs& a) { a.dx.data = a.dout.data; },
       {"dx has data pointer 0x", "the same as dout's", "dx may not alias dout"}},
      {"dx aliases x", [](CausalConv1dBackwardArgs& a) { a.dx.data = a.x.data; }, {"dx may not alias x"}},
      {"dout missing", [](CausalConv1dBackwardArgs& a) { a.dout = TensorView{}; }, {"dout is required"}},
      {"dout shape",
       [](CausalConv1dBackwardArgs& a) { a.dout.shape[2] = 19; },
       {"dout has shape (1, 64, 19)", "dim 2 (seqlen) is 19, expected 20"}},
      {"dout dtype", [](CausalConv1dBackwardArgs& a) { a.dout.dtype = DType::I64; }, {"dout has dtype int64"}},
      {"dweight missing", [](CausalConv1dBackwardArgs& a) { a.dweight = TensorView{}; }, {"dweight is required"}},
      {"dweight shape",
       [](CausalConv1dBackwardArgs& a) { a.dweight.shape[1] = 3; },
       {"dweight has shape (64, 3)", "expected (64, 4) [dim, width]", "dim 1 (width) is 3, expected 4"}},
      {"dweight dtype",
       [](CausalConv1dBackwardArgs& a) { a.dweight.dtype = DType::F16; },
       {"dweight has dtype float16", "expected float32 or bfloat16"}},
      {"dweight broadcast",
       [](CausalConv1dBackwardArgs& a) { a.dweight.strides[0] = 0; },
       {"dweight has strides (0, 1)", "dim 0 (dim, size 64) has stride 0"}},
      {"dbias without bias",
       [](CausalConv1dBackwardArgs& a) { a.bias = TensorView{}; },
       {"dbias is given (shape (64))", "expected none: bias is not given"}},
      {"dbias shape",
       [](CausalConv1dBackwardArgs& a) { a.dbias.shape[0] = 65; },
       {"dbias has shape (65)", "expected (64) [dim]"}},
      {"dinitial_states without initial_states",
       [](CausalConv1dBackwardArgs& a) { a.initial_states = a.initial_state_indices = TensorView{}; },
       {"dinitial_states is given (shape (5, 64, 3))", "expected none: initial_states is not given"}},
      {"dinitial_states shape",
       [](CausalConv1dBackwardArgs& a) { a.dinitial_states.shape[0] = 4; },
       {"dinitial_states has shape (4, 64, 3)", "expected (5, 64, 3) [slots, dim, width - 1]",
        "dim 0 (slots) is 4, expected 5", "initial_states' shape"}},
      {"dinitial_states dtype",
       [](CausalConv1dBackwardArgs& a) { a.dinitial_states.dtype = DType::I32; },
       {"dinitial_states has dtype int32"}},
      {"dfinal_states shape",
       [](CausalConv1dBackwardArgs& a) { a.dfinal_states.shape[2] = 2; },
       {"dfinal_states has shape (5, 64, 2)", "[slots, dim, width - 1]", "dim 2 (width - 1) is 2, expected 3"}},
      {"dfinal_states too few slots without indices",
       [](CausalConv1dBackwardArgs& a) {
         a.final_state_indices = TensorView{};
         a.dfinal_states.shape[0] = 2;
       },
       {"dfinal_states has 2 slots", "expected at least nseq = 3", "final_state_indices is not given"}},
      {"final_state_indices without dfinal_states",
       [](CausalConv1dBackwardArgs& a) { a.dfinal_states = TensorView{}; },
       {"final_state_indices is given", "dfinal_states is not given"}},
      {"final_state_indices shape",
       [](CausalConv1dBackwardArgs& a) { a.final_state_indices.shape[0] = 2; },
       {"final_state_indices has shape (2)", "dim 0 (nseq) is 2, expected 3"}},
      {"dfinal_states with seq_pos",
       [](CausalConv1dBackwardArgs& a) {
         // Positions instead of cu_seqlens (the check reads no data: cu's bytes will do).
         a.seq_pos = a.cu_seqlens;
         a.seq_pos.ndim = 2;
         a.seq_pos.shape[0] = 1;
         a.seq_pos.shape[1] = 20;
         a.seq_pos.strides[0] = 20;
         a.seq_pos.strides[1] = 1;
         a.cu_seqlens = TensorView{};
         a.initial_states = a.initial_state_indices = a.dinitial_states = TensorView{};
       },
       {"dfinal_states is given (shape (5, 64, 3)) with seq_pos", "conv states need cu_seqlens"}},
      {"initial_states shape",
       [](CausalConv1dBackwardArgs& a) { a.initial_states.shape[1] = 32; },
       {"initial_states has shape (5, 32, 3)", "dim 1 (dim) is 32, expected 64"}},
      {"weight width",
       [](CausalConv1dBackwardArgs& a) { a.weight.shape[1] = 9; },
       {"weight has width 9", "2 <= W <= 8"}},
  };
  const ConvBackwardProblem p0(checkCase());
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.what);
    CausalConv1dBackwardArgs dev = onDevice(p0.args());
    b.mutate(dev);
    const std::string m = bwdError(dev);
    EXPECT_MENTIONS(m, "causal_conv1d_backward: ");
    for (const std::string& s : b.mentions) EXPECT_MENTIONS(m, s);

    ConvBackwardProblem p = p0;
    CausalConv1dBackwardArgs host = p.args();
    b.mutate(host);
    const std::string r = invalidArgMessage([&] { ssmjit::reference::causal_conv1d_backward(host); });
    if (!m.empty() && m.find("data pointer") == std::string::npos)  // pointers differ
      EXPECT_EQ(r, "reference::" + m);
    EXPECT_MENTIONS(r, "reference::causal_conv1d_backward: ");
    EXPECT_TRUE(p.gradientBytes() == p0.gradientBytes()) << "a gradient was written";
  }
  // Device tensors are refused by the reference (it would dereference them).
  const std::string m = invalidArgMessage([&] { ssmjit::reference::causal_conv1d_backward(onDevice(p0.args())); });
  EXPECT_MENTIONS(m, "reference::causal_conv1d_backward: x is a CUDA tensor", "expected a CPU tensor");
}

}  // namespace

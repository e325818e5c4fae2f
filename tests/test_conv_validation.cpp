// Causal conv1d on the CPU: the argument checks of the ops (every bad input gets an
// InvalidArgument error naming the argument, the expected and the actual value, and nothing
// touches the GPU: tensors here are fake device pointers that must never be dereferenced), and
// self-tests of the float64 reference the GPU tests compare against.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "runtime/Driver.h"
#include "runtime/ops/CausalConv1dCheck.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tests/support/ExpectError.h"
#include "tests/support/FakeTensors.h"
#include "tools/problems/ConvProblem.h"
#include "tools/problems/HostTensor.h"

using ssmjit::CausalConv1dArgs;
using ssmjit::CausalConv1dUpdateArgs;
using ssmjit::ConvLayout;
using ssmjit::DeviceKind;
using ssmjit::DType;
using ssmjit::Error;
using ssmjit::TensorView;
using namespace ssmjit::testing;

namespace {

// ----------------------------------------------------------------------------------------------
// Argument checks

// A valid dense call: batch 3, D 64, L 20, W 4, bf16 x/out, fp32 weight, bf16 bias, fp32 states
// (5 slots, in place) with slot indices.
CausalConv1dArgs validFwd(ConvLayout layout = ConvLayout::ChannelFirst, int64_t batch = 3) {
  const int64_t B = batch, D = 64, L = 20, W = 4, S = 5;
  const bool cl = layout == ConvLayout::ChannelLast;
  CausalConv1dArgs a;
  a.layout = layout;
  a.x = cl ? fakeView(0, DType::BF16, {B, L, D}) : fakeView(0, DType::BF16, {B, D, L});
  a.weight = fakeView(1, DType::F32, {D, W});
  a.bias = fakeView(2, DType::BF16, {D});
  a.out = cl ? fakeView(3, DType::BF16, {B, L, D}) : fakeView(3, DType::BF16, {B, D, L});
  a.initial_states = fakeView(6, DType::F32, {S, D, W - 1});
  a.final_states = a.initial_states;
  a.initial_state_indices = fakeView(7, DType::I32, {B});
  a.final_state_indices = fakeView(8, DType::I64, {B});
  a.silu = true;
  return a;
}

// The same as one packed row of 3 sequences (T = 20) given by cu_seqlens.
CausalConv1dArgs validCu(ConvLayout layout = ConvLayout::ChannelFirst) {
  CausalConv1dArgs a = validFwd(layout, 1);
  a.cu_seqlens = fakeView(4, DType::I32, {4});
  a.initial_state_indices = fakeView(7, DType::I32, {3});
  a.final_state_indices = fakeView(8, DType::I64, {3});
  return a;
}

// One packed row with positions: no states.
CausalConv1dArgs validPos(ConvLayout layout = ConvLayout::ChannelLast) {
  CausalConv1dArgs a = validFwd(layout, 1);
  a.seq_pos = fakeView(5, DType::I64, {1, 20});
  a.initial_states = a.final_states = TensorView{};
  a.initial_state_indices = a.final_state_indices = TensorView{};
  return a;
}

// A valid update: 6 slots of (64, 3) bf16, x (4, 2, 64) fp16, fp16 weight, fp32 bias, fp32 out,
// int64 slot indices.
CausalConv1dUpdateArgs validUpd(int64_t batch = 4) {
  const int64_t B = batch, L = 2, D = 64, W = 4, S = 6;
  CausalConv1dUpdateArgs a;
  a.conv_state = fakeView(0, DType::BF16, {S, D, W - 1});
  a.x = fakeView(1, DType::F16, {B, L, D});
  a.weight = fakeView(2, DType::F16, {D, W});
  a.bias = fakeView(3, DType::F32, {D});
  a.out = fakeView(4, DType::F32, {B, L, D});
  a.state_indices = fakeView(5, DType::I64, {B});
  a.silu = true;
  return a;
}

// The check's message; the public op (which checks first, before anything touches the GPU) must
// throw the same. The op is called only when the check threw: a call the check passed would
// reach the driver with fake pointers.
std::string fwdError(const CausalConv1dArgs& a) {
  const std::string m =
      invalidArgMessage([&] { ssmjit::detail::checkConv1dArgs(a, DeviceKind::CUDA, "causal_conv1d"); });
  if (!m.empty()) {
    EXPECT_EQ(invalidArgMessage([&] { ssmjit::causal_conv1d(a); }), m);
  }
  return m;
}
std::string updError(const CausalConv1dUpdateArgs& a) {
  const std::string m =
      invalidArgMessage([&] { ssmjit::detail::checkConv1dUpdateArgs(a, DeviceKind::CUDA, "causal_conv1d_update"); });
  if (!m.empty()) {
    EXPECT_EQ(invalidArgMessage([&] { ssmjit::causal_conv1d_update(a); }), m);
  }
  return m;
}

TEST(ConvValidation, ValidCallsPassTheCheck) {
  using ssmjit::detail::checkConv1dArgs;
  using ssmjit::detail::checkConv1dUpdateArgs;
  for (ConvLayout lay : {ConvLayout::ChannelFirst, ConvLayout::ChannelLast}) {
    const auto d = checkConv1dArgs(validFwd(lay), DeviceKind::CUDA, "causal_conv1d");
    EXPECT_EQ(d.batch, 3);
    EXPECT_EQ(d.D, 64);
    EXPECT_EQ(d.L, 20);
    EXPECT_EQ(d.W, 4);
    EXPECT_EQ(d.nseq, 3);
    EXPECT_EQ(d.channelLast, lay == ConvLayout::ChannelLast);
    EXPECT_FALSE(d.packedCu || d.packedPos);
    EXPECT_EQ(d.initSlots, 5);
    EXPECT_EQ(d.finalSlots, 5);
    const auto c = checkConv1dArgs(validCu(lay), DeviceKind::CUDA, "causal_conv1d");
    EXPECT_EQ(c.batch, 1);
    EXPECT_EQ(c.nseq, 3);
    EXPECT_TRUE(c.packedCu);
    const auto p = checkConv1dArgs(validPos(lay), DeviceKind::CUDA, "causal_conv1d");
    EXPECT_TRUE(p.packedPos);
    EXPECT_EQ(p.nseq, 1);
    EXPECT_EQ(p.initSlots + p.finalSlots, 0);
  }
  // Minimal calls: no bias, no states, no indices; fp16 x with fp16 or fp32 parameters.
  CausalConv1dArgs m;
  m.x = fakeView(0, DType::F16, {2, 8, 5});
  m.weight = fakeView(1, DType::F16, {8, 2});
  m.out = fakeView(3, DType::F32, {2, 8, 5});
  EXPECT_NO_THROW(checkConv1dArgs(m, DeviceKind::CUDA, "causal_conv1d"));
  m.weight = fakeView(1, DType::F32, {8, ssmjit::kMaxConvWidth});
  m.bias = fakeView(2, DType::F16, {8});
  EXPECT_NO_THROW(checkConv1dArgs(m, DeviceKind::CUDA, "causal_conv1d"));
  // Without indices, any S >= nseq slots will do (sequence i uses slot i).
  CausalConv1dArgs s = validFwd();
  s.initial_state_indices = s.final_state_indices = TensorView{};
  EXPECT_NO_THROW(checkConv1dArgs(s, DeviceKind::CUDA, "causal_conv1d"));
  s.initial_states = fakeView(6, DType::F16, {3, 64, 3});
  s.final_states = fakeView(9, DType::BF16, {4, 64, 3});
  EXPECT_NO_THROW(checkConv1dArgs(s, DeviceKind::CUDA, "causal_conv1d"));

  const auto u = checkConv1dUpdateArgs(validUpd(), DeviceKind::CUDA, "causal_conv1d_update");
  EXPECT_EQ(u.batch, 4);
  EXPECT_EQ(u.L, 2);
  EXPECT_EQ(u.D, 64);
  EXPECT_EQ(u.W, 4);
  EXPECT_EQ(u.S, 6);
  CausalConv1dUpdateArgs un = validUpd();
  un.state_indices = TensorView{};
  un.conv_state = fakeView(0, DType::F32, {4, 64, 3});
  un.bias = TensorView{};
  EXPECT_NO_THROW(checkConv1dUpdateArgs(un, DeviceKind::CUDA, "causal_conv1d_update"));

  // Batch 0 passes the check and the ops return without touching the GPU.
  EXPECT_NO_THROW(ssmjit::causal_conv1d(validFwd(ConvLayout::ChannelFirst, 0)));
  EXPECT_NO_THROW(ssmjit::causal_conv1d_update(validUpd(0)));
  // The full-size baselines get past the check to the driver: without one, that is the error.
  if (ssmjit::driver::available()) GTEST_SKIP() << "a GPU is present: fake pointers would launch";
  for (int k = 0; k < 3; ++k) {
    try {
      if (k == 0) ssmjit::causal_conv1d(validFwd());
      if (k == 1) ssmjit::causal_conv1d(validCu());
      if (k == 2) ssmjit::causal_conv1d_update(validUpd());
      ADD_FAILURE() << "expected the driver to be unavailable";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::Unavailable) << e.what();
    }
  }
}

TEST(ConvValidation, LayoutAndRanks) {
  CausalConv1dArgs a = validFwd();
  a.layout = static_cast<ConvLayout>(7);
  EXPECT_MENTIONS(fwdError(a), "causal_conv1d: layout is 7", "expected ChannelFirst (0) or ChannelLast (1)");

  a = validFwd();
  a.x = fakeView(0, DType::BF16, {64, 20});
  EXPECT_MENTIONS(fwdError(a), "x has rank 2", "(64, 20)", "expected rank 3 (batch, dim, seqlen)", "ChannelFirst");
  a = validFwd(ConvLayout::ChannelLast);
  a.x = fakeView(0, DType::BF16, {1, 3, 20, 64});
  EXPECT_MENTIONS(fwdError(a), "x has rank 4", "expected rank 3 (batch, seqlen, dim)", "ChannelLast");

  a = validFwd();
  a.x = TensorView{};
  EXPECT_MENTIONS(fwdError(a), "x is required");
  a = validFwd();
  a.weight = TensorView{};
  EXPECT_MENTIONS(fwdError(a), "weight is required");
  a = validFwd();
  a.out = TensorView{};
  EXPECT_MENTIONS(fwdError(a), "out is required");

  a = validFwd();
  a.weight = fakeView(1, DType::F32, {64 * 4});
  EXPECT_MENTIONS(fwdError(a), "weight has rank 1", "expected rank 2 (dim, width)");
  a = validFwd();
  a.bias = fakeView(2, DType::BF16, {1, 64});
  EXPECT_MENTIONS(fwdError(a), "bias has rank 2", "expected rank 1 (dim)");
}

TEST(ConvValidation, WeightWidthRange) {
  for (int64_t W : {int64_t{1}, int64_t{ssmjit::kMaxConvWidth} + 1, int64_t{0}}) {
    CausalConv1dArgs a = validFwd();
    a.weight = fakeView(1, DType::F32, {64, W});
    EXPECT_MENTIONS(fwdError(a), "weight has width " + std::to_string(W), "(64, " + std::to_string(W) + ")",
                    "expected a width W with 2 <= W <= 8 (kMaxConvWidth)");
    CausalConv1dUpdateArgs u = validUpd();
    u.weight = fakeView(2, DType::F16, {64, W});
    EXPECT_MENTIONS(updError(u), "causal_conv1d_update: weight has width " + std::to_string(W), "2 <= W <= 8");
  }
}

TEST(ConvValidation, MismatchedShapes) {
  CausalConv1dArgs a = validFwd();
  a.weight = fakeView(1, DType::F32, {32, 4});
  EXPECT_MENTIONS(fwdError(a), "weight has shape (32, 4)", "expected (64, 4) [dim, width]",
                  "dim 0 (dim) is 32, expected 64");

  a = validFwd();
  a.bias = fakeView(2, DType::BF16, {63});
  EXPECT_MENTIONS(fwdError(a), "bias has shape (63)", "expected (64) [dim]");

  // out must have x's shape, in x's layout.
  a = validFwd(ConvLayout::ChannelLast);
  a.out = fakeView(3, DType::BF16, {3, 64, 20});
  EXPECT_MENTIONS(fwdError(a), "out has shape (3, 64, 20)", "expected (3, 20, 64) [batch, seqlen, dim]",
                  "dim 1 (seqlen) is 64, expected 20", "ChannelLast");
  a = validFwd();
  a.out = fakeView(3, DType::BF16, {2, 64, 20});
  EXPECT_MENTIONS(fwdError(a), "out has shape (2, 64, 20)", "dim 0 (batch) is 2, expected 3");

  // States: (slots, dim, width - 1).
  a = validFwd();
  a.initial_states = fakeView(6, DType::F32, {5, 64, 2});
  EXPECT_MENTIONS(fwdError(a), "initial_states has shape (5, 64, 2)", "[slots, dim, width - 1]",
                  "dim 2 (width - 1) is 2, expected 3");
  a = validFwd();
  a.final_states = fakeView(9, DType::F32, {5, 32, 3});
  EXPECT_MENTIONS(fwdError(a), "final_states has shape (5, 32, 3)", "dim 1 (dim) is 32, expected 64");
  a = validFwd();
  a.final_states = fakeView(9, DType::F32, {5, 64});
  EXPECT_MENTIONS(fwdError(a), "final_states has rank 2", "expected rank 3 (slots, dim, width - 1)");
  a = validFwd();
  a.initial_states = a.final_states = fakeView(6, DType::F32, {0, 64, 3});
  EXPECT_MENTIONS(fwdError(a), "initial_states has 0 slots", "expected at least 1");
}

TEST(ConvValidation, Dtypes) {
  CausalConv1dArgs a = validFwd();
  a.x.dtype = DType::I32;
  EXPECT_MENTIONS(fwdError(a), "x has dtype int32", "expected float32, bfloat16 or float16");

  a = validFwd();
  a.out.dtype = DType::I64;
  EXPECT_MENTIONS(fwdError(a), "out has dtype int64", "expected float32, bfloat16 or float16");

  // Weight and bias: fp32 or x's dtype.
  a = validFwd();
  a.x.dtype = a.out.dtype = DType::F16;
  a.bias.dtype = DType::F16;
  a.weight.dtype = DType::BF16;
  EXPECT_MENTIONS(fwdError(a), "weight has dtype bfloat16", "expected float32 or float16");
  a.weight.dtype = DType::F16;
  a.bias.dtype = DType::BF16;
  EXPECT_MENTIONS(fwdError(a), "bias has dtype bfloat16", "expected float32 or float16");
  a = validFwd();
  a.x.dtype = DType::F32;
  a.bias.dtype = DType::BF16;
  EXPECT_MENTIONS(fwdError(a), "bias has dtype bfloat16", "expected float32");

  a = validFwd();
  a.initial_states.dtype = DType::I32;
  a.final_states.dtype = DType::I32;
  EXPECT_MENTIONS(fwdError(a), "initial_states has dtype int32", "expected float32, bfloat16 or float16");

  // Index tensors: int32 or int64.
  a = validCu();
  a.cu_seqlens.dtype = DType::F32;
  EXPECT_MENTIONS(fwdError(a), "cu_seqlens has dtype float32", "expected int32 or int64");
  a = validPos();
  a.seq_pos.dtype = DType::BF16;
  EXPECT_MENTIONS(fwdError(a), "seq_pos has dtype bfloat16", "expected int32 or int64");
  a = validFwd();
  a.initial_state_indices.dtype = DType::F16;
  EXPECT_MENTIONS(fwdError(a), "initial_state_indices has dtype float16", "expected int32 or int64");
  a = validFwd();
  a.final_state_indices.dtype = DType::F32;
  EXPECT_MENTIONS(fwdError(a), "final_state_indices has dtype float32", "expected int32 or int64");
}

TEST(ConvValidation, Packing) {
  CausalConv1dArgs a = validCu();
  a.seq_pos = fakeView(5, DType::I32, {1, 20});
  EXPECT_MENTIONS(fwdError(a), "cu_seqlens (shape (4))", "seq_pos (shape (1, 20))", "both given",
                  "expected at most one");

  // Packed input is one row.
  for (bool cu : {true, false}) {
    a = validFwd(ConvLayout::ChannelFirst, 2);
    a.initial_states = a.final_states = TensorView{};
    a.initial_state_indices = a.final_state_indices = TensorView{};
    if (cu)
      a.cu_seqlens = fakeView(4, DType::I32, {3});
    else
      a.seq_pos = fakeView(5, DType::I32, {2, 20});
    EXPECT_MENTIONS(fwdError(a), "x has batch 2", "expected 1 with " + std::string(cu ? "cu_seqlens" : "seq_pos"),
                    "packed input is one row");
  }

  a = validCu();
  a.cu_seqlens = fakeView(4, DType::I32, {1});
  EXPECT_MENTIONS(fwdError(a), "cu_seqlens has shape (1)", "expected at least 2 entries", "nseq + 1");
  a = validCu();
  a.cu_seqlens = fakeView(4, DType::I64, {4, 1});
  EXPECT_MENTIONS(fwdError(a), "cu_seqlens has rank 2", "expected rank 1 (nseq + 1)");

  a = validPos();
  a.seq_pos = fakeView(5, DType::I32, {1, 19});
  EXPECT_MENTIONS(fwdError(a), "seq_pos has shape (1, 19)", "expected (1, 20) [batch, seqlen]",
                  "dim 1 (seqlen) is 19, expected 20");
  a = validPos();
  a.seq_pos = fakeView(5, DType::I32, {20});
  EXPECT_MENTIONS(fwdError(a), "seq_pos has rank 1", "expected rank 2 (batch, seqlen)");

  // Conv states need cu_seqlens.
  a = validPos();
  a.initial_states = fakeView(6, DType::F32, {5, 64, 3});
  EXPECT_MENTIONS(fwdError(a), "initial_states is given", "with seq_pos", "conv states need cu_seqlens");
  a = validPos();
  a.final_states = fakeView(6, DType::F32, {5, 64, 3});
  EXPECT_MENTIONS(fwdError(a), "final_states is given", "conv states need cu_seqlens");
}

TEST(ConvValidation, StateSlotsAndIndices) {
  // Indices only with their states.
  CausalConv1dArgs a = validFwd();
  a.initial_states = TensorView{};
  EXPECT_MENTIONS(fwdError(a), "initial_state_indices is given", "initial_states is not given");
  a = validFwd();
  a.final_states = TensorView{};
  EXPECT_MENTIONS(fwdError(a), "final_state_indices is given", "final_states is not given");
  a = validPos();
  a.final_state_indices = fakeView(8, DType::I32, {1});
  EXPECT_MENTIONS(fwdError(a), "final_state_indices is given", "final_states is not given");

  // (nseq,): batch for dense rows, cu_seqlens' size - 1 when packed.
  a = validFwd();
  a.initial_state_indices = fakeView(7, DType::I32, {2});
  EXPECT_MENTIONS(fwdError(a), "initial_state_indices has shape (2)", "expected (3) [nseq]",
                  "dim 0 (nseq) is 2, expected 3");
  a = validCu();
  a.final_state_indices = fakeView(8, DType::I64, {1});
  EXPECT_MENTIONS(fwdError(a), "final_state_indices has shape (1)", "dim 0 (nseq) is 1, expected 3");
  a = validCu();
  a.final_state_indices = fakeView(8, DType::I64, {3, 1});
  EXPECT_MENTIONS(fwdError(a), "final_state_indices has rank 2", "expected rank 1 (nseq)");

  // Without indices, sequence i uses slot i: S >= nseq.
  a = validCu();
  a.initial_state_indices = a.final_state_indices = TensorView{};
  a.initial_states = a.final_states = fakeView(6, DType::F32, {2, 64, 3});
  EXPECT_MENTIONS(fwdError(a), "initial_states has 2 slots", "expected at least nseq = 3",
                  "initial_state_indices is not given", "sequence i uses slot i");
  a = validFwd();
  a.final_state_indices = TensorView{};
  a.final_states = fakeView(9, DType::F32, {2, 64, 3});
  EXPECT_MENTIONS(fwdError(a), "final_states has 2 slots", "expected at least nseq = 3",
                  "final_state_indices is not given");
}

TEST(ConvValidation, StridesAlignmentAndDevices) {
  CausalConv1dArgs a = validFwd();
  a.x.strides[2] = -1;
  EXPECT_MENTIONS(fwdError(a), "x has strides (1280, 20, -1)", "dim 2 (seqlen) has stride -1",
                  "expected a stride >= 0");
  a = validFwd();
  a.weight.strides[1] = -4;
  EXPECT_MENTIONS(fwdError(a), "weight has strides (4, -4)", "expected a stride >= 0");

  // Broadcast (stride 0 on an axis of size > 1): only weight and bias.
  a = validFwd(ConvLayout::ChannelLast);
  a.out.strides[2] = 0;
  EXPECT_MENTIONS(fwdError(a), "out has strides (1280, 64, 0)", "dim 2 (dim, size 64) has stride 0",
                  "expected a nonzero stride");
  a = validFwd();
  a.x.strides[0] = 0;
  EXPECT_MENTIONS(fwdError(a), "x has strides (0, 20, 1)", "dim 0 (batch, size 3) has stride 0");
  a = validFwd();
  a.initial_states.strides[0] = 0;
  EXPECT_MENTIONS(fwdError(a), "initial_states has strides (0, 3, 1)", "dim 0 (slots, size 5) has stride 0");
  a = validCu();
  a.cu_seqlens.strides[0] = 0;
  EXPECT_MENTIONS(fwdError(a), "cu_seqlens has strides (0)", "has stride 0");
  a = validFwd();
  a.initial_state_indices.strides[0] = 0;
  EXPECT_MENTIONS(fwdError(a), "initial_state_indices has strides (0)", "has stride 0");
  a = validFwd();
  a.weight.strides[0] = 0;  // every channel the same taps
  a.weight.strides[1] = 0;
  a.bias.strides[0] = 0;
  EXPECT_NO_THROW(ssmjit::detail::checkConv1dArgs(a, DeviceKind::CUDA, "causal_conv1d"));
  // Size-1 axes may have any stride, 0 included.
  a = validCu();
  a.x.strides[0] = 0;
  a.out.strides[0] = 0;
  EXPECT_NO_THROW(ssmjit::detail::checkConv1dArgs(a, DeviceKind::CUDA, "causal_conv1d"));

  // Alignment to the element size.
  a = validFwd();
  a.x.data = static_cast<char*>(a.x.data) + 1;
  EXPECT_MENTIONS(fwdError(a), "x has data pointer 0x", "expected a multiple of its element size (bfloat16: 2 bytes)");
  a = validCu();
  a.cu_seqlens.data = static_cast<char*>(a.cu_seqlens.data) + 2;
  EXPECT_MENTIONS(fwdError(a), "cu_seqlens has data pointer 0x", "(int32: 4 bytes)");
  a = validFwd();
  a.final_states.data = static_cast<char*>(a.final_states.data) + 2;
  a.initial_states = TensorView{};
  a.initial_state_indices = TensorView{};
  EXPECT_MENTIONS(fwdError(a), "final_states has data pointer 0x", "(float32: 4 bytes)");

  // One CUDA device: x's.
  a = validFwd();
  a.weight.device = DeviceKind::CPU;
  EXPECT_MENTIONS(fwdError(a), "weight is a CPU tensor, expected a CUDA tensor");
  a = validFwd();
  a.bias.deviceId = 1;
  EXPECT_MENTIONS(fwdError(a), "bias is on CUDA device 1, expected device 0 (where x is)");
  a = validCu();
  a.cu_seqlens.device = DeviceKind::CPU;
  EXPECT_MENTIONS(fwdError(a), "cu_seqlens is a CPU tensor, expected a CUDA tensor");
  a = validFwd();
  for (TensorView* t : {&a.x, &a.weight, &a.bias, &a.out, &a.initial_states, &a.final_states, &a.initial_state_indices})
    t->deviceId = 2;
  EXPECT_MENTIONS(fwdError(a), "final_state_indices is on CUDA device 0, expected device 2 (where x is)");
}

TEST(ConvValidation, UpdateShapes) {
  CausalConv1dUpdateArgs a = validUpd();
  a.conv_state = TensorView{};
  EXPECT_MENTIONS(updError(a), "causal_conv1d_update: conv_state is required");
  a = validUpd();
  a.conv_state = fakeView(0, DType::BF16, {6, 64});
  EXPECT_MENTIONS(updError(a), "conv_state has rank 2", "expected rank 3 (slots, dim, width - 1)");
  a = validUpd();
  a.weight = TensorView{};
  EXPECT_MENTIONS(updError(a), "weight is required");
  a = validUpd();
  a.conv_state = fakeView(0, DType::BF16, {6, 64, 2});  // width - 1 comes from the weight
  EXPECT_MENTIONS(updError(a), "conv_state has shape (6, 64, 2)", "expected (6, 64, 3) [slots, dim, width - 1]",
                  "dim 2 (width - 1) is 2, expected 3");
  a = validUpd();
  a.conv_state = fakeView(0, DType::BF16, {6, 32, 3});
  EXPECT_MENTIONS(updError(a), "conv_state has shape (6, 32, 3)", "dim 1 (dim) is 32, expected 64");

  a = validUpd();
  a.x = fakeView(1, DType::F16, {4, 64});
  EXPECT_MENTIONS(updError(a), "x has rank 2", "expected rank 3 (batch, tokens, dim)");
  for (int64_t L : {int64_t{0}, int64_t{ssmjit::kMaxTokens} + 1}) {
    a = validUpd();
    a.x.shape[1] = a.out.shape[1] = L;
    EXPECT_MENTIONS(updError(a), "x has " + std::to_string(L) + " tokens", "expected 1 <= L <= 32 (kMaxTokens)");
  }
  a = validUpd();
  a.out = fakeView(4, DType::F32, {4, 1, 64});
  EXPECT_MENTIONS(updError(a), "out has shape (4, 1, 64)", "expected (4, 2, 64) [batch, tokens, dim]",
                  "dim 1 (tokens) is 1, expected 2");
  a = validUpd();
  a.out = TensorView{};
  EXPECT_MENTIONS(updError(a), "out is required");
  a = validUpd();
  a.weight = fakeView(2, DType::F16, {63, 4});
  EXPECT_MENTIONS(updError(a), "weight has shape (63, 4)", "dim 0 (dim) is 63, expected 64");
  a = validUpd();
  a.bias = fakeView(3, DType::F32, {65});
  EXPECT_MENTIONS(updError(a), "bias has shape (65)", "expected (64) [dim]");

  a = validUpd();
  a.state_indices = fakeView(5, DType::I64, {3});
  EXPECT_MENTIONS(updError(a), "state_indices has shape (3)", "expected (4) [batch]", "dim 0 (batch) is 3, expected 4");
  a = validUpd();
  a.state_indices = TensorView{};  // 6 slots for 4 rows
  EXPECT_MENTIONS(updError(a), "conv_state has 6 slots", "expected batch = 4", "state_indices is not given");
}

TEST(ConvValidation, UpdateDtypesStridesDevices) {
  CausalConv1dUpdateArgs a = validUpd();
  a.conv_state.dtype = DType::I32;
  EXPECT_MENTIONS(updError(a), "conv_state has dtype int32", "expected float32, bfloat16 or float16");
  a = validUpd();
  a.x.dtype = DType::I64;
  EXPECT_MENTIONS(updError(a), "x has dtype int64", "expected float32, bfloat16 or float16");
  a = validUpd();
  a.weight.dtype = DType::BF16;  // x is fp16
  EXPECT_MENTIONS(updError(a), "weight has dtype bfloat16", "expected float32 or float16");
  a = validUpd();
  a.bias.dtype = DType::BF16;
  EXPECT_MENTIONS(updError(a), "bias has dtype bfloat16", "expected float32 or float16");
  a = validUpd();
  a.out.dtype = DType::I32;
  EXPECT_MENTIONS(updError(a), "out has dtype int32");
  a = validUpd();
  a.state_indices.dtype = DType::F32;
  EXPECT_MENTIONS(updError(a), "state_indices has dtype float32", "expected int32 or int64");

  a = validUpd();
  a.conv_state.strides[1] = 0;
  EXPECT_MENTIONS(updError(a), "conv_state has strides (192, 0, 1)", "dim 1 (dim, size 64) has stride 0",
                  "expected a nonzero stride");
  a = validUpd();
  a.x.strides[1] = -64;
  EXPECT_MENTIONS(updError(a), "x has strides (128, -64, 1)", "dim 1 (tokens) has stride -64",
                  "expected a stride >= 0");
  a = validUpd();
  a.state_indices.strides[0] = 0;
  EXPECT_MENTIONS(updError(a), "state_indices has strides (0)", "has stride 0");
  a = validUpd();
  a.weight.strides[0] = 0;
  a.bias.strides[0] = 0;
  EXPECT_NO_THROW(ssmjit::detail::checkConv1dUpdateArgs(a, DeviceKind::CUDA, "causal_conv1d_update"));

  a = validUpd();
  a.out.data = static_cast<char*>(a.out.data) + 2;
  EXPECT_MENTIONS(updError(a), "out has data pointer 0x", "(float32: 4 bytes)");
  a = validUpd();
  a.state_indices.data = static_cast<char*>(a.state_indices.data) + 4;
  EXPECT_MENTIONS(updError(a), "state_indices has data pointer 0x", "(int64: 8 bytes)");
  a = validUpd();
  a.out.deviceId = 1;
  EXPECT_MENTIONS(updError(a), "out is on CUDA device 1, expected device 0 (where conv_state is)");
  a = validUpd();
  a.x.device = DeviceKind::CPU;
  EXPECT_MENTIONS(updError(a), "x is a CPU tensor, expected a CUDA tensor");
}

TEST(ConvValidation, ReferenceRunsTheSameCheckOnCpuTensors) {
  // Device tensors are refused by the reference (it would dereference them).
  std::string m = invalidArgMessage([&] { ssmjit::reference::causal_conv1d(validFwd()); });
  EXPECT_MENTIONS(m, "reference::causal_conv1d: x is a CUDA tensor", "expected a CPU tensor");
  m = invalidArgMessage([&] { ssmjit::reference::causal_conv1d_update(validUpd()); });
  EXPECT_MENTIONS(m, "reference::causal_conv1d_update: conv_state is a CUDA tensor", "expected a CPU tensor");
}

// ----------------------------------------------------------------------------------------------
// The float64 reference

// A contiguous CPU tensor holding `v` (row-major).
HostTensor hostTensor(DType t, const std::vector<int64_t>& shape, const std::vector<double>& v,
                      const Layout& lay = {}) {
  std::mt19937_64 rng(7);
  HostTensor h = makeTensor(t, shape, lay, rng);
  const TensorView tv = h.view();
  size_t k = 0;
  forEachElement(tv, [&](int64_t off, const std::vector<int64_t>&) {
    storeElement(tv, off, k < v.size() ? v[k] : 0.0);
    ++k;
  });
  return h;
}
HostTensor randomTensor(DType t, const std::vector<int64_t>& shape, std::mt19937_64& rng, const Layout& lay = {},
                        double lo = -1, double hi = 1) {
  HostTensor h = makeTensor(t, shape, lay, rng);
  fillUniform(h, rng, lo, hi);
  return h;
}
HostTensor poisoned(DType t, const std::vector<int64_t>& shape, const Layout& lay = {}) {
  std::mt19937_64 rng(3);
  return makeTensor(t, shape, lay, rng);
}
TensorView v(const HostTensor& h) { return h.defined ? h.view() : TensorView{}; }

std::vector<double> values(const HostTensor& h) {
  std::vector<double> r;
  forEachElement(h.view(), [&](int64_t off, const std::vector<int64_t>&) { r.push_back(loadElement(h.view(), off)); });
  return r;
}

// A view of `len` entries of axis `ax` from `start` on.
TensorView slice(TensorView t, int ax, int64_t start, int64_t len) {
  t.data = static_cast<char*>(t.data) + start * t.strides[ax] * ssmjit::dtypeBytes(t.dtype);
  t.shape[ax] = len;
  return t;
}

double silu(double v) { return v / (1 + std::exp(-v)); }
double f32(double v) { return double(float(v)); }

// W = 2, two channels, both layouts: out = bias + w0 * x[t-1] + w1 * x[t], worked out by hand.
TEST(ConvReference, HandComputedWidth2) {
  const std::vector<double> x0 = {1, 2, 3, 4}, x1 = {0.5, -1, 1.5, 0};
  const std::vector<double> noInit0 = {1.25, 2.75, 4.25, 5.75}, noInit1 = {0.5, -3, 3.5, -2};
  for (ConvLayout lay : {ConvLayout::ChannelFirst, ConvLayout::ChannelLast}) {
    for (bool act : {false, true}) {
      for (bool init : {false, true}) {
        const bool cl = lay == ConvLayout::ChannelLast;
        std::vector<double> xs;
        if (cl)
          for (int t = 0; t < 4; ++t) xs.insert(xs.end(), {x0[t], x1[t]});
        else
          for (const auto* c : {&x0, &x1}) xs.insert(xs.end(), c->begin(), c->end());
        const std::vector<int64_t> shape = cl ? std::vector<int64_t>{1, 4, 2} : std::vector<int64_t>{1, 2, 4};
        HostTensor x = hostTensor(DType::F32, shape, xs), out = poisoned(DType::F32, shape);
        HostTensor w = hostTensor(DType::F32, {2, 2}, {0.5, 1, -1, 2});
        HostTensor b = hostTensor(DType::F32, {2}, {0.25, -0.5});
        HostTensor st = hostTensor(DType::F32, {1, 2, 1}, {-2, 3});
        CausalConv1dArgs a;
        a.x = v(x);
        a.weight = v(w);
        a.bias = v(b);
        a.out = v(out);
        a.layout = lay;
        a.silu = act;
        if (init) a.initial_states = v(st);
        a.final_states = v(st);  // in place when init
        ssmjit::reference::causal_conv1d(a);
        std::vector<double> want0 = noInit0, want1 = noInit1;
        if (init) {
          want0[0] = 0.25 + 0.5 * -2 + 1;  // x[-1] from the initial state
          want1[0] = -0.5 + -1 * 3 + 2 * 0.5;
        }
        const std::vector<double> got = values(out);
        for (int t = 0; t < 4; ++t)
          for (int c = 0; c < 2; ++c) {
            const double want = (c ? want1 : want0)[t];
            const double g = got[cl ? t * 2 + c : c * 4 + t];
            EXPECT_EQ(g, f32(act ? silu(want) : want)) << "t " << t << " c " << c;
          }
        EXPECT_EQ(values(st), (std::vector<double>{4, 0}));  // the last token of each channel
      }
    }
  }
}

// W = 4, one channel, a sequence of 2 tokens (shorter than W - 1): out and the final state take
// the older columns from the initial state, or zeros.
TEST(ConvReference, HandComputedWidth4ShortSequence) {
  for (bool act : {false, true}) {
    for (bool init : {false, true}) {
      HostTensor x = hostTensor(DType::F32, {1, 1, 2}, {1, -2}), out = poisoned(DType::F32, {1, 1, 2});
      HostTensor w = hostTensor(DType::F32, {1, 4}, {0.25, -0.5, 1, 2});
      HostTensor b = hostTensor(DType::F32, {1}, {1});
      HostTensor st0 = hostTensor(DType::F32, {2, 1, 3}, {9, 9, 9, 3, 5, -1});  // slot 1: positions -3, -2, -1
      HostTensor stF = poisoned(DType::F32, {3, 1, 3});
      HostTensor initIdx = hostTensor(DType::I32, {1}, {1}), finalIdx = hostTensor(DType::I64, {1}, {2});
      CausalConv1dArgs a;
      a.x = v(x);
      a.weight = v(w);
      a.bias = v(b);
      a.out = v(out);
      a.silu = act;
      if (init) {
        a.initial_states = v(st0);
        a.initial_state_indices = v(initIdx);
      }
      a.final_states = v(stF);
      a.final_state_indices = v(finalIdx);
      const std::vector<uint8_t> before = stF.bytes;
      ssmjit::reference::causal_conv1d(a);
      // out[0] = 1 + .25 x(-3) - .5 x(-2) + x(-1) + 2 x(0);  out[1] = 1 + .25 x(-2) - .5 x(-1) + x(0) + 2 x(1)
      const std::vector<double> want = init ? std::vector<double>{1 + 0.75 - 2.5 - 1 + 2, 1 + 1.25 + 0.5 + 1 - 4}
                                            : std::vector<double>{1 + 2, 1 + 1 - 4};
      const std::vector<double> got = values(out);
      for (int t = 0; t < 2; ++t) EXPECT_EQ(got[t], f32(act ? silu(want[t]) : want[t])) << t;
      // Final column j = xx(len - 3 + j) = xx(-1), x(0), x(1); written to slot 2 only.
      const std::vector<double> fs = values(stF);
      EXPECT_EQ(std::vector<double>(fs.begin() + 6, fs.end()), (std::vector<double>{init ? -1.0 : 0.0, 1, -2}));
      EXPECT_TRUE(std::equal(before.begin(), before.begin() + 6 * 4, stF.bytes.begin()))
          << "slots 0 and 1 are not written";
    }
  }
}

// Without bias the sum starts at 0; the identity activation passes negative values through.
TEST(ConvReference, NoBias) {
  HostTensor x = hostTensor(DType::BF16, {1, 3, 1}, {1, 2, -3}), out = poisoned(DType::F16, {1, 3, 1});
  HostTensor w = hostTensor(DType::F32, {1, 3}, {1, -1, 0.5});
  CausalConv1dArgs a;
  a.x = v(x);
  a.weight = v(w);
  a.out = v(out);
  a.layout = ConvLayout::ChannelLast;
  ssmjit::reference::causal_conv1d(a);
  EXPECT_EQ(values(out), (std::vector<double>{0.5, -1 + 1, 1 - 2 - 1.5}));
}

// ---- packed == each sequence alone

struct Packed {
  ConvLayout layout;
  int W;
  int64_t D;
  std::vector<int64_t> lens;
  bool cu = true;      // else seq_pos
  bool states = true;  // initial and final states, in place, slots through indices
  bool stridedLayouts = false;
  uint64_t seed = 1;
};

struct PackedProblem {
  HostTensor x, w, bias, out, cu, pos, states, initIdx, finalIdx;
  std::vector<int64_t> start, initSlot, finalSlot;
  int64_t T = 0, S = 0;
};

PackedProblem makePacked(const Packed& c) {
  std::mt19937_64 rng(c.seed);
  PackedProblem p;
  const int64_t nseq = static_cast<int64_t>(c.lens.size());
  p.start.push_back(0);
  for (int64_t l : c.lens) p.start.push_back(p.start.back() + l);
  p.T = p.start.back();
  const bool cl = c.layout == ConvLayout::ChannelLast;
  const std::vector<int64_t> xs = cl ? std::vector<int64_t>{1, p.T, c.D} : std::vector<int64_t>{1, c.D, p.T};
  Layout lay;
  lay.padded = lay.transposed = c.stridedLayouts;
  p.x = randomTensor(DType::BF16, xs, rng, lay);
  p.out = poisoned(DType::F32, xs, lay);
  p.w = randomTensor(DType::F32, {c.D, c.W}, rng, lay, -0.5, 0.5);
  p.bias = randomTensor(DType::BF16, {c.D}, rng);
  if (c.cu) {
    std::vector<double> cuv(p.start.begin(), p.start.end());
    p.cu = hostTensor(DType::I64, {nseq + 1}, cuv);
  } else {
    std::vector<double> pv;
    for (int64_t i = 0; i < nseq; ++i)
      for (int64_t t = 0; t < c.lens[i]; ++t) pv.push_back(double(t));
    p.pos = hostTensor(DType::I32, {1, p.T}, pv);
  }
  if (c.states) {
    p.S = nseq + 2;
    Layout sl;
    sl.padded = c.stridedLayouts;
    p.states = randomTensor(DType::F16, {p.S, c.D, c.W - 1}, rng, sl);
    // Permuted slots, one -1 each; different read and write slots, so that a sequence's final
    // state lands where another one reads its initial state (all reads come first).
    std::vector<int64_t> perm(static_cast<size_t>(p.S));
    for (int64_t s = 0; s < p.S; ++s) perm[s] = s;
    std::shuffle(perm.begin(), perm.end(), rng);
    p.initSlot.assign(perm.begin(), perm.begin() + nseq);
    std::shuffle(perm.begin(), perm.end(), rng);
    p.finalSlot.assign(perm.begin(), perm.begin() + nseq);
    p.initSlot[1 % nseq] = -1;
    if (nseq > 2) p.finalSlot[2] = -1;
    p.initIdx = hostTensor(DType::I32, {nseq}, std::vector<double>(p.initSlot.begin(), p.initSlot.end()));
    p.finalIdx = hostTensor(DType::I64, {nseq}, std::vector<double>(p.finalSlot.begin(), p.finalSlot.end()));
  }
  return p;
}

CausalConv1dArgs packedArgs(const Packed& c, const PackedProblem& p) {
  CausalConv1dArgs a;
  a.x = v(p.x);
  a.weight = v(p.w);
  a.bias = v(p.bias);
  a.out = v(p.out);
  a.layout = c.layout;
  a.silu = true;
  a.cu_seqlens = v(p.cu);
  a.seq_pos = v(p.pos);
  a.initial_states = a.final_states = v(p.states);
  a.initial_state_indices = v(p.initIdx);
  a.final_state_indices = v(p.finalIdx);
  return a;
}

// Runs the packed call, then each sequence alone (a B = 1 view of its tokens, the states as they
// were before, its own slots) and compares bit for bit: out, and the states (written slots take
// the single run's state, the others stay as they were).
void checkPackedEqualsPerSequence(const Packed& c) {
  const PackedProblem p0 = makePacked(c);
  PackedProblem packed = p0;
  ssmjit::reference::causal_conv1d(packedArgs(c, packed));

  const int tAx = c.layout == ConvLayout::ChannelLast ? 1 : 2;
  HostTensor out = p0.out;
  HostTensor states = p0.states;  // the expected states after the packed call
  for (size_t i = 0; i + 1 < p0.start.size(); ++i) {
    PackedProblem one = p0;  // fresh states
    CausalConv1dArgs a = packedArgs(c, one);
    a.cu_seqlens = a.seq_pos = TensorView{};
    const int64_t s = p0.start[i], len = p0.start[i + 1] - s;
    a.x = slice(a.x, tAx, s, len);
    a.out = slice(v(out), tAx, s, len);
    HostTensor ii, fi;
    if (c.states) {
      ii = hostTensor(DType::I64, {1}, {double(p0.initSlot[i])});
      fi = hostTensor(DType::I32, {1}, {double(p0.finalSlot[i])});
      a.initial_state_indices = v(ii);
      a.final_state_indices = v(fi);
    }
    ssmjit::reference::causal_conv1d(a);
    if (c.states && p0.finalSlot[i] >= 0) {
      const TensorView from = one.states.view(), to = states.view();
      forEachElement(from, [&](int64_t off, const std::vector<int64_t>& idx) {
        if (idx[0] == p0.finalSlot[i])
          std::memcpy(static_cast<char*>(to.data) + off * 2, static_cast<const char*>(from.data) + off * 2, 2);
      });
    }
  }
  EXPECT_EQ(packed.out.bytes, out.bytes);
  EXPECT_NE(packed.out.bytes, p0.out.bytes) << "out should have been written";
  if (c.states) {
    EXPECT_EQ(packed.states.bytes, states.bytes);
    EXPECT_NE(packed.states.bytes, p0.states.bytes) << "final states should have been written";
  }
}

TEST(ConvReference, CuSeqlensEqualsEachSequenceAlone) {
  // Lengths 2 and 1 are shorter than W - 1 = 3 (their final states reach into the initial state).
  for (ConvLayout lay : {ConvLayout::ChannelFirst, ConvLayout::ChannelLast}) {
    for (bool strided : {false, true}) {
      Packed c{lay, 4, 5, {7, 2, 1, 9, 3}};
      c.stridedLayouts = strided;
      c.seed = 10 + int(lay) * 2 + strided;
      SCOPED_TRACE(std::string(lay == ConvLayout::ChannelLast ? "ChannelLast" : "ChannelFirst") +
                   (strided ? " strided" : ""));
      checkPackedEqualsPerSequence(c);
      c.W = 2;
      checkPackedEqualsPerSequence(c);
      c.W = ssmjit::kMaxConvWidth;
      c.lens = {1, 12, 6, 2};
      checkPackedEqualsPerSequence(c);
      c.states = false;
      checkPackedEqualsPerSequence(c);
    }
  }
}

TEST(ConvReference, SeqPosEqualsEachSequenceAlone) {
  for (ConvLayout lay : {ConvLayout::ChannelFirst, ConvLayout::ChannelLast}) {
    for (int W : {2, 4, 8}) {
      Packed c{lay, W, 3, {5, 1, 2, 11}, /*cu=*/false, /*states=*/false};
      c.stridedLayouts = W == 4;
      c.seed = 20 + W;
      SCOPED_TRACE("W " + std::to_string(W));
      checkPackedEqualsPerSequence(c);
      // And the same row packed by cu_seqlens gives the same bytes.
      Packed cc = c;
      cc.cu = true;
      PackedProblem byPos = makePacked(c), byCu = makePacked(cc);
      ASSERT_EQ(byPos.x.bytes, byCu.x.bytes);
      ssmjit::reference::causal_conv1d(packedArgs(c, byPos));
      ssmjit::reference::causal_conv1d(packedArgs(cc, byCu));
      EXPECT_EQ(byPos.out.bytes, byCu.out.bytes);
    }
  }
}

// Dense rows: row b is sequence b, slot b without indices (extra slots untouched).
TEST(ConvReference, DenseRowsEqualEachRowAlone) {
  std::mt19937_64 rng(5);
  const int64_t B = 3, D = 4, L = 6, W = 3, S = 4;
  HostTensor x = randomTensor(DType::F32, {B, D, L}, rng), w = randomTensor(DType::F32, {D, W}, rng);
  HostTensor out = poisoned(DType::BF16, {B, D, L});
  HostTensor st = randomTensor(DType::F32, {S, D, W - 1}, rng);
  const HostTensor st0 = st;
  HostTensor outRows = out, stRows = st;
  CausalConv1dArgs a;
  a.x = v(x);
  a.weight = v(w);
  a.out = v(out);
  a.initial_states = a.final_states = v(st);
  a.silu = true;
  ssmjit::reference::causal_conv1d(a);
  for (int64_t b = 0; b < B; ++b) {
    CausalConv1dArgs r = a;
    r.x = slice(v(x), 0, b, 1);
    r.out = slice(v(outRows), 0, b, 1);
    r.initial_states = r.final_states = slice(v(stRows), 0, b, 1);
    ssmjit::reference::causal_conv1d(r);
  }
  EXPECT_EQ(out.bytes, outRows.bytes);
  EXPECT_EQ(st.bytes, stRows.bytes);
  // Slots 0..2 advanced; slot 3 is no row's.
  const std::vector<double> s1 = values(st), s0 = values(st0);
  const size_t slot = size_t(D * (W - 1));
  for (int64_t k = 0; k < S; ++k)
    EXPECT_EQ(std::equal(s0.begin() + k * slot, s0.begin() + (k + 1) * slot, s1.begin() + k * slot), k == 3)
        << "slot " << k;
}

TEST(ConvReference, BadCuSeqlensThrowsBeforeWriting) {
  Packed c{ConvLayout::ChannelLast, 4, 3, {4, 5, 6}};
  const PackedProblem p0 = makePacked(c);
  struct Bad {
    std::vector<double> cu;
    std::vector<std::string> mentions;
  };
  const std::vector<Bad> bad = {
      {{1, 4, 9, 15}, {"cu_seqlens[0] = 1", "expected 0"}},
      {{0, 9, 9, 15}, {"cu_seqlens[2] = 9", "expected more than cu_seqlens[1] = 9", "strictly increasing"}},
      {{0, 9, 4, 15}, {"cu_seqlens[2] = 4", "strictly increasing"}},
      {{0, 4, 9, 14}, {"cu_seqlens[3] = 14", "expected T = 15"}},
      {{0, 4, 9, 16}, {"cu_seqlens[3] = 16", "expected T = 15"}},
  };
  for (const Bad& b : bad) {
    PackedProblem p = p0;
    p.cu = hostTensor(DType::I32, {4}, b.cu);
    const std::string m = invalidArgMessage([&] { ssmjit::reference::causal_conv1d(packedArgs(c, p)); });
    EXPECT_MENTIONS(m, "reference::causal_conv1d: ");
    for (const std::string& s : b.mentions) EXPECT_MENTIONS(m, s);
    EXPECT_EQ(p.out.bytes, p0.out.bytes);
    EXPECT_EQ(p.states.bytes, p0.states.bytes);
  }
}

// Positions that are neither a sequence start (0) nor one more than the token before throw,
// naming the token, before anything is written (forward and backward).
TEST(ConvReference, BadSeqPosThrowsBeforeWriting) {
  for (int64_t t : {0, 5}) {
    ssmjit::testing::ConvCase c;
    c.packing = ssmjit::testing::ConvPacking::Positions;
    c.lens = {4, 6};
    ssmjit::testing::ConvProblem p(c);
    ssmjit::testing::storeElement(p.pos.view(), t, 7);
    const std::vector<uint8_t> before = p.out.bytes;
    const std::string m = invalidArgMessage([&] { ssmjit::reference::causal_conv1d(p.args()); });
    EXPECT_MENTIONS(m, "seq_pos[0, " + std::to_string(t) + "] = 7");
    EXPECT_EQ(p.out.bytes, before);

    ssmjit::testing::ConvBackwardCase cb;
    cb.packing = ssmjit::testing::ConvPacking::Positions;
    cb.lens = {4, 6};
    ssmjit::testing::ConvBackwardProblem pb(cb);
    ssmjit::testing::storeElement(pb.pos.view(), t, 7);
    const std::vector<uint8_t> dxBefore = pb.dx.bytes;
    const std::string mb = invalidArgMessage([&] { ssmjit::reference::causal_conv1d_backward(pb.args()); });
    EXPECT_MENTIONS(mb, "seq_pos[0, " + std::to_string(t) + "] = 7");
    EXPECT_EQ(pb.dx.bytes, dxBefore);
  }
}

TEST(ConvReference, BadSlotThrowsBeforeWriting) {
  Packed c{ConvLayout::ChannelFirst, 3, 4, {3, 5, 2}};
  const PackedProblem p0 = makePacked(c);
  {
    PackedProblem p = p0;
    storeElement(p.initIdx.view(), 2, double(p0.S));
    const std::string m = invalidArgMessage([&] { ssmjit::reference::causal_conv1d(packedArgs(c, p)); });
    EXPECT_MENTIONS(m, "initial_state_indices[2] = " + std::to_string(p0.S),
                    "expected -1 (zeros) or a slot in [0, " + std::to_string(p0.S) + ")");
    EXPECT_EQ(p.out.bytes, p0.out.bytes);
    EXPECT_EQ(p.states.bytes, p0.states.bytes);
  }
  {
    PackedProblem p = p0;
    storeElement(p.finalIdx.view(), 0, -2);
    const std::string m = invalidArgMessage([&] { ssmjit::reference::causal_conv1d(packedArgs(c, p)); });
    EXPECT_MENTIONS(m, "final_state_indices[0] = -2", "expected -1 (not written) or a slot in [0, ");
    EXPECT_EQ(p.out.bytes, p0.out.bytes);
    EXPECT_EQ(p.states.bytes, p0.states.bytes);
  }
}

// ---- the decode update

struct UpdProblem {
  HostTensor state, x, w, bias, out, idx;
  std::vector<int64_t> slot;
};

// batch 4 (row 2 a pad), L tokens, D 5, W, S 6 slots; all fp32 unless told.
UpdProblem makeUpd(int W, int64_t L, uint64_t seed, DType stateT = DType::F32, DType xT = DType::F32) {
  std::mt19937_64 rng(seed);
  const int64_t B = 4, D = 5, S = 6;
  UpdProblem p;
  p.state = randomTensor(stateT, {S, D, W - 1}, rng);
  Layout lay;
  lay.padded = true;
  p.x = randomTensor(xT, {B, L, D}, rng, lay);
  p.w = randomTensor(xT == DType::F32 ? DType::F32 : xT, {D, W}, rng, {}, -0.5, 0.5);
  p.bias = randomTensor(DType::F32, {D}, rng);
  p.out = poisoned(xT, {B, L, D}, lay);
  p.slot = {4, 0, -1, 3};
  p.idx = hostTensor(DType::I32, {B}, {4, 0, -1, 3});
  return p;
}

CausalConv1dUpdateArgs updArgs(const UpdProblem& p, bool commit = true) {
  CausalConv1dUpdateArgs a;
  a.conv_state = v(p.state);
  a.x = v(p.x);
  a.weight = v(p.w);
  a.bias = v(p.bias);
  a.out = v(p.out);
  a.state_indices = v(p.idx);
  a.silu = true;
  a.commit = commit;
  return a;
}

TEST(ConvReference, UpdateEqualsSingleTokenUpdatesBitwise) {
  for (int W : {2, 4, 8}) {
    const int64_t L = 7;
    SCOPED_TRACE("W " + std::to_string(W));
    const UpdProblem p0 = makeUpd(W, L, 30 + W);
    UpdProblem fused = p0, chain = p0;
    ssmjit::reference::causal_conv1d_update(updArgs(fused));
    for (int64_t t = 0; t < L; ++t) {
      CausalConv1dUpdateArgs a = updArgs(chain);
      a.x = slice(a.x, 1, t, 1);
      a.out = slice(a.out, 1, t, 1);
      ssmjit::reference::causal_conv1d_update(a);
    }
    EXPECT_EQ(fused.out.bytes, chain.out.bytes);
    EXPECT_EQ(fused.state.bytes, chain.state.bytes);
    EXPECT_NE(fused.state.bytes, p0.state.bytes);
  }
}

TEST(ConvReference, UpdateWithoutCommitLeavesTheState) {
  const UpdProblem p0 = makeUpd(4, 5, 41, DType::BF16, DType::F16);
  UpdProblem committed = p0, verify = p0;
  ssmjit::reference::causal_conv1d_update(updArgs(committed, true));
  ssmjit::reference::causal_conv1d_update(updArgs(verify, false));
  EXPECT_EQ(verify.state.bytes, p0.state.bytes);
  EXPECT_EQ(verify.out.bytes, committed.out.bytes);  // the same outputs either way
  EXPECT_NE(committed.state.bytes, p0.state.bytes);
}

TEST(ConvReference, UpdatePadRowsAndUnusedSlotsAreUntouched) {
  const int64_t L = 3, D = 5, W = 4;
  const UpdProblem p0 = makeUpd(int(W), L, 43);
  UpdProblem r = p0;
  ssmjit::reference::causal_conv1d_update(updArgs(r));
  // out: row 2 (pad) still poisoned (NaN), every other element written and finite.
  const TensorView ov = r.out.view();
  int64_t poison = 0, written = 0;
  forEachElement(ov, [&](int64_t off, const std::vector<int64_t>& i) {
    const double x = loadElement(ov, off);
    if (i[0] == 2)
      poison += std::isnan(x);
    else
      written += std::isfinite(x);
  });
  EXPECT_EQ(poison, L * D);
  EXPECT_EQ(written, 3 * L * D);
  // Bytes outside rows 0, 1, 3 (pad row and layout gaps) are unchanged.
  std::vector<char> touched(r.out.bytes.size(), 0);
  forEachElement(ov, [&](int64_t off, const std::vector<int64_t>& i) {
    if (i[0] != 2) std::fill_n(touched.begin() + r.out.byteOffset + off * 4, 4, 1);
  });
  for (size_t k = 0; k < touched.size(); ++k)
    if (!touched[k]) ASSERT_EQ(r.out.bytes[k], p0.out.bytes[k]) << "byte " << k;
  // State: slots 1, 2, 5 are nobody's; 4, 0, 3 advanced.
  const std::vector<double> s0 = values(p0.state), s1 = values(r.state);
  const size_t slot = size_t(D * (W - 1));
  for (int64_t s = 0; s < 6; ++s) {
    const bool used = s == 4 || s == 0 || s == 3;
    const bool same = std::equal(s0.begin() + s * slot, s0.begin() + (s + 1) * slot, s1.begin() + s * slot);
    EXPECT_EQ(same, !used) << "slot " << s;
  }
}

// The update over L tokens from a state equals the forward over those tokens with that state as
// the initial state: the same out, and the final state is the committed state.
TEST(ConvReference, UpdateEqualsForwardWithStates) {
  const int64_t L = 6, D = 5, W = 4;
  const UpdProblem p0 = makeUpd(int(W), L, 47);
  UpdProblem u = p0;
  ssmjit::reference::causal_conv1d_update(updArgs(u));
  for (int64_t b : {0, 1, 3}) {
    HostTensor out = p0.out, st = p0.state;
    HostTensor slotIdx = hostTensor(DType::I32, {1}, {double(p0.slot[b])});
    CausalConv1dArgs a;
    a.x = slice(v(p0.x), 0, b, 1);
    a.weight = v(p0.w);
    a.bias = v(p0.bias);
    a.out = slice(v(out), 0, b, 1);
    a.layout = ConvLayout::ChannelLast;
    a.silu = true;
    a.initial_states = a.final_states = v(st);
    a.initial_state_indices = a.final_state_indices = v(slotIdx);
    ssmjit::reference::causal_conv1d(a);
    const TensorView uo = u.out.view(), fo = out.view();
    int64_t diffs = 0;
    forEachElement(uo, [&](int64_t off, const std::vector<int64_t>& i) {
      if (i[0] == b)
        diffs += std::memcmp(static_cast<char*>(uo.data) + off * 4, static_cast<char*>(fo.data) + off * 4, 4) != 0;
    });
    EXPECT_EQ(diffs, 0) << "row " << b;
    const std::vector<double> us = values(u.state), fs = values(st);
    const size_t slot = size_t(D * (W - 1)), s = size_t(p0.slot[b]);
    EXPECT_TRUE(std::equal(us.begin() + s * slot, us.begin() + (s + 1) * slot, fs.begin() + s * slot)) << "row " << b;
  }
}

TEST(ConvReference, UpdateBadSlotThrowsBeforeWriting) {
  const UpdProblem p0 = makeUpd(3, 2, 49);
  UpdProblem r = p0;
  storeElement(r.idx.view(), 3, 6);
  const std::string m = invalidArgMessage([&] { ssmjit::reference::causal_conv1d_update(updArgs(r)); });
  EXPECT_MENTIONS(m, "reference::causal_conv1d_update: state_indices[3] = 6", "expected -1 (pad) or a slot in [0, 6)");
  EXPECT_EQ(r.out.bytes, p0.out.bytes);
  EXPECT_EQ(r.state.bytes, p0.state.bytes);
}

// ----------------------------------------------------------------------------------------------
// The backward: argument checks (the op's and the reference's), then the reference itself

using ssmjit::CausalConv1dBackwardArgs;

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

// The gradients a call may write, as bytes (to see that nothing was written).
std::vector<std::vector<uint8_t>> gradBytes(const ConvBackwardProblem& p) {
  return {p.dx.bytes, p.dweight.bytes, p.dbias.bytes, p.dinit.bytes};
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
    EXPECT_TRUE(gradBytes(p) == gradBytes(p0)) << "a gradient was written";
  }
  // Device tensors are refused by the reference (it would dereference them).
  const std::string m = invalidArgMessage([&] { ssmjit::reference::causal_conv1d_backward(onDevice(p0.args())); });
  EXPECT_MENTIONS(m, "reference::causal_conv1d_backward: x is a CUDA tensor", "expected a CPU tensor");
}

// ---- the backward reference

std::vector<double> zeros(size_t n) { return std::vector<double>(n, 0.0); }

double dot(const HostTensor& a, const HostTensor& b) {
  const std::vector<double> va = values(a), vb = values(b);
  double s = 0;
  for (size_t i = 0; i < va.size(); ++i) s += va[i] * vb[i];
  return s;
}

// The functional whose gradients the backward computes: dot(dout, out) + dot(dfinal, final
// states), from the forward reference on the problem's inputs (final states into zeros, at the
// slots final_state_indices names).
double lossOf(const ConvBackwardProblem& p) {
  HostTensor out = poisoned(DType::F32, std::vector<int64_t>(p.x.meta.shape, p.x.meta.shape + 3));
  HostTensor fin;
  CausalConv1dArgs f;
  f.x = v(p.x);
  f.weight = v(p.weight);
  f.bias = v(p.bias);
  f.out = v(out);
  f.layout = p.c.layout;
  f.silu = p.c.silu;
  f.cu_seqlens = v(p.cu);
  f.seq_pos = v(p.pos);
  f.initial_states = v(p.states);
  f.initial_state_indices = v(p.initIdx);
  if (p.dfinal.defined) {
    const TensorView& s = p.dfinal.meta;
    fin = hostTensor(DType::F32, {s.shape[0], s.shape[1], s.shape[2]}, {});
    f.final_states = v(fin);
    f.final_state_indices = v(p.finalIdx);
  }
  ssmjit::reference::causal_conv1d(f);
  return dot(p.dout, out) + (p.dfinal.defined ? dot(p.dfinal, fin) : 0.0);
}

// Central differences along a random direction of each input: (L(in + h u) - L(in - h u)) / 2h
// against dot(gradient, u), all tensors fp32, SiLU on.
void checkGradient(ConvBackwardCase c) {
  c.xType = c.wType = c.stateType = DType::F32;
  c.silu = true;
  ConvBackwardProblem p(c);
  // Slots no sequence reads keep what they hold: zeros, so that dot(dinit, u) runs over all.
  if (p.dinit.defined) std::fill(p.dinit.bytes.begin(), p.dinit.bytes.end(), uint8_t{0});
  ssmjit::reference::causal_conv1d_backward(p.args());
  struct Input {
    const char* name;
    HostTensor ConvBackwardProblem::*in;
    HostTensor ConvBackwardProblem::*grad;
  };
  const Input inputs[] = {{"x", &ConvBackwardProblem::x, &ConvBackwardProblem::dx},
                          {"weight", &ConvBackwardProblem::weight, &ConvBackwardProblem::dweight},
                          {"bias", &ConvBackwardProblem::bias, &ConvBackwardProblem::dbias},
                          {"initial_states", &ConvBackwardProblem::states, &ConvBackwardProblem::dinit}};
  std::mt19937_64 rng(c.seed + 100);
  const double h = 1e-2;  // inputs are O(1)
  int checked = 0;
  for (const Input& in : inputs) {
    HostTensor& input = p.*in.in;
    const HostTensor& grad = p.*in.grad;
    if (!input.defined || !grad.defined) continue;
    SCOPED_TRACE(in.name);
    const std::vector<int64_t> shape(input.meta.shape, input.meta.shape + input.meta.ndim);
    auto lossAt = [&](const HostTensor& u, double s) {
      ConvBackwardProblem q = p;
      const TensorView t = (q.*in.in).view();
      const std::vector<double> base = values(input), du = values(u);
      size_t k = 0;
      forEachElement(t, [&](int64_t off, const std::vector<int64_t>&) {
        storeElement(t, off, base[k] + s * du[k]);
        ++k;
      });
      return lossOf(q);
    };
    // Three directions; one nearly orthogonal to the gradient would test little: drawn again.
    for (int n = 0, draws = 0; n < 3 && draws < 30; ++draws) {
      const HostTensor u = randomTensor(DType::F32, shape, rng);
      const double analytic = dot(grad, u);
      if (std::fabs(analytic) < 0.1 * std::sqrt(dot(grad, grad) * dot(u, u))) continue;
      const double numeric = (lossAt(u, h) - lossAt(u, -h)) / (2 * h);
      EXPECT_NEAR(numeric, analytic, 1e-3 * std::fabs(analytic)) << "direction " << n;
      ++n;
      checked += n == 3;
    }
  }
  EXPECT_EQ(checked, 2 + c.bias + c.dinitialStates);
}

TEST(ConvBackwardReference, GradientMatchesCentralDifferences) {
  ConvBackwardCase c;  // dense rows, each its own initial slot and final-state gradient
  c.D = 3;
  c.lens = {12, 12, 12};
  c.initialStates = c.dinitialStates = c.dfinalStates = true;
  c.seed = 60;
  {
    SCOPED_TRACE("dense, channel-first, W 4");
    checkGradient(c);
  }
  // Packed by cu_seqlens, sequences shorter than W - 1 (final columns read the initial state),
  // permuted slots with a -1 each.
  c.layout = ConvLayout::ChannelLast;
  c.packing = ConvPacking::CuSeqlens;
  c.lens = {6, 1, 2, 9};
  c.slotIndices = true;
  c.seed = 61;
  {
    SCOPED_TRACE("cu_seqlens, channel-last, W 4");
    checkGradient(c);
  }
  c.W = 8;
  c.lens = {3, 10, 1, 7};
  c.seed = 62;
  {
    SCOPED_TRACE("cu_seqlens, channel-last, W 8");
    checkGradient(c);
  }
  c.W = 2;
  c.layout = ConvLayout::ChannelFirst;
  c.slotIndices = false;
  c.seed = 63;
  {
    SCOPED_TRACE("cu_seqlens, channel-first, W 2, slot i");
    checkGradient(c);
  }
  c.W = 3;
  c.packing = ConvPacking::Positions;
  c.lens = {5, 1, 8};
  c.initialStates = c.dinitialStates = c.dfinalStates = false;
  c.seed = 64;
  {
    SCOPED_TRACE("seq_pos, W 3");
    checkGradient(c);
  }
  c.packing = ConvPacking::Dense;
  c.lens = {9};
  c.bias = false;
  c.seed = 65;
  {
    SCOPED_TRACE("one row, no bias");
    checkGradient(c);
  }
}

// Packed by cu_seqlens == each sequence alone (a one-row view of its tokens, its own slots):
// dx and dinitial_states bit for bit; dweight and dbias are sums over the sequences.
TEST(ConvBackwardReference, CuSeqlensEqualsEachSequenceAlone) {
  for (ConvLayout lay : {ConvLayout::ChannelFirst, ConvLayout::ChannelLast})
    for (int W : {2, 4, 8}) {
      SCOPED_TRACE(std::string(lay == ConvLayout::ChannelLast ? "ChannelLast" : "ChannelFirst") + " W " +
                   std::to_string(W));
      ConvBackwardCase c;
      c.layout = lay;
      c.xType = DType::BF16;
      c.stateType = DType::F16;
      c.W = W;
      c.D = 5;
      c.lens = {7, 2, 1, 12, 3};
      c.packing = ConvPacking::CuSeqlens;
      c.initialStates = c.dinitialStates = c.dfinalStates = c.slotIndices = true;
      c.seed = 70 + W + int(lay);
      const ConvBackwardProblem p0(c);
      ConvBackwardProblem packed = p0;
      ssmjit::reference::causal_conv1d_backward(packed.args());

      const int tAx = lay == ConvLayout::ChannelLast ? 1 : 2;
      ConvBackwardProblem alone = p0;  // its dx and dinit collect the single runs
      std::vector<double> dw = zeros(size_t(c.D * W)), db = zeros(size_t(c.D));
      int64_t start = 0;
      for (size_t i = 0; i < c.lens.size(); ++i) {
        const int64_t len = c.lens[i];
        ConvBackwardProblem one = p0;  // fresh dweight / dbias
        CausalConv1dBackwardArgs a = one.args();
        a.cu_seqlens = TensorView{};
        a.x = slice(a.x, tAx, start, len);
        a.dout = slice(a.dout, tAx, start, len);
        a.dx = slice(v(alone.dx), tAx, start, len);
        a.dinitial_states = v(alone.dinit);
        const HostTensor ii = hostTensor(DType::I64, {1}, {loadElement(p0.initIdx.view(), int64_t(i))});
        const HostTensor fi = hostTensor(DType::I32, {1}, {loadElement(p0.finalIdx.view(), int64_t(i))});
        a.initial_state_indices = v(ii);
        a.final_state_indices = v(fi);
        ssmjit::reference::causal_conv1d_backward(a);
        const std::vector<double> w1 = values(one.dweight), b1 = values(one.dbias);
        for (size_t k = 0; k < dw.size(); ++k) dw[k] += w1[k];
        for (size_t k = 0; k < db.size(); ++k) db[k] += b1[k];
        start += len;
      }
      EXPECT_EQ(packed.dx.bytes, alone.dx.bytes);
      EXPECT_EQ(packed.dinit.bytes, alone.dinit.bytes);
      EXPECT_NE(packed.dinit.bytes, p0.dinit.bytes) << "dinitial_states should have been written";
      // fp32 sums of fp32-rounded parts: within a few fp32 roundings, in norm.
      auto relL2 = [](const std::vector<double>& got, const std::vector<double>& want) {
        double num = 0, den = 0;
        for (size_t k = 0; k < got.size(); ++k) {
          num += (got[k] - want[k]) * (got[k] - want[k]);
          den += want[k] * want[k];
        }
        return std::sqrt(num / den);
      };
      EXPECT_LE(relL2(values(packed.dweight), dw), 1e-6);
      EXPECT_LE(relL2(values(packed.dbias), db), 1e-6);
    }
}

// The same row packed by positions gives the same gradients as packed by cu_seqlens.
TEST(ConvBackwardReference, SeqPosEqualsCuSeqlens) {
  for (ConvLayout lay : {ConvLayout::ChannelFirst, ConvLayout::ChannelLast})
    for (int W : {2, 4, 8}) {
      SCOPED_TRACE("W " + std::to_string(W));
      ConvBackwardCase c;
      c.layout = lay;
      c.xType = DType::BF16;
      c.W = W;
      c.D = 3;
      c.lens = {5, 1, 2, 11};
      c.packing = ConvPacking::Positions;
      c.seed = 80 + W;
      ConvBackwardCase cc = c;
      cc.packing = ConvPacking::CuSeqlens;
      ConvBackwardProblem byPos(c), byCu(cc);
      ASSERT_EQ(byPos.x.bytes, byCu.x.bytes);
      ASSERT_EQ(byPos.dout.bytes, byCu.dout.bytes);
      ssmjit::reference::causal_conv1d_backward(byPos.args());
      ssmjit::reference::causal_conv1d_backward(byCu.args());
      EXPECT_EQ(byPos.dx.bytes, byCu.dx.bytes);
      EXPECT_EQ(byPos.dweight.bytes, byCu.dweight.bytes);
      EXPECT_EQ(byPos.dbias.bytes, byCu.dbias.bytes);
    }
}

// dx reaches no token of another sequence: a one-token sequence's dx is its own tap alone.
TEST(ConvBackwardReference, HandComputedWidth2) {
  // One channel, W 2 (w = (0.5, 2)), no SiLU, no bias: sequences {x0, x1} and {x2}; dout = 1, 2, 4;
  // dfinal (1 slot each) = 10, 100; the initial state of the second sequence is 3 (slot 0), the
  // first reads zeros (-1).
  HostTensor x = hostTensor(DType::F32, {1, 1, 3}, {1, -1, 5});
  HostTensor dout = hostTensor(DType::F32, {1, 1, 3}, {1, 2, 4});
  HostTensor w = hostTensor(DType::F32, {1, 2}, {0.5, 2});
  HostTensor cu = hostTensor(DType::I32, {3}, {0, 2, 3});
  HostTensor st = hostTensor(DType::F32, {1, 1, 1}, {3}), initIdx = hostTensor(DType::I32, {2}, {-1, 0});
  HostTensor dfin = hostTensor(DType::F32, {2, 1, 1}, {10, 100});
  HostTensor dx = poisoned(DType::F32, {1, 1, 3}), dw = poisoned(DType::F32, {1, 2});
  HostTensor dinit = poisoned(DType::F32, {1, 1, 1});
  CausalConv1dBackwardArgs a;
  a.x = v(x);
  a.weight = v(w);
  a.dout = v(dout);
  a.cu_seqlens = v(cu);
  a.initial_states = v(st);
  a.initial_state_indices = v(initIdx);
  a.dfinal_states = v(dfin);
  a.dx = v(dx);
  a.dweight = v(dw);
  a.dinitial_states = v(dinit);
  ssmjit::reference::causal_conv1d_backward(a);
  // out0 = 2 x0, out1 = .5 x0 + 2 x1, out2 = .5 * 3 + 2 x2; final states x1, x2.
  EXPECT_EQ(values(dx), (std::vector<double>{2 * 1 + 0.5 * 2, 2 * 2 + 10, 2 * 4 + 100}));
  EXPECT_EQ(values(dw), (std::vector<double>{2 * 1 + 4 * 3, 1 * 1 + 2 * -1 + 4 * 5}));
  EXPECT_EQ(values(dinit), (std::vector<double>{0.5 * 4}));
}

TEST(ConvBackwardReference, BadCuSeqlensThrowsBeforeWriting) {
  ConvBackwardCase c;
  c.layout = ConvLayout::ChannelLast;
  c.D = 3;
  c.lens = {4, 5, 6};
  c.packing = ConvPacking::CuSeqlens;
  c.initialStates = c.dinitialStates = c.dfinalStates = true;
  const ConvBackwardProblem p0(c);
  const std::vector<std::pair<std::vector<double>, std::vector<std::string>>> bad = {
      {{1, 4, 9, 15}, {"cu_seqlens[0] = 1", "expected 0"}},
      {{0, 9, 9, 15}, {"cu_seqlens[2] = 9", "expected more than cu_seqlens[1] = 9"}},
      {{0, 4, 9, 14}, {"cu_seqlens[3] = 14", "expected T = 15"}},
  };
  for (const auto& b : bad) {
    ConvBackwardProblem p = p0;
    p.cu = hostTensor(DType::I32, {4}, b.first);
    const std::string m = invalidArgMessage([&] { ssmjit::reference::causal_conv1d_backward(p.args()); });
    EXPECT_MENTIONS(m, "reference::causal_conv1d_backward: ");
    for (const std::string& s : b.second) EXPECT_MENTIONS(m, s);
    EXPECT_TRUE(gradBytes(p) == gradBytes(p0)) << "a gradient was written";
  }
}

TEST(ConvBackwardReference, BadSlotThrowsBeforeWriting) {
  ConvBackwardCase c;
  c.D = 4;
  c.W = 3;
  c.lens = {3, 5, 2};
  c.packing = ConvPacking::CuSeqlens;
  c.initialStates = c.dinitialStates = c.dfinalStates = c.slotIndices = true;
  const ConvBackwardProblem p0(c);  // 5 slots
  const int64_t slot0 = int64_t(loadElement(p0.initIdx.view(), 0));
  struct Bad {
    HostTensor ConvBackwardProblem::*idx;
    int64_t i, slot;
    std::vector<std::string> mentions;
  };
  const std::vector<Bad> bad = {
      {&ConvBackwardProblem::initIdx,
       2,
       5,
       {"initial_state_indices[2] = 5", "expected -1 (zeros) or a slot in [0, 5)"}},
      {&ConvBackwardProblem::finalIdx,
       0,
       -2,
       {"final_state_indices[0] = -2", "expected -1 (no gradient) or a slot in [0, 5)"}},
      // Two sequences reading one slot: its gradient would be written twice.
      {&ConvBackwardProblem::initIdx,
       2,
       slot0,
       {"initial_state_indices[2] = " + std::to_string(slot0), "the slot of initial_state_indices[0] too",
        "expected distinct slots with dinitial_states"}},
  };
  for (const Bad& b : bad) {
    ConvBackwardProblem p = p0;
    storeElement((p.*b.idx).view(), b.i, double(b.slot));
    const std::string m = invalidArgMessage([&] { ssmjit::reference::causal_conv1d_backward(p.args()); });
    EXPECT_MENTIONS(m, "reference::causal_conv1d_backward: ");
    for (const std::string& s : b.mentions) EXPECT_MENTIONS(m, s);
    EXPECT_TRUE(gradBytes(p) == gradBytes(p0)) << "a gradient was written";
  }
  // A shared slot is fine when its gradient is not asked for.
  ConvBackwardProblem p = p0;
  storeElement(p.initIdx.view(), 2, double(slot0));
  CausalConv1dBackwardArgs a = p.args();
  a.dinitial_states = TensorView{};
  EXPECT_NO_THROW(ssmjit::reference::causal_conv1d_backward(a));
}

}  // namespace

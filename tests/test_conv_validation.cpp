// Causal conv1d on the CPU: the argument checks of the forward and the decode update (every bad
// input gets an InvalidArgument error naming the argument, the expected and the actual value, and
// nothing touches the GPU: tensors here are fake device pointers that must never be dereferenced).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/Driver.h"
#include "runtime/ops/CausalConv1dCheck.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tests/support/ExpectError.h"
#include "tests/support/FakeTensors.h"
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

}  // namespace

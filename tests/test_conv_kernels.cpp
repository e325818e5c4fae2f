// Causal conv1d kernels on the CPU: every variant the ops can build (both memory orders, every
// dtype, widths 2..8, dense / cu_seqlens / positions, states with and without slot indices, the
// per-sequence kernel, the decode update with and without commit, the backward's three kernels)
// goes through the whole pipeline and NVRTC for sm_90a and sm_80, without spilling its tiles.
// Tensors are fake device addresses: only their alignment classes are read.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "GpuTest.h"  // SSMJIT_REQUIRE_NVRTC
#include "kernels_dsl/CompileKernel.h"
#include "kernels_dsl/Registry.h"
#include "runtime/ops/CausalConv1dSpec.h"
#include "ssmjit/ops.h"
#include "tests/support/ExpectError.h"
#include "tests/support/FakeTensors.h"
#include "tests/support/Occurrences.h"

using ssmjit::ConvLayout;
using ssmjit::DType;
using ssmjit::TensorView;
using namespace ssmjit::testing;

namespace {

enum class Packing { Dense, CuSeqlens, Positions };

struct FwdCase {
  ConvLayout layout;
  DType dtype;
  int W;
  Packing packing;
};

ssmjit::CausalConv1dArgs forwardArgs(const FwdCase& c, int64_t L = 200) {
  const int64_t D = 96, B = c.packing == Packing::Dense ? 2 : 1, nseq = 3, S = 4;
  ssmjit::CausalConv1dArgs a;
  a.layout = c.layout;
  const bool cl = c.layout == ConvLayout::ChannelLast;
  a.x = cl ? fakeView(1, c.dtype, {B, L, D}) : fakeView(1, c.dtype, {B, D, L});
  a.out = cl ? fakeView(2, c.dtype, {B, L, D}) : fakeView(2, c.dtype, {B, D, L});
  a.weight = fakeView(3, DType::F32, {D, c.W});
  a.bias = fakeView(4, DType::F32, {D});
  a.silu = true;
  if (c.packing == Packing::CuSeqlens) a.cu_seqlens = fakeView(5, DType::I32, {nseq + 1});
  if (c.packing == Packing::Positions) a.seq_pos = fakeView(6, DType::I32, {1, L});
  if (c.packing != Packing::Positions) {
    a.initial_states = fakeView(7, DType::F32, {S, D, c.W - 1});
    a.final_states = a.initial_states;
    if (c.packing == Packing::CuSeqlens) {
      a.initial_state_indices = fakeView(8, DType::I32, {nseq});
      a.final_state_indices = fakeView(9, DType::I32, {nseq});
    }
  }
  return a;
}

void expectCompiles(const ssmjit::Specialization& spec) {
  SCOPED_TRACE(spec.canonical());
  ssmjit::CompiledKernel k = ssmjit::compileKernel(spec);
  EXPECT_FALSE(k.cubin.empty());
  // ptxas puts a few words of some packed-row variants on the stack (4-16 bytes; 20-32 for the
  // channel-last bf16 positions forward, around its seq_pos check); more means the tile no longer
  // fits the registers.
  EXPECT_LE(k.resources.spillStoreBytes, 32) << k.compileLog;
  EXPECT_LE(k.resources.spillLoadBytes, 32) << k.compileLog;
}

// Every layout, dtype, width and packing (fp16 only at width 4: it shares bf16's code shape).
template <class F>
void forEachVariant(F f) {
  for (ConvLayout layout : {ConvLayout::ChannelFirst, ConvLayout::ChannelLast})
    for (DType dt : {DType::F32, DType::BF16, DType::F16})
      for (int W : {2, 3, 4, 5, 8})
        for (Packing p : {Packing::Dense, Packing::CuSeqlens, Packing::Positions})
          if (dt != DType::F16 || W == 4) f(FwdCase{layout, dt, W, p});
}

}  // namespace

TEST(ConvKernels, EveryForwardVariantCompiles) {
  SSMJIT_REQUIRE_NVRTC();
  forEachVariant([](const FwdCase& c) {
    for (const auto& spec : ssmjit::detail::convSpecializations(forwardArgs(c), "sm_90a")) expectCompiles(spec);
  });
}

TEST(ConvKernels, ForwardCompilesForSm80) {
  SSMJIT_REQUIRE_NVRTC();
  for (ConvLayout layout : {ConvLayout::ChannelFirst, ConvLayout::ChannelLast})
    for (const auto& spec :
         ssmjit::detail::convSpecializations(forwardArgs({layout, DType::BF16, 4, Packing::CuSeqlens}), "sm_80"))
      expectCompiles(spec);
}

TEST(ConvKernels, EveryUpdateVariantCompiles) {
  SSMJIT_REQUIRE_NVRTC();
  for (DType dt : {DType::F32, DType::BF16})
    for (int W : {2, 4, 8})
      for (int L : {1, 8})
        for (bool commit : {true, false}) {
          const int64_t B = 3, D = 96, S = 5;
          ssmjit::CausalConv1dUpdateArgs a;
          a.conv_state = fakeView(1, dt, {S, D, W - 1});
          a.x = fakeView(2, dt, {B, L, D});
          a.out = fakeView(3, dt, {B, L, D});
          a.weight = fakeView(4, DType::F32, {D, W});
          a.bias = fakeView(5, DType::F32, {D});
          a.state_indices = fakeView(6, DType::I32, {B});
          a.silu = true;
          a.commit = commit;
          for (const char* arch : {"sm_90a", "sm_80"})
            expectCompiles(ssmjit::detail::convUpdateSpecialization(a, arch));
        }
}

namespace {
// The backward of forwardArgs(c): every gradient output, states' gradients where the packing
// allows them.
ssmjit::CausalConv1dBackwardArgs backwardArgs(const FwdCase& c, int64_t L = 200) {
  const ssmjit::CausalConv1dArgs f = forwardArgs(c, L);
  ssmjit::CausalConv1dBackwardArgs a;
  a.layout = f.layout;
  a.x = f.x;
  a.weight = f.weight;
  a.bias = f.bias;
  a.silu = f.silu;
  a.dout = f.out;
  a.cu_seqlens = f.cu_seqlens;
  a.seq_pos = f.seq_pos;
  a.initial_states = f.initial_states;
  a.initial_state_indices = f.initial_state_indices;
  a.final_state_indices = f.final_state_indices;
  a.dx = TensorView::contiguous(fakeAddress(10), a.x.dtype, {a.x.shape[0], a.x.shape[1], a.x.shape[2]});
  a.dweight = fakeView(11, DType::F32, {a.weight.shape[0], a.weight.shape[1]});
  a.dbias = fakeView(12, DType::F32, {a.weight.shape[0]});
  if (f.initial_states.defined()) {
    const auto& s = f.initial_states;
    a.dinitial_states = fakeView(13, DType::F32, {s.shape[0], s.shape[1], s.shape[2]});
    a.dfinal_states = fakeView(14, DType::F32, {s.shape[0], s.shape[1], s.shape[2]});
  }
  return a;
}
}  // namespace

TEST(ConvKernels, EveryBackwardVariantCompiles) {
  SSMJIT_REQUIRE_NVRTC();
  forEachVariant([](const FwdCase& c) {
    for (const auto& spec : ssmjit::detail::convBackwardSpecializations(backwardArgs(c), "sm_90a"))
      expectCompiles(spec);
  });
  for (ConvLayout layout : {ConvLayout::ChannelFirst, ConvLayout::ChannelLast})
    for (const auto& spec : ssmjit::detail::convBackwardSpecializations(
             backwardArgs({layout, DType::BF16, 4, Packing::CuSeqlens}), "sm_80"))
      expectCompiles(spec);
}

// The forward's per-element tail is cheap: SiLU through the hardware's exp2 and reciprocal (not
// expf's range reduction and a correctly rounded division), and bf16 results rounded in pairs by
// one cvt (not a software round-to-nearest-even with a NaN branch each). Each was the difference
// between an issue-bound and a bandwidth-bound forward on the H100.
TEST(ConvKernels, ForwardTailIsFastSigmoidAndPairedRounding) {
  SSMJIT_REQUIRE_NVRTC();
  for (ConvLayout layout : {ConvLayout::ChannelFirst, ConvLayout::ChannelLast}) {
    const auto specs =
        ssmjit::detail::convSpecializations(forwardArgs({layout, DType::BF16, 4, Packing::Dense}), "sm_90a");
    SCOPED_TRACE(specs.front().canonical());
    const std::string ptx = ssmjit::compileKernel(specs.front()).ptx;
    EXPECT_NE(ptx.find("ex2.approx.ftz.f32"), std::string::npos);
    EXPECT_NE(ptx.find("div.approx.f32"), std::string::npos);
    EXPECT_EQ(ptx.find("rcp.rn.f32"), std::string::npos);
    // Stores round pairs in hardware: channel-first rows of 200 tokens are 400 bytes (a stride of
    // divisibility class 8, so 16-byte runs); channel-last stores 4 channels a token.
    EXPECT_NE(ptx.find("cvt.rn.bf16x2.f32"), std::string::npos);
    EXPECT_EQ(ptx.find("2147483647"), std::string::npos);  // the software round's NaN test (|u| > inf)
  }
}

// Row, sequence and slot counts are only bounds to the conv kernels: no divisibility class of theirs
// binds, so a serving batch or a varlen batch that changes every step does not compile again.
TEST(ConvKernels, CountsBindNoClass) {
  std::vector<ssmjit::Specialization> specs = ssmjit::detail::convSpecializations(
      forwardArgs({ConvLayout::ChannelFirst, DType::BF16, 4, Packing::CuSeqlens}), "sm_90a");
  for (const auto& s : ssmjit::detail::convBackwardSpecializations(
           backwardArgs({ConvLayout::ChannelLast, DType::BF16, 4, Packing::CuSeqlens}), "sm_90a"))
    specs.push_back(s);
  ssmjit::CausalConv1dUpdateArgs a;
  a.conv_state = fakeView(1, DType::BF16, {5, 96, 3});
  a.x = fakeView(2, DType::BF16, {3, 1, 96});
  a.out = fakeView(3, DType::BF16, {3, 1, 96});
  a.weight = fakeView(4, DType::F32, {96, 4});
  a.state_indices = fakeView(6, DType::I32, {3});
  specs.push_back(ssmjit::detail::convUpdateSpecialization(a, "sm_90a"));
  for (const auto& s : specs)
    for (const char* count : {"div:nseq=", "div:nslots", "div:search_steps=", "div:batch="})
      EXPECT_EQ(s.canonical().find(count), std::string::npos) << count << " in " << s.canonical();
}

// The channel-first backward copies x and dout into its rings as 16-byte vectors in every tile, the
// look-ahead tile of a chunk included (its mask covers whole runs of a thread's tokens): a
// per-token mask there makes every copy of the loop scalar and the kernel issue-bound. Rows of 256
// tokens: 16-byte multiples.
TEST(ConvKernels, ChannelFirstBackwardCopiesVectors) {
  SSMJIT_REQUIRE_NVRTC();
  for (DType dt : {DType::BF16, DType::F32})
    for (Packing p : {Packing::Dense, Packing::CuSeqlens}) {
      const auto specs = ssmjit::detail::convBackwardSpecializations(
          backwardArgs({ConvLayout::ChannelFirst, dt, 4, p}, 256), "sm_90a");
      SCOPED_TRACE(specs.front().canonical());
      ASSERT_EQ(specs.front().kernel, "causal_conv1d_bwd");
      const std::string ptx = ssmjit::compileKernel(specs.front()).ptx;
      // x and dout: the ring's first tiles and the loop's next one
      EXPECT_GE(occurrences(ptx, "cp.async.cg.shared.global [%r"), 4);
      EXPECT_EQ(occurrences(ptx, "cp.async.ca"), 0);
    }
}

// The backward's ring depth out of range (SSMJIT_META) is named with what came.
TEST(ConvKernels, BackwardStagesOutOfRangeAreNamed) {
  for (int64_t stages : {1, 9}) {
    ssmjit::Specialization spec =
        ssmjit::detail::convBackwardSpecializations(
            backwardArgs({ConvLayout::ChannelFirst, DType::BF16, 4, Packing::Dense}), "sm_90a")
            .front();
    spec.set("meta:stages", stages);
    const std::string msg = ssmjit::testing::invalidArgMessage([&] { ssmjit::dsl::completeSpecialization(spec); });
    EXPECT_NE(msg.find("causal_conv1d_bwd: meta stages (SSMJIT_META) is " + std::to_string(stages) + ", expected 2..8"),
              std::string::npos)
        << msg;
  }
}

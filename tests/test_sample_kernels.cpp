// Token-sampling kernels on the CPU: every variant sample_tokens can build (greedy and the draw
// with every combination of top-k, top-p, pad rows and step shapes, each logits dtype, the shared
// step's advance) goes through the whole pipeline and NVRTC for sm_90a and sm_80 without
// spilling. Tensors are fake device addresses: only their alignment classes are read.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "GpuTest.h"  // SSMJIT_REQUIRE_NVRTC
#include "runtime/ops/SampleTokensSpec.h"
#include "ssmjit/ops.h"
#include "tests/support/CompileEach.h"
#include "tests/support/FakeTensors.h"

using ssmjit::DType;
using ssmjit::SampleArgs;
using ssmjit::TensorView;
using ssmjit::testing::fakeView;

namespace {

SampleArgs args(DType dtype, float temperature, int topK, float topP, bool padRows, bool perRowStep) {
  const int64_t B = 64, V = 50288;
  SampleArgs a;
  a.logits = fakeView(1, dtype, {B, V});
  a.token_ids = fakeView(2, DType::I64, {B});
  a.temperature = temperature;
  a.top_k = topK;
  a.top_p = topP;
  a.seed = 1234;
  if (temperature > 0) a.step = perRowStep ? fakeView(3, DType::I64, {B}) : fakeView(3, DType::I64, {1});
  if (padRows) a.row_state_indices = fakeView(4, DType::I32, {B});
  return a;
}

// Each launch of the call compiles, without spilling, with the kernels named in launch order.
void expectCompiles(const SampleArgs& a, const char* arch, std::vector<const char*> kernels) {
  const auto specs = ssmjit::detail::sampleSpecializations(a, arch);
  for (size_t i = 0; i < std::min(specs.size(), kernels.size()); ++i) EXPECT_EQ(specs[i].kernel, kernels[i]);
  ssmjit::testing::expectEachCompiles(specs, kernels.size(), [](auto&, const ssmjit::CompiledKernel& k) {
    EXPECT_EQ(k.resources.spillStoreBytes, 0) << k.compileLog;
    EXPECT_EQ(k.resources.spillLoadBytes, 0) << k.compileLog;
  });
}

}  // namespace

TEST(SampleKernels, EveryGreedyVariantCompiles) {
  SSMJIT_REQUIRE_NVRTC();
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (bool pad : {false, true}) expectCompiles(args(dt, 0.0f, 0, 1.0f, pad, false), "sm_90a", {"sample_argmax"});
}

TEST(SampleKernels, EveryDrawVariantCompiles) {
  SSMJIT_REQUIRE_NVRTC();
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (int topK : {0, 50})
      for (float topP : {1.0f, 0.9f})
        for (bool pad : {false, true})
          for (bool perRow : {false, true}) {
            if (dt != DType::BF16 && (pad || !perRow)) continue;  // the dtype changes only the loads
            const SampleArgs a = args(dt, 0.8f, topK, topP, pad, perRow);
            if (perRow)
              expectCompiles(a, "sm_90a", {"sample_draw"});
            else
              expectCompiles(a, "sm_90a", {"sample_draw", "sample_advance_step"});
          }
}

TEST(SampleKernels, CompilesForSm80) {
  SSMJIT_REQUIRE_NVRTC();
  expectCompiles(args(DType::BF16, 0.0f, 40, 0.95f, true, false), "sm_80", {"sample_argmax"});
  expectCompiles(args(DType::BF16, 1.0f, 40, 0.95f, true, false), "sm_80", {"sample_draw", "sample_advance_step"});
}

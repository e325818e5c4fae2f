// Token-sampling kernels on the CPU: every variant sample_tokens can build (greedy and the draw
// with every combination of top-k, top-p, pad rows and step shapes, each logits dtype, the shared
// step's advance) goes through the whole pipeline and NVRTC for sm_90a and sm_80 without
// spilling. Tensors are fake device addresses: only their alignment classes are read.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "GpuTest.h"  // SSMJIT_REQUIRE_NVRTC
#include "kernels_dsl/CompileKernel.h"
#include "runtime/ops/SampleTokensSpec.h"
#include "ssmjit/ops.h"

using ssmjit::DType;
using ssmjit::SampleArgs;
using ssmjit::TensorView;

namespace {

void* fake(int k) { return reinterpret_cast<void*>(uintptr_t{0x10000} + uintptr_t(k) * 0x1000000); }
TensorView view(int k, DType t, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(fake(k), t, shape);
}

SampleArgs args(DType dtype, float temperature, int topK, float topP, bool padRows, bool perRowStep) {
  const int64_t B = 64, V = 50288;
  SampleArgs a;
  a.logits = view(1, dtype, {B, V});
  a.token_ids = view(2, DType::I64, {B});
  a.temperature = temperature;
  a.top_k = topK;
  a.top_p = topP;
  a.seed = 1234;
  if (temperature > 0) a.step = perRowStep ? view(3, DType::I64, {B}) : view(3, DType::I64, {1});
  if (padRows) a.row_state_indices = view(4, DType::I32, {B});
  return a;
}

void expectCompiles(const ssmjit::Specialization& spec) {
  SCOPED_TRACE(spec.canonical());
  ssmjit::CompiledKernel k = ssmjit::compileKernel(spec);
  EXPECT_FALSE(k.cubin.empty());
  EXPECT_EQ(k.resources.spillStoreBytes, 0) << k.compileLog;
  EXPECT_EQ(k.resources.spillLoadBytes, 0) << k.compileLog;
}

}  // namespace

TEST(SampleKernels, EveryGreedyVariantCompiles) {
  SSMJIT_REQUIRE_NVRTC();
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (bool pad : {false, true}) {
      const auto specs = ssmjit::detail::sampleSpecializations(args(dt, 0.0f, 0, 1.0f, pad, false), "sm_90a");
      ASSERT_EQ(specs.size(), 1u);
      EXPECT_EQ(specs[0].kernel, "sample_argmax");
      expectCompiles(specs[0]);
    }
}

TEST(SampleKernels, EveryDrawVariantCompiles) {
  SSMJIT_REQUIRE_NVRTC();
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (int topK : {0, 50})
      for (float topP : {1.0f, 0.9f})
        for (bool pad : {false, true})
          for (bool perRow : {false, true}) {
            if (dt != DType::BF16 && (pad || !perRow)) continue;  // the dtype changes only the loads
            const auto specs =
                ssmjit::detail::sampleSpecializations(args(dt, 0.8f, topK, topP, pad, perRow), "sm_90a");
            ASSERT_EQ(specs.size(), perRow ? 1u : 2u);
            EXPECT_EQ(specs[0].kernel, "sample_draw");
            if (!perRow) EXPECT_EQ(specs[1].kernel, "sample_advance_step");
            for (const auto& s : specs) expectCompiles(s);
          }
}

TEST(SampleKernels, CompilesForSm80) {
  SSMJIT_REQUIRE_NVRTC();
  for (float temperature : {0.0f, 1.0f})
    for (const auto& s :
         ssmjit::detail::sampleSpecializations(args(DType::BF16, temperature, 40, 0.95f, true, false), "sm_80"))
      expectCompiles(s);
}

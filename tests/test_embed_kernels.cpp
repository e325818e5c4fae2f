// The embedding kernel on the CPU: every variant the op can build (int32/int64 ids, each table
// dtype, out in the table's dtype or fp32, contiguous and padded rows) goes through the whole
// pipeline and NVRTC for sm_90a and sm_80, without spilling; a contiguous bf16 row is copied in
// vectors. Tensors are fake device addresses: only their alignment classes are read.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "GpuTest.h"  // SSMJIT_REQUIRE_NVRTC
#include "kernels_dsl/CompileKernel.h"
#include "runtime/ops/EmbeddingSpec.h"
#include "ssmjit/ops.h"
#include "tests/support/FakeTensors.h"
#include "tests/support/Occurrences.h"

using ssmjit::DType;
using ssmjit::TensorView;
using ssmjit::testing::fakeView;

namespace {

// ids (T,), table (V, D), out (T, D); `padded`: the table's and out's rows 8 elements longer.
ssmjit::EmbeddingArgs embeddingArgs(DType ids, DType table, DType out, int64_t D, bool padded) {
  const int64_t T = 7, V = 50277;
  ssmjit::EmbeddingArgs a;
  a.ids = fakeView(1, ids, {T});
  a.table = fakeView(2, table, {V, D});
  a.out = fakeView(3, out, {T, D});
  if (padded) a.table.strides[0] = a.out.strides[0] = D + 8;
  return a;
}

}  // namespace

TEST(EmbedKernels, EveryVariantCompiles) {
  SSMJIT_REQUIRE_NVRTC();
  for (DType ids : {DType::I32, DType::I64})
    for (DType table : {DType::F32, DType::BF16, DType::F16})
      for (bool fp32Out : {false, true})
        for (int64_t D : {int64_t{2560}, int64_t{97}}) {
          const ssmjit::EmbeddingArgs a = embeddingArgs(ids, table, fp32Out ? DType::F32 : table, D, D == 97);
          for (const char* arch : {"sm_90a", "sm_80"}) {
            const ssmjit::Specialization spec = ssmjit::detail::embeddingSpecialization(a, arch);
            SCOPED_TRACE(spec.canonical());
            const ssmjit::CompiledKernel k = ssmjit::compileKernel(spec);
            EXPECT_FALSE(k.cubin.empty());
            EXPECT_EQ(k.resources.spillStoreBytes, 0) << k.compileLog;
            // int64 ids compare against the vocabulary in 64 bits (ops.h: no wrap into the table).
            EXPECT_EQ(spec.get("meta:index_bits"), ids == DType::I64 ? 64 : 32);
          }
        }
}

// A copy: a contiguous bf16 row of 2560 channels moves in vector loads and stores (runs of 4
// channels a thread: 8 bytes), not element by element.
TEST(EmbedKernels, ContiguousRowsMoveInVectors) {
  SSMJIT_REQUIRE_NVRTC();
  const auto spec = ssmjit::detail::embeddingSpecialization(
      embeddingArgs(DType::I32, DType::BF16, DType::BF16, 2560, false), "sm_90a");
  const std::string ptx = ssmjit::compileKernel(spec).ptx;
  EXPECT_GE(ssmjit::testing::occurrences(ptx, "ld.global.nc.v2.u32"), 2) << ptx;
  EXPECT_GE(ssmjit::testing::occurrences(ptx, "st.global.v2.u32"), 2) << ptx;
}

// The vocabulary and the token count are only bounds: a new batch size compiles nothing.
TEST(EmbedKernels, CountsBindNoClass) {
  const auto spec = ssmjit::detail::embeddingSpecialization(
      embeddingArgs(DType::I64, DType::BF16, DType::BF16, 2560, false), "sm_90a");
  EXPECT_EQ(spec.canonical().find("V="), std::string::npos) << spec.canonical();
  EXPECT_EQ(spec.canonical().find("div:V"), std::string::npos) << spec.canonical();
}

// The DSL's dot on small kernels of its own: the mma layout it gives the kernel, the mma terms its
// operands' bf16 pieces take, a bf16 operand used as its loaded pairs, and the shapes it refuses.
// (test_dsl_dot_gpu.cpp runs it against a float64 product.)
#include <gtest/gtest.h>

#include <string>

#include "ssmjit/error.h"
#include "tests/support/OwnKernel.h"

namespace ssmjit::testing {
namespace {

// out = acc + a . b with a [M, K] and acc [M, N] row-major, b[k][n] = b[k * N + n].
std::string dotCuda(int64_t M, int64_t K, int64_t N, int pa, int pb) {
  dsl::KernelDef def;
  def.name = "dot_test";
  def.build = [=](KernelBuilder& k, const Specialization&) {
    Value a = k.ptrArg("a", dsl::PtrClass::Float), b = k.ptrArg("b", dsl::PtrClass::Float),
          acc = k.ptrArg("acc", dsl::PtrClass::Float), out = k.ptrArg("out", dsl::PtrClass::Float);
    Value rows = k.expandDims(k.range(M), 1);
    Value A = k.load(a, rows * K + k.expandDims(k.range(K), 0));
    Value cOff = rows * N + k.expandDims(k.range(N), 0);
    k.store(out, cOff, k.dot(A, b, k.constInt(0), k.constInt(N), k.constInt(1), k.load(acc, cOff), pa, pb));
  };
  return ownKernelCuda(def, {"a", "b", "acc", "out"});
}

TEST(DslDot, TakesTheMmaLayoutWithVectorRuns) {
  const std::string cuda = dotCuda(64, 16, 128, 1, 1);
  // f32 data: runs of 4 (one 16-byte vector) over the 4 lanes of a lane group.
  EXPECT_NE(cuda.find("parent layout: spt=[1,4] tpw=[8,4] wpc=[4,1]"), std::string::npos) << cuda;
  EXPECT_NE(cuda.find("ssm_ld<4>"), std::string::npos) << "a and acc load as vectors";
}

TEST(DslDot, EachTermOfThePiecesIsOneMma) {
  // Terms (i, j) of weight i + j below max(pieces): 1x1 -> 1, 3x1 -> 3, 2x2 -> 3, 3x3 -> 6; one
  // mma line each for a thread's one pair of rows (64 rows over 32 lane groups: two a thread).
  EXPECT_EQ(occurrences(dotCuda(64, 16, 16, 1, 1), "ssm_mma_bf16("), 1);
  EXPECT_EQ(occurrences(dotCuda(64, 16, 16, 3, 1), "ssm_mma_bf16("), 3);
  EXPECT_EQ(occurrences(dotCuda(64, 16, 16, 2, 2), "ssm_mma_bf16("), 3);
  EXPECT_EQ(occurrences(dotCuda(64, 16, 16, 3, 3), "ssm_mma_bf16("), 6);
  // 128 rows: two pairs a thread.
  EXPECT_EQ(occurrences(dotCuda(128, 16, 16, 3, 3), "ssm_mma_bf16("), 12);
}

TEST(DslDot, ABf16OperandIsItsLoadedPairs) {
  dsl::KernelDef def;
  def.name = "dot_bf16_a";
  def.build = [](KernelBuilder& k, const Specialization&) {
    Value a = k.ptrArg("a", dsl::PtrClass::Float), b = k.ptrArg("b", dsl::PtrClass::Float),
          out = k.ptrArg("out", dsl::PtrClass::Float);
    Value rows = k.expandDims(k.range(64), 1);
    Value A = k.load(a, rows * 32 + k.expandDims(k.range(32), 0));
    Value cOff = rows * 16 + k.expandDims(k.range(16), 0);
    k.store(out, cOff,
            k.dot(A, b, k.constInt(0), k.constInt(16), k.constInt(1), k.splat(k.constFloat(0), {64, 16}), 1, 1));
  };
  const std::string cuda = ownKernelCuda(def, {"b", "out"}, {"a"});
  // The A fragments are the loaded 32-bit words; only b is split (two values a call).
  EXPECT_NE(cuda.find("ssm_ld_words<"), std::string::npos) << cuda;
  EXPECT_EQ(occurrences(cuda, "ssm_bf16_pieces<"), 2) << cuda;
}

TEST(DslDot, RefusesShapesTheMmaCannotTake) {
  auto builds = [](int64_t M, int64_t K, int64_t N, int64_t accRows, int pieces) {
    dsl::KernelDef def;
    def.name = "dot_bad";
    def.build = [=](KernelBuilder& k, const Specialization&) {
      Value b = k.ptrArg("b", dsl::PtrClass::Float);
      Value A = k.splat(k.constFloat(1), {M, K});
      k.dot(A, b, k.constInt(0), k.constInt(N), k.constInt(1), k.splat(k.constFloat(0), {accRows, N}), pieces, 1);
    };
    try {
      ownKernelCuda(def, {"b"});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(builds(64, 12, 16, 64, 1).find("multiples of 8"), std::string::npos);
  EXPECT_NE(builds(64, 16, 12, 64, 1).find("multiples of 8"), std::string::npos);
  EXPECT_NE(builds(64, 16, 16, 32, 1).find("rows"), std::string::npos);
  EXPECT_NE(builds(64, 16, 16, 64, 4).find("pieces must be 1..3"), std::string::npos);
}

}  // namespace
}  // namespace ssmjit::testing

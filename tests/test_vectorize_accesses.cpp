// vectorize-accesses and the DSL's shared buffer on small kernels of their own (no registry
// kernel): which accesses become 16-byte vectors, read from the generated CUDA.
#include <gtest/gtest.h>

#include <functional>
#include <regex>
#include <string>

#include "tests/support/OwnKernel.h"

namespace ssmjit::testing {
namespace {

// A [16, 64] f32 tile of x (row-major) staged through a shared buffer at the offsets `place`
// gives each token of a row, read back and written to y. `name` tells the variants' dump files apart.
std::string stagedCopyCuda(const std::string& name, const std::function<Value(KernelBuilder&, Value cols)>& place,
                           int64_t rowStride) {
  dsl::KernelDef def;
  def.name = name;
  def.build = [&](KernelBuilder& k, const Specialization&) {
    Value x = k.ptrArg("x", dsl::PtrClass::Float), y = k.ptrArg("y", dsl::PtrClass::Float);
    Value rows = k.expandDims(k.range(16), 1), cols = k.expandDims(k.range(64), 0);
    Value off = rows * 64 + cols;
    Value buf = k.sharedBuffer(16 * rowStride);
    Value at = rows * rowStride + place(k, cols);
    k.store(buf, at, k.load(x, off));
    k.barrier();
    k.store(y, off, k.load(buf, at));
  };
  return ownKernelCuda(def, {"x", "y"});
}

// The shared buffer's name, from its declaration.
std::string bufferName(const std::string& cuda, int64_t elements) {
  std::smatch m;
  const std::regex decl("__shared__ __align__\\(16\\) float (v\\d+)\\[" + std::to_string(elements) + "\\];");
  return std::regex_search(cuda, m, decl) ? m[1].str() : "";
}

// A shared buffer is 16-byte aligned: a contiguous row is stored and loaded 4 floats at a time.
TEST(VectorizeAccesses, SharedBufferRowsMoveAsVectors) {
  const std::string cuda = stagedCopyCuda(
      "staged_copy", [](KernelBuilder&, Value cols) { return cols; }, 64);
  const std::string buf = bufferName(cuda, 16 * 64);
  ASSERT_FALSE(buf.empty()) << cuda;
  EXPECT_EQ(occurrences(cuda, "__syncthreads();"), 1);
  EXPECT_TRUE(std::regex_search(cuda, std::regex("ssm_st<4>\\(" + buf + " \\+"))) << cuda;
  EXPECT_TRUE(std::regex_search(cuda, std::regex("ssm_ld<4>\\(&v\\d+\\[r\\], " + buf + " \\+"))) << cuda;
}

// Padding 4 floats after every 32 (t + 4 (t / 32)) keeps runs of 4 contiguous and aligned: a
// non-negative run aligned to 4, divided by 32, is one value.
TEST(VectorizeAccesses, PaddedRowsStillMoveAsVectors) {
  const std::string cuda = stagedCopyCuda(
      "staged_copy_padded", [](KernelBuilder&, Value cols) { return cols + (cols / 32) * 4; }, 72);
  const std::string buf = bufferName(cuda, 16 * 72);
  ASSERT_FALSE(buf.empty()) << cuda;
  EXPECT_TRUE(std::regex_search(cuda, std::regex("ssm_st<4>\\(" + buf + " \\+"))) << cuda;
  EXPECT_TRUE(std::regex_search(cuda, std::regex("ssm_ld<4>\\(&v\\d+\\[r\\], " + buf + " \\+"))) << cuda;
}

// A quotient of values that may be negative is not taken as constant over a run (a truncating
// division changes value right after a negative multiple): those accesses stay one element each.
TEST(VectorizeAccesses, QuotientsOfPossiblyNegativeRunsAreNotConstant) {
  const std::string cuda = stagedCopyCuda(
      "staged_copy_padded_off", [](KernelBuilder&, Value cols) { return cols + ((cols - 8) / 32) * 4; }, 72);
  const std::string buf = bufferName(cuda, 16 * 72);
  ASSERT_FALSE(buf.empty()) << cuda;
  EXPECT_TRUE(std::regex_search(cuda, std::regex("ssm_st<1>\\(" + buf + " \\+"))) << cuda;
  EXPECT_FALSE(std::regex_search(cuda, std::regex("ssm_st<[248]>\\(" + buf))) << cuda;
}

}  // namespace
}  // namespace ssmjit::testing

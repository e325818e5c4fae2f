// The emitter's loops over a thread's registers: up to four iterations come unrolled (a block with
// a constant index each, since NVVM took most of its time on many such short loops), longer ones
// stay `#pragma unroll` loops (repeating long bodies costs NVRTC's front end more) unless the
// kernel's unroll lines take their repeated text.
#include <gtest/gtest.h>

#include <string>

#include "tests/support/OwnKernel.h"

namespace ssmjit::testing {
namespace {

// out[i] = a[i] * a[i] + 1 over `n` elements (a 1-D tile spread over the block's 128 threads).
std::string squareCuda(int64_t n, int unrollLines = 0) {
  dsl::KernelDef def;
  def.name = unrollLines ? "square_unrolled" : "square";  // one dump file each
  def.build = [n, unrollLines](KernelBuilder& k, const Specialization&) {
    if (unrollLines) k.setUnrollLines(unrollLines);
    Value a = k.ptrArg("a", dsl::PtrClass::Float), out = k.ptrArg("out", dsl::PtrClass::Float);
    Value offs = k.range(n), v = k.load(a, offs);
    k.store(out, offs, v * v + 1.0);
  };
  return ownKernelCuda(def, {"a", "out"});
}

TEST(EmitUnroll, ShortRegisterLoopsAreUnrolledInTheSource) {
  const std::string cuda = squareCuda(512);  // 4 registers a thread
  EXPECT_EQ(occurrences(cuda, "#pragma unroll"), 0) << cuda;
  EXPECT_NE(cuda.find("const int r = 3;"), std::string::npos) << cuda;
}

TEST(EmitUnroll, LongRegisterLoopsStayLoops) {
  const std::string cuda = squareCuda(8192);  // 64 registers a thread
  EXPECT_GE(occurrences(cuda, "#pragma unroll"), 1) << cuda;
  EXPECT_NE(cuda.find("r < 64"), std::string::npos) << cuda;
  EXPECT_EQ(cuda.find("const int r = 5;"), std::string::npos) << cuda;
}

TEST(EmitUnroll, UnrollLinesTakeLongerLoopsOfShortBodies) {
  const std::string loop = squareCuda(1024);  // 8 registers a thread
  EXPECT_GE(occurrences(loop, "#pragma unroll"), 1) << loop;
  const std::string unrolled = squareCuda(1024, 64);
  EXPECT_EQ(occurrences(unrolled, "#pragma unroll"), 0) << unrolled;
  EXPECT_NE(unrolled.find("const int r = 7;"), std::string::npos) << unrolled;
  const std::string longer = squareCuda(16384, 64);  // 128 registers: over 64 lines repeated
  EXPECT_GE(occurrences(longer, "#pragma unroll"), 1) << longer;
  EXPECT_EQ(longer.find("const int r = 127;"), std::string::npos) << longer;
}

}  // namespace
}  // namespace ssmjit::testing

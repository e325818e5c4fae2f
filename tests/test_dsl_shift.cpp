// The DSL's shift on a small kernel of its own: a tile moved along time with the vacated places
// from a neighbour tile. Over the whole axis the places cross lanes (warp shuffles); with a
// period of one thread's run each run moves on its own, by register moves only (PackedRuns).
#include <gtest/gtest.h>

#include <string>

#include "ssmjit/error.h"
#include "tests/support/OwnKernel.h"

namespace ssmjit::testing {
namespace {

// y = shift(x[t], x[t + period or 64], -3) over a [16, 64] tile, 8 lanes along time (runs of 8).
std::string shiftedCopyCuda(int period) {
  dsl::KernelDef def;
  def.name = period > 0 ? "shifted_copy_period" + std::to_string(period) : "shifted_copy";  // one dump file each
  def.build = [&](KernelBuilder& k, const Specialization&) {
    k.setShiftLanes(8);
    Value x = k.ptrArg("x", dsl::PtrClass::Float), y = k.ptrArg("y", dsl::PtrClass::Float);
    Value off = k.expandDims(k.range(16), 1) * 256 + k.expandDims(k.range(64), 0);
    Value cur = k.load(x, off), fill = k.load(x, off + (period > 0 ? period : 64));
    k.store(y, off, k.shift(cur, fill, 1, -3, period));
  };
  return ownKernelCuda(def, {"x", "y"});
}

TEST(DslShift, AcrossTheAxisPlacesCrossLanes) {
  const std::string cuda = shiftedCopyCuda(0);
  EXPECT_EQ(occurrences(cuda, "__shfl_sync"), 1) << cuda;
}

TEST(DslShift, WithARunsPeriodEachRunMovesInItsThread) {
  const std::string cuda = shiftedCopyCuda(8);
  EXPECT_EQ(occurrences(cuda, "__shfl"), 0) << cuda;
  EXPECT_NE(cuda.find("ssm_ld<4>"), std::string::npos) << "the runs load as vectors";
}

TEST(DslShift, PeriodsThatAreNotARunOrTheAxisAreRefused) {
  // 5 does not divide the axis: refused while building.
  try {
    shiftedCopyCuda(5);
    ADD_FAILURE() << "a period of 5 over 64 places was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shift period 5 does not divide the axis' extent 64"), std::string::npos)
        << e.what();
  }
  // 16 divides it but is two threads' runs: the emitter cannot move it in registers.
  try {
    shiftedCopyCuda(16);
    ADD_FAILURE() << "a period of 16 with runs of 8 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shift with segments of 16 places"), std::string::npos) << e.what();
  }
}

// A shifted tile sets the kernel's layout even where a larger tile lies beside it (a packed scan
// ranks its sequences in a [64, lanes] tile beside its time tiles): the emitter shifts only along
// an axis the layout holds whole in one warp.
TEST(DslShift, TheShiftedTileSetsTheLayoutBesideALargerOne) {
  dsl::KernelDef def;
  def.name = "shifted_beside_larger";
  def.build = [&](KernelBuilder& k, const Specialization&) {
    k.setShiftLanes(8);
    Value x = k.ptrArg("x", dsl::PtrClass::Float), y = k.ptrArg("y", dsl::PtrClass::Float);
    Value wide = k.expandDims(k.range(64), 1) * 8 + k.expandDims(k.range(8), 0);  // [64, 8]: 512 places
    k.store(y, wide + 4096, k.load(x, wide + 4096));
    Value off = k.expandDims(k.range(16), 1) * 256 + k.expandDims(k.range(16), 0);  // [16, 16]: runs of 2
    k.store(y, off, k.shift(k.load(x, off), k.load(x, off + 2), 1, -1, 2));
  };
  const std::string cuda = ownKernelCuda(def, {"x", "y"});
  EXPECT_EQ(occurrences(cuda, "__shfl"), 0) << "runs of 2 move in their threads\n" << cuda;
}

}  // namespace
}  // namespace ssmjit::testing

// Context parallelism's parts of a packed row, on the CPU: which pieces of which sequences each
// rank holds, which continue across its edges, the index arrays its calls take, and the errors for
// rows the ranks cannot split.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/model/Mamba2CpPart.h"
#include "tests/support/ExpectError.h"
#include "tests/support/LayerSizes.h"

using namespace ssmjit;
using ssmjit::detail::cpPartOf;
using ssmjit::detail::CpPart;
using ssmjit::testing::invalidArgMessage;

namespace {

Mamba2Dims dims() { return ssmjit::testing::mamba2Dims(8, 2, 2, 2, 1); }

// A part of `rows` tokens of a row with `cu` and slots 10, 11, ...
CpPart part(std::vector<int64_t> cu, int64_t rows, int rank, int ranks) {
  Mamba2CpPrefillArgs a;
  a.hidden = TensorView::contiguous(reinterpret_cast<void*>(uintptr_t{256}), DType::BF16, {rows, 8});
  a.cu_seqlens = std::move(cu);
  for (size_t i = 0; i + 1 < a.cu_seqlens.size(); ++i) a.slots.push_back(static_cast<int32_t>(10 + i));
  return cpPartOf(dims(), a, rank, ranks);
}

TEST(CpPart, SegmentsSlotsAndContinuations) {
  // Four ranks of 10 tokens; sequences [0, 4), [4, 35), [35, 40): the long one covers ranks 1 and
  // 2 whole and ends on rank 3.
  const std::vector<int64_t> cu = {0, 4, 35, 40};
  CpPart p0 = part(cu, 10, 0, 4);
  EXPECT_EQ(p0.nloc, 2);
  EXPECT_FALSE(p0.firstContinues);
  EXPECT_TRUE(p0.lastContinues);
  // cu | finals | first's incoming
  EXPECT_EQ(p0.ints, (std::vector<int32_t>{0, 4, 10, 10, -1, -1, -1}));
  const CpPart p1 = part(cu, 10, 1, 4);
  EXPECT_EQ(p1.nloc, 1);
  EXPECT_TRUE(p1.firstContinues);
  EXPECT_TRUE(p1.lastContinues);
  EXPECT_EQ(p1.ints, (std::vector<int32_t>{0, 10, -1, 0}));
  const CpPart p2 = part(cu, 10, 2, 4);
  EXPECT_TRUE(p2.nloc == 1 && p2.firstContinues && p2.lastContinues);
  const CpPart p3 = part(cu, 10, 3, 4);
  EXPECT_EQ(p3.nloc, 2);
  EXPECT_TRUE(p3.firstContinues);
  EXPECT_FALSE(p3.lastContinues);
  EXPECT_EQ(p3.p0, 30);
  EXPECT_EQ(p3.ints, (std::vector<int32_t>{0, 5, 10, 11, 12, 0, -1}));
  // A boundary on the rank edge: nothing continues.
  const CpPart q = part({0, 10, 20}, 10, 1, 2);
  EXPECT_FALSE(q.firstContinues);
  EXPECT_FALSE(q.lastContinues);
  EXPECT_EQ(q.ints, (std::vector<int32_t>{0, 10, 11, -1}));
}

TEST(CpPart, RowsTheRanksCannotSplitAreNamed) {
  EXPECT_MENTIONS(invalidArgMessage([] { part({0, 4}, 2, 0, 2); }),
                  "each rank holds 2 tokens, expected at least conv width - 1 = 3");
  EXPECT_MENTIONS(invalidArgMessage([] { part({0, 10, 19}, 10, 0, 2); }), "cu_seqlens must run from 0 to T = 20");
  EXPECT_MENTIONS(invalidArgMessage([] { part({0, 12, 12, 20}, 10, 0, 2); }), "cu_seqlens[2] is not above");
  Mamba2CpPrefillArgs a;
  a.hidden = TensorView::contiguous(reinterpret_cast<void*>(uintptr_t{256}), DType::BF16, {10, 8});
  a.cu_seqlens = {0, 20};
  EXPECT_MENTIONS(invalidArgMessage([&] { cpPartOf(dims(), a, 0, 2); }), "slots has 0 entries, expected one per");
  a.hidden.shape[1] = 7;
  EXPECT_MENTIONS(invalidArgMessage([&] { cpPartOf(dims(), a, 0, 2); }), "hidden is (10, 7), expected (T/c, 8)");
}

}  // namespace

// The tensor-parallel prefill's out_proj pieces, on the CPU: how the rows split, how many pieces
// SSMJIT_TP_OVERLAP_PIECES and the automatic choice give, and the error for a bad value. (The
// pieces' numbers against one GPU: ParallelMamba2.* in the GPU tests.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "runtime/model/OverlappedAllReduce.h"
#include "tests/support/ExpectError.h"

using namespace ssmjit;
using namespace ssmjit::detail;
using ssmjit::testing::invalidArgMessage;

namespace {

std::vector<int64_t> sizes(const std::vector<RowRange>& r) {
  std::vector<int64_t> out;
  for (const RowRange& p : r) out.push_back(p.end - p.begin);
  return out;
}

// Every piece non-empty, in order, covering [0, rows) without a gap.
void expectCovers(const std::vector<RowRange>& r, int64_t rows) {
  int64_t at = 0;
  for (const RowRange& p : r) {
    EXPECT_EQ(p.begin, at);
    EXPECT_GT(p.end, p.begin);
    at = p.end;
  }
  EXPECT_EQ(at, rows);
}

TEST(OverlapPieces, RowsSplitEvenlyLargerFirst) {
  EXPECT_EQ(sizes(rowPieces(10, 4)), (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(sizes(rowPieces(16384, 4)), (std::vector<int64_t>{4096, 4096, 4096, 4096}));
  EXPECT_EQ(sizes(rowPieces(140, 3)), (std::vector<int64_t>{47, 47, 46}));
  EXPECT_EQ(sizes(rowPieces(7, 1)), (std::vector<int64_t>{7}));
  for (int64_t rows : {1, 2, 5, 99, 4097})
    for (int pieces : {1, 2, 3, 4, 8}) expectCovers(rowPieces(rows, pieces), rows);
}

TEST(OverlapPieces, FewerRowsThanPiecesGiveOneRowEach) {
  EXPECT_EQ(sizes(rowPieces(3, 5)), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_TRUE(rowPieces(0, 4).empty());
}

TEST(OverlapPieces, AutomaticFromTheRowCount) {
  EXPECT_EQ(overlapPieces(std::nullopt, kAutoOverlapMinRows - 1), 1);
  EXPECT_EQ(overlapPieces(std::nullopt, kAutoOverlapMinRows), kAutoOverlapPieces);
  EXPECT_EQ(overlapPieces(std::nullopt, 16384), kAutoOverlapPieces);
  EXPECT_EQ(overlapPieces(3, 140), 3);
  EXPECT_EQ(overlapPieces(1, 16384), 1);
}

TEST(OverlapPieces, KnobParsing) {
  EXPECT_EQ(parseOverlapPieces(""), std::nullopt);
  EXPECT_EQ(parseOverlapPieces("1"), 1);
  EXPECT_EQ(parseOverlapPieces("6"), 6);
  for (const char* bad : {"0", "-2", "four", "3x", " 3", "2.5", "99999999999"}) {
    const std::string msg = invalidArgMessage([&] { parseOverlapPieces(bad); });
    EXPECT_MENTIONS(msg, "SSMJIT_TP_OVERLAP_PIECES", std::string("'") + bad + "'", "expected a positive integer");
  }
}

TEST(OverlapPieces, ReadFromTheEnvironment) {
  const char* old = std::getenv("SSMJIT_TP_OVERLAP_PIECES");
  const std::string saved = old ? old : "";
  setenv("SSMJIT_TP_OVERLAP_PIECES", "5", 1);
  EXPECT_EQ(tpOverlapPieces(100), 5);
  setenv("SSMJIT_TP_OVERLAP_PIECES", "none", 1);
  EXPECT_MENTIONS(invalidArgMessage([] { tpOverlapPieces(100); }), "SSMJIT_TP_OVERLAP_PIECES", "'none'");
  unsetenv("SSMJIT_TP_OVERLAP_PIECES");
  EXPECT_EQ(tpOverlapPieces(8192), kAutoOverlapPieces);
  if (old) setenv("SSMJIT_TP_OVERLAP_PIECES", saved.c_str(), 1);
}

}  // namespace

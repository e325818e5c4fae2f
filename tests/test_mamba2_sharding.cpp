// The tensor-parallel shard of a Mamba-2 layer: which in_proj rows, conv channels, heads,
// channels and out_proj columns each rank holds, for several H, G and t; that the shards together
// hold every row exactly once; sliceTensor's copies; and the errors for uneven splits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "runtime/model/Mamba2Sharding.h"
#include "ssmjit/mamba2_parallel.h"
#include "tests/support/ExpectError.h"
#include "tests/support/LayerSizes.h"

using namespace ssmjit;
using namespace ssmjit::model;
using ssmjit::testing::invalidArgMessage;

namespace {

Mamba2Dims dims(int64_t H, int64_t P, int64_t N, int64_t G) { return ssmjit::testing::mamba2Dims(32, H, P, N, G); }

std::vector<int64_t> rowsOf(const TensorSlice& s) {
  std::vector<int64_t> r;
  for (const RowRange& x : s.ranges)
    for (int64_t i = 0; i < x.count; ++i) r.push_back(x.start + i);
  return r;
}

TEST(Mamba2Sharding, TwoRanksOfFourHeadsTwoGroups) {
  const Mamba2Dims d = dims(4, 2, 3, 2);  // Di 8, GN 6: in_proj rows z 0-7, x 8-15, B 16-21, C 22-27, dt 28-31
  const Mamba2LayerShard s = planMamba2Shard(d, 1, 2);
  EXPECT_EQ(s.local.heads, 2);
  EXPECT_EQ(s.local.groups, 1);
  EXPECT_EQ(s.local.inProjRows(), rowsOf(s.inProj).size());
  EXPECT_EQ(rowsOf(s.inProj), (std::vector<int64_t>{4, 5, 6, 7, 12, 13, 14, 15, 19, 20, 21, 25, 26, 27, 30, 31}));
  // conv channels x 0-7, B 8-13, C 14-19.
  EXPECT_EQ(rowsOf(s.conv), (std::vector<int64_t>{4, 5, 6, 7, 11, 12, 13, 17, 18, 19}));
  EXPECT_EQ(rowsOf(s.heads), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(rowsOf(s.channels), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(s.outProj.axis, 1);
  EXPECT_EQ(rowsOf(s.outProj), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_FALSE(s.outProjBias);
  EXPECT_TRUE(planMamba2Shard(d, 0, 2).outProjBias);
}

// Every rank's pieces together are every row once, each rank's heads stay with their groups, and
// the local dims describe the local tensors.
TEST(Mamba2Sharding, ShardsPartitionEveryTensor) {
  struct Case {
    int64_t H, P, N, G;
    int t;
  };
  for (const Case c : {Case{4, 2, 3, 2, 2}, Case{8, 4, 2, 8, 4}, Case{80, 64, 128, 8, 2}, Case{80, 64, 128, 8, 8},
                       Case{24, 2, 2, 4, 4}, Case{6, 3, 5, 1, 1}}) {
    const Mamba2Dims d = dims(c.H, c.P, c.N, c.G);
    std::vector<int64_t> in, conv, heads, ch, cols;
    for (int r = 0; r < c.t; ++r) {
      const Mamba2LayerShard s = planMamba2Shard(d, r, c.t);
      EXPECT_EQ(s.inProj.size(), s.local.inProjRows());
      EXPECT_EQ(s.conv.size(), s.local.convDim());
      EXPECT_EQ(s.heads.size(), s.local.heads);
      EXPECT_EQ(s.channels.size(), s.local.dInner());
      EXPECT_EQ(s.local.heads / s.local.groups, d.heads / d.groups);  // heads per group unchanged
      // The first head of the rank belongs to its first group.
      EXPECT_EQ(s.heads.ranges[0].start / (d.heads / d.groups) * d.state, (s.conv.ranges[1].start - d.dInner()));
      for (auto [all, slice] : {std::pair{&in, &s.inProj}, std::pair{&conv, &s.conv}, std::pair{&heads, &s.heads},
                                std::pair{&ch, &s.channels}, std::pair{&cols, &s.outProj}}) {
        const std::vector<int64_t> r2 = rowsOf(*slice);
        all->insert(all->end(), r2.begin(), r2.end());
      }
    }
    for (auto [all, n] : {std::pair{&in, d.inProjRows()}, std::pair{&conv, d.convDim()}, std::pair{&heads, d.heads},
                          std::pair{&ch, d.dInner()}, std::pair{&cols, d.dInner()}}) {
      std::sort(all->begin(), all->end());
      std::vector<int64_t> want(static_cast<size_t>(n));
      std::iota(want.begin(), want.end(), 0);
      EXPECT_EQ(*all, want) << "H " << c.H << " G " << c.G << " t " << c.t;
    }
  }
}

TEST(Mamba2Sharding, UnevenSplitsNameGroupsHeadsAndT) {
  EXPECT_MENTIONS(invalidArgMessage([] { planMamba2Shard(dims(8, 2, 2, 1), 0, 2); }),
                  "tensor parallelism over 2 ranks (t) needs groups G and heads H divisible by t, got G 1, H 8, t 2");
  EXPECT_MENTIONS(invalidArgMessage([] { mamba2_tp_shard_dims(dims(12, 2, 2, 4), 8); }), "got G 4, H 12, t 8");
  EXPECT_MENTIONS(invalidArgMessage([] { planMamba2Shard(dims(8, 2, 2, 2), 2, 2); }), "rank 2, expected [0, 2)");
}

TEST(Mamba2Sharding, SliceTensorCopiesRowsAndColumns) {
  std::vector<float> m(4 * 5);
  std::iota(m.begin(), m.end(), 0.0f);  // m[i][j] = 5 i + j
  const TensorView v = TensorView::contiguous(m.data(), DType::F32, {4, 5}, DeviceKind::CPU);
  std::vector<char> out;
  EXPECT_EQ(sliceTensor(v, {0, {{3, 1}, {0, 2}}}, DType::F32, out), (std::vector<int64_t>{3, 5}));
  std::vector<float> got(15);
  std::memcpy(got.data(), out.data(), 60);
  EXPECT_EQ(got, (std::vector<float>{15, 16, 17, 18, 19, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(sliceTensor(v, {1, {{1, 2}}}, DType::F32, out, [](double x) { return -x; }), (std::vector<int64_t>{4, 2}));
  got.resize(8);
  std::memcpy(got.data(), out.data(), 32);
  EXPECT_EQ(got, (std::vector<float>{-1, -2, -6, -7, -11, -12, -16, -17}));
}

}  // namespace

// The kernels a Mamba-2 model runs, listed without a GPU (what `ssmjit prewarm --model` compiles):
// every family the forward pass launches appears, decode at each batch bucket, a tensor-parallel
// rank's are those of a model of its shard's size, and a bad checkpoint config or a split that
// does not divide the groups is refused by name.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "runtime/model/Mamba2Kernels.h"
#include "support/ExpectError.h"
#include "support/ScratchDir.h"
#include "support/TinyMamba2.h"
#include "support/TinyMamba2Kernels.h"

namespace ssmjit {
namespace {

TEST(Mamba2Kernels, TheModelListsEveryKernelItRuns) {
  Mamba2ModelOptions o;
  o.max_batch = 5;
  o.max_prefill_tokens = 300;
  const std::vector<Specialization> specs = testing::tinyMamba2Specializations(o);
  std::set<std::string> kernels;
  for (const Specialization& s : specs) {
    kernels.insert(s.kernel);
    EXPECT_EQ(s.arch, "sm_90a");
  }
  for (const char* k :
       {"embedding", "rms_norm", "causal_conv1d_fwd", "ssd_chunk_cumsum", "ssd_bmm", "ssd_chunk_state",
        "ssd_chunk_scan", "causal_conv1d_update", "selective_state_update", "sample_argmax", "sample_draw"})
    EXPECT_EQ(kernels.count(k), 1u) << k;
  for (size_t i = 0; i < specs.size(); ++i)
    for (size_t j = 0; j < i; ++j) EXPECT_FALSE(specs[i] == specs[j]) << "listed twice: " << specs[i].kernel;
}

// The kernels of `m` (random from seed 1) as one rank of `tp` lists them.
std::vector<Specialization> specsOf(const testing::TinyMamba2& m, const Mamba2ModelOptions& o, int tp) {
  testing::ScratchDir dir;
  testing::writeTinyMamba2(dir.path(), m, testing::tinyMamba2Tensors(m, 1));
  return detail::mamba2ModelSpecializations(dir.path(), o, "sm_90a", tp);
}

TEST(Mamba2Kernels, ATensorParallelRankListsItsShardsKernels) {
  Mamba2ModelOptions o;
  o.max_batch = 4;
  o.max_prefill_tokens = 200;
  testing::TinyMamba2 full;  // H 4, G 2
  testing::TinyMamba2 half = full;
  half.heads = full.heads / 2;
  half.groups = full.groups / 2;
  const std::vector<Specialization> rank = specsOf(full, o, 2), shard = specsOf(half, o, 1);
  ASSERT_EQ(rank.size(), shard.size());
  for (size_t i = 0; i < rank.size(); ++i) EXPECT_TRUE(rank[i] == shard[i]) << "kernel " << rank[i].kernel;
  // The shard's kernels are not the whole model's: prewarming without --tp would miss them.
  const std::vector<Specialization> whole = specsOf(full, o, 1);
  size_t common = 0;
  for (const Specialization& s : rank)
    for (const Specialization& w : whole) common += s == w ? 1 : 0;
  EXPECT_LT(common, rank.size());
  EXPECT_MENTIONS(testing::invalidArgMessage([&] { specsOf(full, o, 3); }), "G 2", "t 3");
}

// A prefill can hold any number of tokens and sequences, and the kernels specialise on their
// divisibility: the list names the prefill's kernels for each class, so that no first prompt
// compiles (a 7-token prefill's SSD has div:L 1 where the largest one's has 16). The prefill's
// first tokens are sampled without slot keys, the decode steps' with them: both are listed.
TEST(Mamba2Kernels, PrefillKernelsCoverEveryLengthClass) {
  Mamba2ModelOptions o;
  o.max_batch = 4;
  o.max_prefill_tokens = 200;
  std::set<int64_t> classes, argmaxKeyed;
  for (const Specialization& s : specsOf(testing::TinyMamba2{}, o, 1)) {
    if (s.kernel == "ssd_chunk_scan") classes.insert(s.get("div:L"));
    if (s.kernel == "sample_argmax") argmaxKeyed.insert(s.get("has_idx"));
  }
  EXPECT_EQ(classes, (std::set<int64_t>{1, 2, 4, 8, 16}));
  EXPECT_EQ(argmaxKeyed, (std::set<int64_t>{0, 1}));
}

TEST(Mamba2Kernels, ABadConfigIsRefusedByName) {
  testing::ScratchDir dir;
  testing::writeFileBytes(dir.path() + "/config.json", "{\"model_type\": \"mamba2\", \"num_heads\": \"many\"}");
  const std::string msg =
      testing::invalidArgMessage([&] { detail::mamba2ModelSpecializations(dir.path(), {}, "sm_90a"); });
  EXPECT_NE(msg.find("num_heads"), std::string::npos) << msg;
}

}  // namespace
}  // namespace ssmjit

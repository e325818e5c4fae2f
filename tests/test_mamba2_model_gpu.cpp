// The Mamba-2 model against Hugging Face transformers on one random checkpoint: the folder that
// scripts/peers/mamba2_hf.py writes (config.json, model.safetensors, expected.json with
// transformers' last-token logits and greedy continuations), named by SSMJIT_MAMBA2_REF. The
// prompts run as one packed prefill here and one at a time there.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "GpuTest.h"
#include "ssmjit/mamba2_model.h"

namespace ssmjit {
namespace {

using Prompts = std::vector<std::vector<int32_t>>;

struct Reference {
  std::string dir;
  nlohmann::json expected;
};

// Skips unless SSMJIT_MAMBA2_REF names a folder with expected.json.
bool loadReference(Reference& r, std::string& why) {
  const char* dir = std::getenv("SSMJIT_MAMBA2_REF");
  if (!dir) {
    why = "SSMJIT_MAMBA2_REF is not set (make the folder with scripts/peers/mamba2_hf.py --out DIR on a machine "
          "with transformers, then set SSMJIT_MAMBA2_REF=DIR)";
    return false;
  }
  std::ifstream in(std::string(dir) + "/expected.json");
  if (!in) {
    why = std::string("SSMJIT_MAMBA2_REF=") + dir + " holds no expected.json";
    return false;
  }
  r.dir = dir;
  in >> r.expected;
  return true;
}

// Worst |ours - theirs| over a row against the row's largest |theirs|.
double relativeError(const std::vector<float>& ours, const std::vector<float>& theirs) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < theirs.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(ours[i]) - theirs[i]));
    scale = std::max(scale, std::abs(static_cast<double>(theirs[i])));
  }
  return worst / scale;
}

// Skips without a GPU or a reference; a test's model takes every prompt in one batch.
class Mamba2ModelGpu : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    SSMJIT_REQUIRE_GPU();
    std::string why;
    if (!loadReference(ref, why)) GTEST_SKIP() << why;
    prompts = ref.expected["prompts"].get<Prompts>();
  }
  std::unique_ptr<Mamba2Model> loadModel() const {
    Mamba2ModelOptions o;
    o.dtype = GetParam();
    o.max_batch = static_cast<int64_t>(prompts.size());
    o.max_prefill_tokens = 1024;
    return Mamba2Model::load(ref.dir, o);
  }
  Reference ref;
  Prompts prompts;
};

TEST_P(Mamba2ModelGpu, PackedPrefillLogitsMatchTransformers) {
  const bool bf16 = GetParam() == DType::BF16;
  // Both bf16 runs are held to transformers' fp32 logits: ours may differ from it by at most 1e-2
  // or 1.5x what transformers' own bf16 forward differs by (two bf16 runs differ by ~1e-2).
  const auto theirs = ref.expected["logits_fp32"].get<std::vector<std::vector<float>>>();
  const auto theirsBf16 = ref.expected["logits_bf16"].get<std::vector<std::vector<float>>>();
  auto model = loadModel();
  const int64_t V = model->config().vocab, n = static_cast<int64_t>(prompts.size());
  DeviceBuffer logits(static_cast<size_t>(n * V * 4));
  logits.fill(0xFF);
  std::vector<int32_t> slots(n);
  for (int64_t i = 0; i < n; ++i) slots[i] = static_cast<int32_t>(n - 1 - i);  // any distinct slots
  model->prefill(prompts, slots, TensorView::contiguous(logits.data(), DType::F32, {n, V}));
  checkDeviceErrors();
  const std::vector<float> ours = logits.download<float>();
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<float> row(ours.begin() + i * V, ours.begin() + (i + 1) * V);
    const double err = relativeError(row, theirs[i]);
    const double bound = bf16 ? std::max(1e-2, 1.5 * relativeError(theirsBf16[i], theirs[i])) : 1e-4;
    EXPECT_LE(err, bound) << "prompt " << i << " (" << prompts[i].size() << " tokens)";
    std::printf("prompt %lld (%zu tokens): last-token logits within %.2e of transformers' fp32 (bound %.2e)\n",
                static_cast<long long>(i), prompts[i].size(), err, bound);
  }
}

TEST_P(Mamba2ModelGpu, GreedyTokensMatchTransformers) {
  const DType dtype = GetParam();
  const auto theirs = ref.expected[dtype == DType::BF16 ? "greedy_bf16" : "greedy_fp32"].get<Prompts>();
  auto model = loadModel();
  GenerateOptions g;
  g.max_new_tokens = static_cast<int64_t>(theirs[0].size());
  const GenerateResult r = generate(*model, prompts, g);
  checkDeviceErrors();
  for (size_t i = 0; i < prompts.size(); ++i) {
    size_t same = 0;
    while (same < theirs[i].size() && same < r.tokens[i].size() && theirs[i][same] == r.tokens[i][same]) ++same;
    std::printf("prompt %zu: the first %zu of %zu greedy tokens equal transformers'\n", i, same, theirs[i].size());
    // bf16 greedy runs part at near-ties (transformers' own bf16 run parts from its fp32 one too).
    if (dtype == DType::F32) EXPECT_EQ(r.tokens[i], theirs[i]) << "prompt " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Mamba2ModelGpu, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtypeName(info.param)); });

}  // namespace
}  // namespace ssmjit

// The kernels a Mamba-2 model runs, listed without a GPU (what `ssmjit prewarm --model` compiles):
// every family the forward pass launches appears, decode at each batch bucket, and a bad
// checkpoint config is refused by name.
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
  for (const char* k : {"embedding", "rms_norm", "causal_conv1d_fwd", "ssd_chunk_cumsum", "ssd_bmm", "ssd_chunk_state",
                        "ssd_chunk_scan", "causal_conv1d_update", "selective_state_update",
                        "sample_argmax", "sample_draw"})
    EXPECT_EQ(kernels.count(k), 1u) << k;
  for (size_t i = 0; i < specs.size(); ++i)
    for (size_t j = 0; j < i; ++j) EXPECT_FALSE(specs[i] == specs[j]) << "listed twice: " << specs[i].kernel;
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

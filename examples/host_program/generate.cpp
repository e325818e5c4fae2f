// A host program that runs a Mamba-2 checkpoint through ssmjit: load, generate greedily from
// prompts given as token ids, print the new tokens.
//   mamba2_generate MODEL_DIR 1,2,3 [4,5 ...]
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "ssmjit/error.h"
#include "ssmjit/mamba2_model.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL_DIR IDS [IDS ...]  (IDS: comma-separated token ids)\n", argv[0]);
    return 2;
  }
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 2; i < argc; ++i) {
    std::vector<int32_t> ids;
    std::stringstream in(argv[i]);
    for (std::string tok; std::getline(in, tok, ',');) ids.push_back(std::stoi(tok));
    prompts.push_back(ids);
  }
  try {
    ssmjit::Mamba2ModelOptions options;  // bf16 weights and activations, fp32 states
    options.max_batch = static_cast<int64_t>(prompts.size());
    auto model = ssmjit::Mamba2Model::load(argv[1], options);
    ssmjit::GenerateOptions g;
    g.max_new_tokens = 16;
    const ssmjit::GenerateResult r = ssmjit::generate(*model, prompts, g);
    for (size_t i = 0; i < r.tokens.size(); ++i) {
      std::printf("prompt %zu:", i);
      for (int32_t t : r.tokens[i]) std::printf(" %d", t);
      std::printf("\n");
    }
    std::printf("%lld decode steps in %.2f ms\n", static_cast<long long>(r.decode_steps), r.decode_ms);
  } catch (const ssmjit::Error& e) {
    std::fprintf(stderr, "ssmjit: %s\n", e.what());
    return 1;
  }
  return 0;
}

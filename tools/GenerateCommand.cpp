// `ssmjit generate`: loads a Mamba-2 checkpoint directory and generates from token-id prompts on
// the GPU (ssmjit/mamba2_model.h), printing each prompt's new token ids and the throughput. With
// --draft, speculative decoding with prompt-lookup drafts (how many were kept, and with
// --compare-plain whether the tokens equal plain decoding's and the speed-up).
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/model/Mamba2Config.h"
#include "ssmjit/mamba2_model.h"
#include "tools/ParallelRanks.h"
#include "tools/ToolSupport.h"

namespace ssmjit::tool {
namespace {

struct GenerateCliOptions {
  std::string model;
  std::vector<std::string> prompts;
  int64_t batch = 1;
  std::string dtype = "bf16", stateDtype = "fp32";
  int64_t maxPrefillTokens = 16384;
  GenerateOptions gen;
  bool noGraphs = false;
  int64_t ngram = 3;
  bool comparePlain = false;
  int tp = 1;
  RankOptions ranks;
};

std::vector<int32_t> parseIds(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::logic_error&) {
      throw UsageError("--prompt-ids: '" + item + "' in '" + text + "' is not a token id (an integer >= 0)");
    }
  }
  if (ids.empty()) throw UsageError("--prompt-ids: '" + text + "' holds no token id");
  return ids;
}

std::string joinIds(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

void printDecode(const GenerateResult& r, const GenerateCliOptions& o, int64_t decoded, size_t batch) {
  if (r.decode_steps > 0)
    std::printf("decode: %lld steps at batch %zu in %.2f ms (%.3f ms a step, %.0f tokens/s)%s\n",
                static_cast<long long>(r.decode_steps), batch, r.decode_ms, r.decode_ms / r.decode_steps,
                decoded / (r.decode_ms / 1e3), o.noGraphs ? ", no CUDA graphs" : "");
}

int run(GenerateCliOptions& o) {
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& p : o.prompts) prompts.push_back(parseIds(p));
  // --batch repeats the prompts until there are that many sequences.
  for (size_t i = 0; static_cast<int64_t>(prompts.size()) < o.batch; ++i) prompts.push_back(prompts[i]);
  int64_t promptTokens = 0;
  for (const auto& p : prompts) promptTokens += static_cast<int64_t>(p.size());

  // Every rank must generate the same thing from the same model: what decides it is compared.
  const model::Mamba2Config cfg = model::loadMamba2Config(o.model);
  std::vector<std::pair<std::string, std::string>> same = {
      {"model", o.model}, {"groups", std::to_string(cfg.n_groups)}, {"heads", std::to_string(cfg.num_heads)},
      {"layers", std::to_string(cfg.num_layers)}, {"dtype", o.dtype}, {"state-dtype", o.stateDtype},
      {"batch", std::to_string(prompts.size())}, {"max-new-tokens", std::to_string(o.gen.max_new_tokens)},
      {"sampling", strf("%g/%d/%g/%llu/%lld", o.gen.temperature, o.gen.top_k, o.gen.top_p,
                        static_cast<unsigned long long>(o.gen.seed), static_cast<long long>(o.gen.eos_token))}};
  for (size_t i = 0; i < prompts.size(); ++i) same.emplace_back("prompt " + std::to_string(i), joinIds(prompts[i]));
  const std::unique_ptr<Communicator> comm = joinRanks("--tp", o.tp, o.ranks, same);
  const bool quiet = comm && comm->rank() != 0;  // rank 0 speaks for all: they make the same tokens
  if (quiet && std::freopen("/dev/null", "w", stdout) == nullptr) throw UsageError("cannot silence rank output");

  Mamba2ModelOptions mo;
  mo.tensor_parallel = comm.get();
  mo.dtype = parseFloatDType(o.dtype, "--dtype");
  mo.state_dtype = parseFloatDType(o.stateDtype, "--state-dtype");
  mo.max_batch = static_cast<int64_t>(prompts.size());
  mo.max_prefill_tokens = std::max(promptTokens, o.maxPrefillTokens);
  mo.max_draft_tokens = o.gen.draft_tokens;
  if (o.gen.draft_tokens > 0)
    o.gen.draft = [&o](int64_t, const std::vector<int32_t>& context) {
      return prompt_lookup_draft(context, o.gen.draft_tokens, o.ngram);
    };
  WallTimer loadTimer;
  std::unique_ptr<Mamba2Model> model = Mamba2Model::load(o.model, mo);
  const Mamba2ModelConfig& c = model->config();
  if (comm) std::printf("tensor parallel over %d GPUs (one process each)\n", comm->size());
  std::printf("model %s: %lld layers, hidden %lld, %lld heads x %lld, state %lld, groups %lld, vocab %lld (%.0f ms "
              "to load)\n",
              o.model.c_str(), static_cast<long long>(c.layers), static_cast<long long>(c.dims.hidden),
              static_cast<long long>(c.dims.heads), static_cast<long long>(c.dims.head_dim),
              static_cast<long long>(c.dims.state), static_cast<long long>(c.dims.groups),
              static_cast<long long>(c.vocab), loadTimer.ms());

  o.gen.cuda_graphs = !o.noGraphs;
  if (isatty(STDERR_FILENO))
    o.gen.progress = [&](int64_t step, int64_t tokens) {
      std::fprintf(stderr, "\rstep %lld/%lld, %lld tokens", static_cast<long long>(step),
                   static_cast<long long>(o.gen.max_new_tokens - 1), static_cast<long long>(tokens));
    };
  const GenerateResult r = generate(*model, prompts, o.gen);
  if (o.gen.progress) std::fprintf(stderr, "\n");
  int64_t newTokens = 0;
  for (size_t i = 0; i < r.tokens.size(); ++i) {
    std::printf("%zu: %s\n", i, joinIds(r.tokens[i]).c_str());
    newTokens += static_cast<int64_t>(r.tokens[i].size());
  }
  std::printf("prefill: %lld tokens in %.2f ms (%.0f tokens/s)\n", static_cast<long long>(promptTokens), r.prefill_ms,
              promptTokens / (r.prefill_ms / 1e3));
  printDecode(r, o, newTokens - static_cast<int64_t>(prompts.size()), prompts.size());
  if (o.gen.draft_tokens > 0) {
    std::printf("drafts: %lld of %lld kept (%.1f%%), %.2f tokens a step per sequence\n",
                static_cast<long long>(r.accepted), static_cast<long long>(r.drafted),
                r.drafted > 0 ? 100.0 * r.accepted / r.drafted : 0.0,
                r.decode_steps > 0 ? double(newTokens - static_cast<int64_t>(prompts.size())) /
                                         (double(r.decode_steps) * prompts.size())
                                   : 0.0);
    if (o.comparePlain) {
      GenerateOptions plainOpt = o.gen;
      plainOpt.draft_tokens = 0;
      plainOpt.draft = nullptr;
      plainOpt.progress = nullptr;
      const GenerateResult p = generate(*model, prompts, plainOpt);
      std::printf("plain ");
      printDecode(p, o, newTokens - static_cast<int64_t>(prompts.size()), prompts.size());
      std::printf("plain decoding's tokens: %s; speculative decode %.2fx plain's speed\n",
                  p.tokens == r.tokens ? "identical" : "DIFFERENT", p.decode_ms / r.decode_ms);
      if (p.tokens != r.tokens) return kExitFailure;
    }
  }
  return kExitOk;
}

}  // namespace

CommandRun defineGenerateCommand(CLI::App* app) {
  auto o = std::make_shared<GenerateCliOptions>();
  addModelOptions(app, o->model, o->dtype, o->stateDtype);
  app->add_option("--prompt-ids", o->prompts, "A prompt as comma-separated token ids; repeat for more prompts")
      ->required();
  app->add_option("--batch", o->batch, "Sequences at once: the prompts repeated up to this many")->check(atLeast(1));
  app->add_option("--max-new-tokens", o->gen.max_new_tokens, "Tokens to generate per sequence")
      ->check(atLeast(1))
      ->capture_default_str();
  app->add_option("--temperature", o->gen.temperature, "Sampling temperature; 0: greedy")->capture_default_str();
  app->add_option("--top-k", o->gen.top_k, "Sample among the k likeliest tokens; 0: all")->capture_default_str();
  app->add_option("--top-p", o->gen.top_p, "Sample within the smallest set of likeliest tokens of this mass")
      ->capture_default_str();
  app->add_option("--seed", o->gen.seed, "Sampling seed")->capture_default_str();
  app->add_option("--eos", o->gen.eos_token, "A sequence stops after this token id; -1: none")->capture_default_str();
  app->add_option("--max-prefill-tokens", o->maxPrefillTokens, "Largest packed prefill the buffers hold")
      ->check(atLeast(1))
      ->capture_default_str();
  app->add_option("--draft", o->gen.draft_tokens,
                  "Speculative decoding: verify up to this many prompt-lookup drafts a step (0: plain decoding)")
      ->check(CLI::Range(int64_t{0}, int64_t{kMaxTokens - 1}))
      ->capture_default_str();
  app->add_option("--draft-ngram", o->ngram, "Prompt lookup: match the last this many tokens (then fewer)")
      ->check(atLeast(1))
      ->capture_default_str();
  app->add_flag("--compare-plain", o->comparePlain,
                "With --draft: also decode plainly; print whether the tokens agree and the speed-up (exit 1 if not)");
  app->add_flag("--no-graphs", o->noGraphs, "Launch each decode step's kernels one by one instead of as a CUDA graph");
  app->add_option("--tp", o->tp,
                  "Tensor parallel over this many GPUs, one process each (each loads its shard of every layer; "
                  "run under `ssmjit launch -n N --`, or give every process --rank and --rendezvous)")
      ->check(atLeast(1))
      ->capture_default_str();
  addRankOptions(app, o->ranks);
  return [o] { return run(*o); };
}

}  // namespace ssmjit::tool

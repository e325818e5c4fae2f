// Speculative decoding without a GPU: which tokens a verify keeps (accepted_tokens), the prompt-
// lookup drafter, the whole protocol on the float64 reference (verify = plain steps, commit the
// kept tokens) equal to plain greedy decoding whatever the drafts, the verify's kernels listed for
// prewarm (so the layer's views pass mamba2_decode_step's checks), and refused arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "GpuTest.h"  // SSMJIT_REQUIRE_NVRTC
#include "runtime/model/Mamba2Kernels.h"
#include "runtime/model/Mamba2Weights.h"
#include "runtime/reference/Mamba2ModelRef.h"
#include "ssmjit/mamba2.h"
#include "ssmjit/mamba2_model.h"
#include "support/CompileEach.h"
#include "support/ExpectError.h"
#include "support/FakeTensors.h"
#include "support/ScratchDir.h"
#include "support/TinyMamba2.h"
#include "support/TinyMamba2Kernels.h"

namespace ssmjit {
namespace {

using reference::Mamba2SequenceState;
using States = std::vector<std::vector<Mamba2SequenceState>>;
using Ids = std::vector<int32_t>;

TEST(AcceptedTokens, KeepsTheLongestAgreeingPrefixThenTheModelsToken) {
  EXPECT_EQ(accepted_tokens({5, 6, 7}, {5, 6, 7, 8}), (Ids{5, 6, 7, 8}));  // all kept, and the next
  EXPECT_EQ(accepted_tokens({5, 6, 7}, {4, 6, 7, 8}), (Ids{4}));           // the first differs
  EXPECT_EQ(accepted_tokens({5, 6, 7}, {5, 9, 7, 8}), (Ids{5, 9}));        // a later agreement is not kept
  EXPECT_EQ(accepted_tokens({5}, {5, 1, 2, 3}), (Ids{5, 1}));              // fewer drafts than positions
  EXPECT_EQ(accepted_tokens({}, {3}), (Ids{3}));                           // no drafts: plain decoding
}

TEST(AcceptedTokens, RefusesMoreDraftsThanPositions) {
  EXPECT_MENTIONS(testing::invalidArgMessage([] { accepted_tokens({1, 2}, {1, 2}); }), "accepted_tokens", "2 drafts",
                  "2 choices");
  EXPECT_MENTIONS(testing::invalidArgMessage([] { accepted_tokens({}, {}); }), "0 choices");
}

TEST(PromptLookupDraft, ContinuesTheLatestEarlierOccurrenceOfTheSuffix) {
  // "1 2 3" recurs at the end; its latest earlier occurrence (index 5) was followed by 9 4.
  const Ids ctx = {1, 2, 3, 7, 0, 1, 2, 3, 9, 4, 1, 2, 3};
  EXPECT_EQ(prompt_lookup_draft(ctx, 2, 3), (Ids{9, 4}));
  EXPECT_EQ(prompt_lookup_draft(ctx, 8, 3), (Ids{9, 4, 1, 2, 3}));  // up to the context's end
  EXPECT_EQ(prompt_lookup_draft(ctx, 0, 3), Ids{});
  // No earlier "8 3": falls back to "3" alone.
  EXPECT_EQ(prompt_lookup_draft({3, 5, 6, 8, 3}, 2, 2), (Ids{5, 6}));
  EXPECT_EQ(prompt_lookup_draft({1, 2, 3}, 4, 3), Ids{});  // nothing recurs
  EXPECT_EQ(prompt_lookup_draft({}, 4, 3), Ids{});
  EXPECT_MENTIONS(testing::invalidArgMessage([] { prompt_lookup_draft({1}, 2, 0); }), "ngram", "0");
}

int32_t argmax(const std::vector<double>& logits, int64_t row, int64_t V) {
  const auto* r = &logits[static_cast<size_t>(row * V)];
  return static_cast<int32_t>(std::max_element(r, r + V) - r);  // the first of equal maxima
}

// States of the sequences in `which`, a sub-batch of `all`.
States pick(const States& all, const std::vector<size_t>& which) {
  States s(all.size());
  for (size_t l = 0; l < all.size(); ++l)
    for (size_t i : which) s[l].push_back(all[l][i]);
  return s;
}

struct Run {
  std::vector<Ids> tokens;
  std::vector<States> statesAfter;  // per step, every sequence's states (committed)
};

// Plain greedy decoding on the reference: max_new tokens for each prompt.
std::vector<Ids> plainGreedy(const model::Mamba2Checkpoint& ck, const std::vector<Ids>& prompts, int64_t maxNew,
                             States& states) {
  const int64_t V = ck.config.vocab_rows;
  std::vector<int64_t> tok, cu{0};
  for (const Ids& p : prompts) {
    tok.insert(tok.end(), p.begin(), p.end());
    cu.push_back(static_cast<int64_t>(tok.size()));
  }
  const std::vector<double> pre = reference::mamba2_model(ck.config, ck.weights, tok, cu, states);
  std::vector<Ids> out(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) out[i].push_back(argmax(pre, cu[i + 1] - 1, V));
  for (int64_t step = 1; step < maxNew; ++step) {
    std::vector<int64_t> ids, dcu{0};
    for (const Ids& o : out) ids.push_back(o.back()), dcu.push_back(static_cast<int64_t>(ids.size()));
    const std::vector<double> lg = reference::mamba2_model(ck.config, ck.weights, ids, dcu, states);
    for (size_t i = 0; i < out.size(); ++i) out[i].push_back(argmax(lg, static_cast<int64_t>(i), V));
  }
  return out;
}

// Speculative greedy decoding on the reference: each step verifies [last, drafts...] (L = K + 1
// positions) as plain steps, keeps accepted_tokens, and commits exactly the kept count.
std::vector<Ids> speculativeGreedy(const model::Mamba2Checkpoint& ck, const std::vector<Ids>& prompts, int64_t maxNew,
                                   int64_t K, const std::function<Ids(size_t, const Ids&)>& draft, States& states,
                                   int64_t& steps) {
  const int64_t V = ck.config.vocab_rows, L = K + 1;
  std::vector<Ids> out = plainGreedy(ck, prompts, 1, states);  // the prefill and its token
  steps = 0;
  for (;;) {
    std::vector<size_t> live;
    for (size_t i = 0; i < out.size(); ++i)
      if (static_cast<int64_t>(out[i].size()) < maxNew) live.push_back(i);
    if (live.empty()) return out;
    ++steps;
    std::vector<int64_t> ids;
    std::vector<Ids> drafts;
    for (size_t i : live) {
      Ids ctx = prompts[i];
      ctx.insert(ctx.end(), out[i].begin(), out[i].end());
      Ids d = draft(i, ctx);
      d.resize(std::min<size_t>(d.size(), static_cast<size_t>(K)));
      drafts.push_back(d);
      ids.push_back(out[i].back());
      for (int64_t j = 0; j < K; ++j) ids.push_back(j < static_cast<int64_t>(d.size()) ? d[j] : 0);
    }
    States sub = pick(states, live);
    const std::vector<double> lg = reference::mamba2_model_verify(ck.config, ck.weights, ids, L, sub);
    for (size_t b = 0; b < live.size(); ++b) {
      Ids choices;
      for (int64_t j = 0; j < L; ++j) choices.push_back(argmax(lg, static_cast<int64_t>(b) * L + j, V));
      Ids keep = accepted_tokens(drafts[b], choices);
      keep.resize(std::min<size_t>(keep.size(), static_cast<size_t>(maxNew) - out[live[b]].size()));
      // Commit as many tokens as are emitted: the last one, then the kept drafts but the newest.
      std::vector<int64_t> fed(ids.begin() + static_cast<int64_t>(b) * L,
                               ids.begin() + static_cast<int64_t>(b) * L + static_cast<int64_t>(keep.size()));
      States one = pick(states, {live[b]});
      reference::mamba2_model(ck.config, ck.weights, fed, {0, static_cast<int64_t>(fed.size())}, one);
      for (size_t l = 0; l < states.size(); ++l) states[l][live[b]] = one[l][0];
      out[live[b]].insert(out[live[b]].end(), keep.begin(), keep.end());
    }
  }
}

double stateDiff(const States& a, const States& b) {
  double m = 0;
  for (size_t l = 0; l < a.size(); ++l)
    for (size_t i = 0; i < a[l].size(); ++i) {
      for (size_t k = 0; k < a[l][i].conv.size(); ++k) m = std::max(m, std::abs(a[l][i].conv[k] - b[l][i].conv[k]));
      for (size_t k = 0; k < a[l][i].ssm.size(); ++k) m = std::max(m, std::abs(a[l][i].ssm[k] - b[l][i].ssm[k]));
    }
  return m;
}

TEST(SpeculativeReference, EqualsPlainGreedyWhateverTheDrafts) {
  testing::ScratchDir dir;
  testing::TinyMamba2 m;
  m.vocab = 13;
  testing::writeTinyMamba2(dir.path(), m, testing::tinyMamba2Tensors(m, 5));
  const model::Mamba2Checkpoint ck(dir.path());
  const std::vector<Ids> prompts = {{1, 4, 1, 5}, {9}, {2, 6, 5, 3, 5, 8}};
  const int64_t maxNew = 17, K = 4;
  States plainStates;
  const std::vector<Ids> plain = plainGreedy(ck, prompts, maxNew, plainStates);

  std::mt19937 rng(3);
  const std::vector<std::pair<const char*, std::function<Ids(size_t, const Ids&)>>> drafters = {
      {"greedy continuation",
       [&](size_t i, const Ids& ctx) {  // what plain decoding makes next: every draft kept
         const size_t made = ctx.size() - prompts[i].size();
         return Ids(plain[i].begin() + static_cast<int64_t>(made),
                    plain[i].begin() + static_cast<int64_t>(std::min(plain[i].size(), made + K)));
       }},
      {"random", [&](size_t, const Ids&) { return Ids{int32_t(rng() % 13), int32_t(rng() % 13), int32_t(rng() % 13),
                                                      int32_t(rng() % 13)}; }},
      {"mixed",
       [&](size_t i, const Ids& ctx) {  // sequence 0 right, 1 none, 2 right then wrong
         const size_t made = ctx.size() - prompts[i].size();
         if (i == 1) return Ids{};
         Ids d(plain[i].begin() + static_cast<int64_t>(made),
               plain[i].begin() + static_cast<int64_t>(std::min(plain[i].size(), made + K)));
         if (i == 2 && d.size() > 2) d[2] = (d[2] + 1) % 13;
         return d;
       }},
      {"prompt lookup", [&](size_t, const Ids& ctx) { return prompt_lookup_draft(ctx, K); }},
  };
  for (const auto& [name, draft] : drafters) {
    States states;
    int64_t steps = 0;
    const std::vector<Ids> spec = speculativeGreedy(ck, prompts, maxNew, K, draft, states, steps);
    EXPECT_EQ(spec, plain) << name;
    // Every sequence has committed all its tokens but the newest, as plain decoding has.
    EXPECT_LE(stateDiff(states, plainStates), 0.0) << name;
    if (std::string(name) == "greedy continuation") EXPECT_EQ(steps, (maxNew - 1 + K) / (K + 1)) << name;
    if (std::string(name) == "random") EXPECT_GE(steps, (maxNew - 1) / 2) << name;
  }
}

TEST(SpeculativeReference, VerifyRefusesAMismatchedTokenCount) {
  testing::ScratchDir dir;
  testing::TinyMamba2 m;
  testing::writeTinyMamba2(dir.path(), m, testing::tinyMamba2Tensors(m, 5));
  const model::Mamba2Checkpoint ck(dir.path());
  const States states(static_cast<size_t>(m.layers), std::vector<Mamba2SequenceState>(2));
  EXPECT_MENTIONS(testing::invalidArgMessage(
                      [&] { reference::mamba2_model_verify(ck.config, ck.weights, {1, 2, 3}, 2, states); }),
                  "mamba2_model_verify", "3 values", "L = 2");
}

TEST(SpeculativeKernels, PrewarmListsTheVerifyStep) {
  Mamba2ModelOptions o;
  o.max_batch = 5;
  o.max_prefill_tokens = 64;
  const std::vector<Specialization> plain = testing::tinyMamba2Specializations(o);
  o.max_draft_tokens = 3;
  const std::vector<Specialization> spec = testing::tinyMamba2Specializations(o);
  std::set<std::string> kernels;
  for (const Specialization& s : spec) kernels.insert(s.kernel);
  EXPECT_EQ(kernels.count("mamba2_decode_step"), 1u);
  for (const Specialization& s : plain) EXPECT_NE(s.kernel, "mamba2_decode_step");
  // Everything plain decoding runs is still listed.
  for (const Specialization& s : plain)
    EXPECT_NE(std::find(spec.begin(), spec.end(), s), spec.end()) << s.kernel;
}

TEST(SpeculativeOptions, RefusesTooManyDrafts) {
  Mamba2ModelOptions o;
  o.max_draft_tokens = kMaxTokens;
  EXPECT_MENTIONS(testing::invalidArgMessage([&] { testing::tinyMamba2Specializations(o); }), "max_draft_tokens",
                  std::to_string(kMaxTokens), "kMaxTokens - 1");
}

// A verify call of the layer on fake device tensors: 3 sequences of L = 2 tokens.
struct LayerCall {
  Mamba2Dims d;
  Mamba2LayerWeights w;
  Mamba2LayerState s;
  Mamba2LayerArgs a;
  LayerCall() {
    d.hidden = 16, d.heads = 4, d.head_dim = 8, d.state = 8, d.groups = 2, d.conv_width = 4;
    int k = 0;
    auto t = [&](DType dt, std::initializer_list<int64_t> shape) { return testing::fakeView(k++, dt, shape); };
    w.in_proj = t(DType::F32, {d.inProjRows(), d.hidden});
    w.conv_weight = t(DType::F32, {d.convDim(), d.conv_width});
    w.A = t(DType::F32, {d.heads});
    w.D = t(DType::F32, {d.heads});
    w.dt_bias = t(DType::F32, {d.heads});
    w.norm_weight = t(DType::F32, {d.dInner()});
    w.out_proj = t(DType::F32, {d.hidden, d.dInner()});
    s.conv_state = t(DType::F32, {4, d.convDim(), d.conv_width - 1});
    s.ssm_state = t(DType::F32, {4, d.heads, d.head_dim, d.state});
    s.xbc_cache = t(DType::F32, {4, 3, d.convDim()});
    s.dt_cache = t(DType::F32, {4, 3, d.heads});
    s.cached_tokens = t(DType::I32, {4});
    s.arrivals = t(DType::I32, {4});
    a.hidden = t(DType::F32, {6, d.hidden});
    a.out = t(DType::F32, {6, d.hidden});
    a.state_indices = t(DType::I32, {3});
    a.num_accepted = t(DType::I32, {3});
    a.tokens_per_sequence = 2;
  }
  int64_t size() const { return mamba2_layer_workspace_size(d, w, s, a, Mamba2LayerMode::Verify); }
  std::vector<Specialization> kernels() const {
    return detail::mamba2LayerSpecializations(d, w, s, a, Mamba2LayerMode::Verify, "sm_90a");
  }
};

TEST(SpeculativeLayer, VerifyKernelsCompile) {
  SSMJIT_REQUIRE_NVRTC();
  testing::expectEachCompiles(LayerCall().kernels(), 2);
}

TEST(SpeculativeLayer, VerifyChecksItsArguments) {
  LayerCall ok;
  EXPECT_GT(ok.size(), 0);
  EXPECT_EQ(ok.kernels().size(), 2u);  // mamba2_decode_step and the gated norm

  LayerCall c = ok;
  c.a.tokens_per_sequence = 4;  // 6 rows are not sequences of 4
  EXPECT_MENTIONS(testing::invalidArgMessage([&] { c.size(); }), "mamba2_layer_verify", "tokens_per_sequence is 4",
                  "6 rows");
  c = ok;
  c.a.tokens_per_sequence = 0;
  EXPECT_MENTIONS(testing::invalidArgMessage([&] { c.size(); }), "tokens_per_sequence is 0");
  c = ok;
  c.a.num_accepted = {};
  EXPECT_MENTIONS(testing::invalidArgMessage([&] { c.size(); }), "mamba2_layer_verify", "num_accepted");
  c = ok;
  c.a.num_accepted = testing::fakeView(40, DType::I32, {6});
  EXPECT_MENTIONS(testing::invalidArgMessage([&] { c.size(); }), "num_accepted", "3");
  // The caches' depth bounds L: the decode step refuses 4 tokens in a cache of 3.
  c = ok;
  c.a.hidden = testing::fakeView(41, DType::F32, {12, c.d.hidden});
  c.a.out = testing::fakeView(42, DType::F32, {12, c.d.hidden});
  c.a.tokens_per_sequence = 4;
  EXPECT_MENTIONS(testing::invalidArgMessage([&] { c.kernels(); }), "xBC", "cache depth 3");
  c = ok;
  c.s.xbc_cache = {};
  EXPECT_MENTIONS(testing::invalidArgMessage([&] { c.kernels(); }), "xbc_cache");
}

}  // namespace
}  // namespace ssmjit

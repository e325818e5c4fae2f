// Speculative decoding of the Mamba-2 model on the GPU (Mamba2Model::verify / commit, generate()
// with drafts) on tiny random checkpoints the test writes itself, with drafts that are (a) plain
// greedy decoding's own continuation (all kept), (b) random (mostly rejected), (c) mixed per row,
// with a pad row, and prompt lookup:
//   - generate() with drafts makes plain generate()'s tokens (fp32: identical; bf16: identical
//     whatever the drafts, and each token the float64 reference's arg max within the bf16 logit
//     bound), greedy and sampled;
//   - after verify + commit, every slot's conv and SSM states equal plain decoding's of the same
//     tokens (fp32 within 1e-5 of the state's largest value; bf16 within 3e-2), with both the
//     explicit commit and the replay fused into the next verify.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "GpuTest.h"
#include "runtime/model/Mamba2Weights.h"
#include "runtime/reference/ElementAccess.h"
#include "runtime/reference/Mamba2ModelRef.h"
#include "ssmjit/mamba2_model.h"
#include "support/ScratchDir.h"
#include "support/TinyMamba2Cases.h"

namespace ssmjit {
namespace {

using Ids = std::vector<int32_t>;
using Drafter = std::function<Ids(int64_t, const Ids&)>;

using SpecCase = testing::TinyMamba2Case;

std::vector<SpecCase> cases() { return testing::tinyMamba2Cases({DType::BF16}); }

std::vector<Ids> prompts() {
  std::vector<Ids> p = {{3}, {1, 4, 1, 5, 9, 2, 6}, {}};
  for (int t = 0; t < 20; ++t) p[2].push_back((t * 7 + 3) % 50);
  return p;
}

// Drafts from a known continuation `next` of each prompt: up to k of its tokens after those made.
Ids continuation(const std::vector<Ids>& ps, const std::vector<Ids>& next, int64_t i, const Ids& ctx, int64_t k) {
  const size_t made = ctx.size() - ps[size_t(i)].size();
  const Ids& n = next[size_t(i)];
  if (made >= n.size()) return {};
  return Ids(n.begin() + int64_t(made), n.begin() + int64_t(std::min(n.size(), made + size_t(k))));
}

struct Kind {
  const char* name;
  Drafter draft;
};

// The draft kinds, over plain decoding's tokens `plain`; K drafts a step.
std::vector<Kind> kinds(const std::vector<Ids>& ps, const std::vector<Ids>& plain, int64_t K, std::mt19937& rng) {
  return {
      {"greedy", [&, K](int64_t i, const Ids& ctx) { return continuation(ps, plain, i, ctx, K); }},
      {"random",
       [&rng, K](int64_t, const Ids&) {
         Ids d;
         for (int64_t j = 0; j < K; ++j) d.push_back(int32_t(rng() % 50));
         return d;
       }},
      {"mixed",  // sequence 0 right, 1 no drafts, 2 right but its second draft wrong
       [&, K](int64_t i, const Ids& ctx) {
         if (i == 1) return Ids{};
         Ids d = continuation(ps, plain, i, ctx, K);
         if (i == 2 && d.size() > 1) d[1] = (d[1] + 1) % 50;
         return d;
       }},
      {"lookup", [K](int64_t, const Ids& ctx) { return prompt_lookup_draft(ctx, K); }},
  };
}

// Each generated token against the float64 reference run on the prompt and the tokens before it:
// its reference logit within `bound` (relative to the row's largest |logit|) of the row's maximum.
void expectReferenceChoices(const model::Mamba2Checkpoint& ck, const std::vector<Ids>& ps, const std::vector<Ids>& out,
                            double bound, const std::string& what) {
  const int64_t V = ck.config.vocab_rows;
  std::vector<int64_t> tok, cu{0};
  for (size_t i = 0; i < ps.size(); ++i) {
    tok.insert(tok.end(), ps[i].begin(), ps[i].end());
    tok.insert(tok.end(), out[i].begin(), out[i].end() - 1);
    cu.push_back(int64_t(tok.size()));
  }
  std::vector<std::vector<reference::Mamba2SequenceState>> states;
  const std::vector<double> ref = reference::mamba2_model(ck.config, ck.weights, tok, cu, states);
  double worst = 0;
  for (size_t i = 0; i < ps.size(); ++i)
    for (size_t j = 0; j < out[i].size(); ++j) {
      const double* row = &ref[size_t((cu[i] + int64_t(ps[i].size()) - 1 + int64_t(j)) * V)];
      double mx = -1e300, scale = 0;
      for (int64_t v = 0; v < V; ++v) mx = std::max(mx, row[v]), scale = std::max(scale, std::abs(row[v]));
      worst = std::max(worst, (mx - row[out[i][j]]) / scale);
    }
  std::printf("[ measured ] %s: worst gap of a chosen token's reference logit below the maximum %.3g (bound %.3g)\n",
              what.c_str(), worst, bound);
  EXPECT_LE(worst, bound) << what;
}

class SpeculativeGpu : public ::testing::TestWithParam<SpecCase> {};

TEST_P(SpeculativeGpu, GenerateEqualsPlainGreedy) {
  SSMJIT_REQUIRE_GPU();
  const SpecCase& tc = GetParam();
  testing::ScratchDir dir;
  // 3 prompts: bucket 4, one pad row.
  auto model = testing::loadTinyMamba2Case(dir.path(), tc, 4, 64, 4);
  const model::Mamba2Checkpoint ckpt(dir.path());
  const std::vector<Ids> ps = prompts();
  const bool fp32 = tc.dtype == DType::F32;
  // Logits within e (test_mamba2_gpu's bound) of the reference: a chosen token's reference logit
  // is at most 2e below the reference's maximum.
  const double bound = 2 * (fp32 ? 2e-4 : 3e-2);
  const int64_t K = 4;

  GenerateOptions g;
  g.max_new_tokens = 24;
  const GenerateResult plain = generate(*model, ps, g);
  checkDeviceErrors();
  expectReferenceChoices(ckpt, ps, plain.tokens, bound, std::string(tc.name) + " plain");

  std::mt19937 rng(11);
  std::vector<Ids> first;
  for (const Kind& k : kinds(ps, plain.tokens, K, rng)) {
    GenerateOptions s = g;
    s.draft_tokens = K;
    s.draft = k.draft;
    const GenerateResult r = generate(*model, ps, s);
    checkDeviceErrors();
    std::printf("%s %s: %lld steps, %lld of %lld drafts kept\n", tc.name, k.name, (long long)r.decode_steps,
                (long long)r.accepted, (long long)r.drafted);
    for (const Ids& t : r.tokens) EXPECT_EQ(int64_t(t.size()), g.max_new_tokens) << k.name;
    // The verify path's tokens do not depend on the drafts (each row's arithmetic is the same).
    if (first.empty())
      first = r.tokens;
    else
      EXPECT_EQ(r.tokens, first) << k.name;
    if (fp32) EXPECT_EQ(r.tokens, plain.tokens) << k.name;
    expectReferenceChoices(ckpt, ps, r.tokens, bound, std::string(tc.name) + " " + k.name);
    if (std::string(k.name) == "greedy" && fp32) {
      EXPECT_EQ(r.accepted, r.drafted);
      EXPECT_EQ(r.decode_steps, (g.max_new_tokens - 1 + K) / (K + 1));
    }
    if (std::string(k.name) == "random") EXPECT_LT(r.accepted * 4, r.drafted);
  }
}

// Sampled tokens: each draw keyed and counted as plain decoding's, so the same tokens (fp32 cases:
// in bf16 the two paths' logits may differ in a last bit, which may move a draw).
TEST(SpeculativeGpuSampling, GenerateEqualsPlainSampling) {
  SSMJIT_REQUIRE_GPU();
  for (const SpecCase& tc : cases()) {
    if (tc.dtype != DType::F32) continue;
    SCOPED_TRACE(tc.name);
    testing::ScratchDir dir;
    auto model = testing::loadTinyMamba2Case(dir.path(), tc, 4, 64, 3);
    const std::vector<Ids> ps = prompts();
    GenerateOptions g;
    g.max_new_tokens = 20;
    g.temperature = 0.7f;
    g.top_p = 0.9f;
    g.seed = 5;
    const GenerateResult plain = generate(*model, ps, g);
    std::mt19937 rng(12);
    for (const Kind& k : kinds(ps, plain.tokens, 3, rng)) {
      GenerateOptions s = g;
      s.draft_tokens = 3;
      s.draft = k.draft;
      const GenerateResult r = generate(*model, ps, s);
      checkDeviceErrors();
      EXPECT_EQ(r.tokens, plain.tokens) << k.name;
      if (std::string(k.name) == "greedy") EXPECT_EQ(r.accepted, r.drafted);
    }
  }
}

// A device tensor's values (any float dtype), slot `slot` of dim 0.
std::vector<double> slotValues(const TensorView& t, int64_t slot) {
  const int64_t per = t.numel() / t.shape[0];
  std::vector<uint8_t> bytes(size_t(per * dtypeBytes(t.dtype)));
  const auto src = reinterpret_cast<CUdeviceptr>(t.data) + CUdeviceptr(slot * per * dtypeBytes(t.dtype));
  driver::check(driver::api().cuMemcpyDtoH(bytes.data(), src, bytes.size()), "test: cuMemcpyDtoH");
  const TensorView h = TensorView::contiguous(bytes.data(), t.dtype, {per}, DeviceKind::CPU);
  std::vector<double> v(static_cast<size_t>(per));
  for (int64_t i = 0; i < per; ++i) v[size_t(i)] = reference::loadElement(h, i);
  return v;
}

// max |a - b| / max |b|.
double relDiff(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0, s = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i])), s = std::max(s, std::abs(b[i]));
  return s > 0 ? d / s : d;
}

std::vector<int32_t> argmaxRows(const std::vector<float>& logits, int64_t rows, int64_t V) {
  std::vector<int32_t> out;
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = &logits[size_t(r * V)];
    out.push_back(int32_t(std::max_element(p, p + V) - p));
  }
  return out;
}

TEST_P(SpeculativeGpu, VerifyStatesEqualPlainDecoding) {
  SSMJIT_REQUIRE_GPU();
  const SpecCase& tc = GetParam();
  testing::ScratchDir dir;
  auto model = testing::loadTinyMamba2Case(dir.path(), tc, 8, 96, 3);
  const int64_t V = model->config().vocab, K = 3, L = K + 1, layers = model->config().layers;
  const bool fp32 = tc.dtype == DType::F32;
  const double bound = fp32 ? 1e-5 : 3e-2;
  const std::vector<Ids> ps = prompts();
  const int64_t n = int64_t(ps.size());
  GenerateOptions g;
  g.max_new_tokens = 40;
  const std::vector<Ids> plainTokens = generate(*model, ps, g).tokens;  // the greedy drafts' source

  std::mt19937 rng(13);
  for (const Kind& k : kinds(ps, plainTokens, K, rng)) {
    SCOPED_TRACE(k.name);
    // Sequence i runs speculatively in slot i and plainly in slot 4 + i (one prefill of both).
    std::vector<Ids> both = ps;
    both.insert(both.end(), ps.begin(), ps.end());
    DeviceBuffer prefillLogits(size_t(2 * n * V * 4));
    model->prefill(both, {0, 1, 2, 4, 5, 6}, TensorView::contiguous(prefillLogits.data(), DType::F32, {2 * n, V}));
    checkDeviceErrors();
    const std::vector<int32_t> firstTok = argmaxRows(prefillLogits.download<float>(), n, V);
    std::vector<Ids> made(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) made[size_t(i)] = {firstTok[size_t(i)]};
    std::vector<int64_t> plainFed(size_t(n), 0);

    // Verify rows: sequence 0, a pad row, sequences 1 and 2.
    const std::vector<int32_t> rowSeq = {0, -1, 1, 2};
    const int64_t B = int64_t(rowSeq.size());
    DeviceBuffer slots = DeviceBuffer::fromHost(std::vector<int32_t>{0, -1, 1, 2});
    DeviceBuffer tokens(size_t(B * L * 4)), accepted(size_t(B * 4)), logits(size_t(B * L * V * 4));
    std::vector<int32_t> acc(size_t(B), 0);
    const TensorView slotsV = TensorView::contiguous(slots.data(), DType::I32, {B});
    const TensorView accV = TensorView::contiguous(accepted.data(), DType::I32, {B});
    DeviceBuffer plainSlots(size_t(n * 4)), plainIds(size_t(n * 4)), plainLogits(size_t(n * V * 4));
    double worstConv = 0, worstSsm = 0;
    int64_t plainMismatches = 0;
    for (int step = 0; step < 8; ++step) {
      std::vector<int32_t> tok(size_t(B * L), 0);
      std::vector<Ids> drafts(static_cast<size_t>(B));
      for (int64_t r = 0; r < B; ++r) {
        const int32_t i = rowSeq[size_t(r)];
        if (i < 0) continue;
        Ids ctx = ps[size_t(i)];
        ctx.insert(ctx.end(), made[size_t(i)].begin(), made[size_t(i)].end());
        drafts[size_t(r)] = k.draft(i, ctx);
        drafts[size_t(r)].resize(std::min<size_t>(drafts[size_t(r)].size(), size_t(K)));
        tok[size_t(r * L)] = made[size_t(i)].back();
        std::copy(drafts[size_t(r)].begin(), drafts[size_t(r)].end(), tok.begin() + r * L + 1);
      }
      tokens.upload(tok);
      accepted.upload(acc);
      logits.fill(0xFF);
      model->verify(TensorView::contiguous(tokens.data(), DType::I32, {B, L}), slotsV, accV,
                    TensorView::contiguous(logits.data(), DType::F32, {B * L, V}));
      checkDeviceErrors();
      const std::vector<int32_t> choices = argmaxRows(logits.download<float>(), B * L, V);
      for (int64_t r = 0; r < B; ++r) {
        const int32_t i = rowSeq[size_t(r)];
        if (i < 0) continue;
        const Ids keep = accepted_tokens(drafts[size_t(r)], Ids(choices.begin() + r * L, choices.begin() + (r + 1) * L));
        made[size_t(i)].insert(made[size_t(i)].end(), keep.begin(), keep.end());
        acc[size_t(r)] = int32_t(keep.size());
      }
      // Odd steps commit explicitly and compare; even steps leave the replay to the next verify.
      if (step % 2 == 0) continue;
      accepted.upload(acc);
      model->commit(slotsV, accV);
      std::fill(acc.begin(), acc.end(), 0);
      // Plain decoding catches up: slot 4 + i takes every token of sequence i but the newest.
      for (;;) {
        std::vector<int32_t> ids(size_t(n), 0), sl(size_t(n), -1);
        bool any = false;
        for (int64_t i = 0; i < n; ++i)
          if (plainFed[size_t(i)] + 1 < int64_t(made[size_t(i)].size())) {
            ids[size_t(i)] = made[size_t(i)][size_t(plainFed[size_t(i)])];
            sl[size_t(i)] = int32_t(4 + i);
            any = true;
          }
        if (!any) break;
        plainIds.upload(ids);
        plainSlots.upload(sl);
        model->decode(TensorView::contiguous(plainIds.data(), DType::I32, {n}),
                      TensorView::contiguous(plainSlots.data(), DType::I32, {n}),
                      TensorView::contiguous(plainLogits.data(), DType::F32, {n, V}));
        checkDeviceErrors();
        const std::vector<int32_t> next = argmaxRows(plainLogits.download<float>(), n, V);
        for (int64_t i = 0; i < n; ++i) {
          if (sl[size_t(i)] < 0) continue;
          ++plainFed[size_t(i)];
          if (next[size_t(i)] != made[size_t(i)][size_t(plainFed[size_t(i)])]) ++plainMismatches;
        }
      }
      for (int64_t l = 0; l < layers; ++l) {
        const Mamba2LayerState& st = model->layer_state(l);
        for (int64_t i = 0; i < n; ++i) {
          worstConv = std::max(worstConv, relDiff(slotValues(st.conv_state, i), slotValues(st.conv_state, 4 + i)));
          worstSsm = std::max(worstSsm, relDiff(slotValues(st.ssm_state, i), slotValues(st.ssm_state, 4 + i)));
        }
      }
    }
    std::printf("[ measured ] %s %s: states after commits vs plain decoding: conv %.3g, ssm %.3g (bound %.3g); "
                "%lld of plain decoding's tokens differ; tokens made %zu %zu %zu\n",
                tc.name, k.name, worstConv, worstSsm, bound, (long long)plainMismatches, made[0].size(),
                made[1].size(), made[2].size());
    EXPECT_LE(worstConv, bound);
    EXPECT_LE(worstSsm, bound);
    if (fp32) EXPECT_EQ(plainMismatches, 0);
    for (int64_t i = 0; i < n; ++i) EXPECT_GE(int64_t(made[size_t(i)].size()), 9) << "sequence " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, SpeculativeGpu, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ssmjit

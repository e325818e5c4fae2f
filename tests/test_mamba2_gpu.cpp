// The Mamba-2 model on the GPU against the float64 reference (runtime/reference/Mamba2ModelRef)
// on tiny random checkpoints the test writes itself: a packed prefill of prompts of several
// lengths (one crossing a chunk boundary), then decode steps fed chosen tokens, logits compared
// at every step. Prefill then decode equals the reference's one recurrence, so prefill of T then
// k decode steps agrees with a prefill of T + k.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "GpuTest.h"
#include "runtime/model/Mamba2Weights.h"
#include "runtime/reference/Mamba2ModelRef.h"
#include "ssmjit/mamba2_model.h"
#include "support/ScratchDir.h"
#include "support/TinyMamba2Cases.h"

namespace ssmjit {
namespace {

using Mamba2Case = testing::TinyMamba2Case;

std::vector<Mamba2Case> cases() { return testing::tinyMamba2Cases({DType::F32, DType::BF16}); }

// Worst |ours - ref| of each row of `ours` (rows x V, fp32) against the row's largest |ref|.
double worstRelative(const std::vector<float>& ours, const std::vector<double>& ref, int64_t rows, int64_t V,
                     const std::vector<int64_t>& refRows) {
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double err = 0, scale = 0;
    for (int64_t v = 0; v < V; ++v) {
      const double want = ref[refRows[r] * V + v];
      err = std::max(err, std::abs(ours[r * V + v] - want));
      scale = std::max(scale, std::abs(want));
    }
    worst = std::max(worst, err / scale);
  }
  return worst;
}

class Mamba2Gpu : public ::testing::TestWithParam<Mamba2Case> {};

TEST_P(Mamba2Gpu, PrefillThenDecodeMatchesReference) {
  SSMJIT_REQUIRE_GPU();
  const Mamba2Case& tc = GetParam();
  testing::ScratchDir dir;
  // Four slots, one more than sequences: slots need not be 0..n-1.
  auto model = testing::loadTinyMamba2Case(dir.path(), tc, 4, 128);
  const model::Mamba2Checkpoint ckpt(dir.path());

  std::vector<std::vector<int32_t>> p = {{3}, {1, 4, 1, 5, 9, 2, 6}, {}};
  for (int t = 0; t < 70; ++t) p[2].push_back((t * 7 + 3) % 50);  // crosses the chunk of 64
  const int64_t nseq = static_cast<int64_t>(p.size());
  const int64_t V = model->config().vocab;
  const std::vector<int32_t> slots = {2, 0, 3};
  const double bound = tc.dtype == DType::BF16 ? 3e-2 : 2e-4;

  // Prefill: the reference runs the same packed row.
  std::vector<int64_t> tokens, cu{0}, last;
  for (const auto& q : p) {
    tokens.insert(tokens.end(), q.begin(), q.end());
    cu.push_back(static_cast<int64_t>(tokens.size()));
    last.push_back(cu.back() - 1);
  }
  std::vector<std::vector<reference::Mamba2SequenceState>> states;
  const std::vector<double> refPrefill = reference::mamba2_model(ckpt.config, ckpt.weights, tokens, cu, states);
  DeviceBuffer logits(static_cast<size_t>(nseq * V * 4));
  logits.fill(0xFF);
  const TensorView lv = TensorView::contiguous(logits.data(), DType::F32, {nseq, V});
  model->prefill(p, slots, lv);
  checkDeviceErrors();
  double err = worstRelative(logits.download<float>(), refPrefill, nseq, V, last);
  EXPECT_LE(err, bound) << "prefill";

  // Decode: five steps, each sequence fed a chosen token; a pad row between them.
  std::vector<int32_t> stepSlots = {slots[0], -1, slots[1], slots[2]};
  DeviceBuffer slotBuf = DeviceBuffer::fromHost(stepSlots);
  const int64_t B = static_cast<int64_t>(stepSlots.size());
  DeviceBuffer stepLogits(static_cast<size_t>(B * V * 4));
  for (int step = 0; step < 5; ++step) {
    std::vector<int32_t> ids = {(step * 3 + 1) % 50, 0, (step * 5 + 2) % 50, (step * 11 + 7) % 50};
    DeviceBuffer idBuf = DeviceBuffer::fromHost(ids);
    stepLogits.fill(0xFF);
    model->decode(TensorView::contiguous(idBuf.data(), DType::I32, {B}),
                  TensorView::contiguous(slotBuf.data(), DType::I32, {B}),
                  TensorView::contiguous(stepLogits.data(), DType::F32, {B, V}));
    checkDeviceErrors();
    const std::vector<int64_t> refTokens = {ids[0], ids[2], ids[3]}, refCu = {0, 1, 2, 3};
    const std::vector<double> ref = reference::mamba2_model(ckpt.config, ckpt.weights, refTokens, refCu, states);
    std::vector<float> all = stepLogits.download<float>(), live;
    for (int64_t b : {0, 2, 3}) live.insert(live.end(), all.begin() + b * V, all.begin() + (b + 1) * V);
    err = std::max(err, worstRelative(live, ref, 3, V, {0, 1, 2}));
    EXPECT_LE(worstRelative(live, ref, 3, V, {0, 1, 2}), bound) << "decode step " << step;
  }
  std::printf("%s: logits within %.2e of the float64 reference (relative to each row's largest)\n", tc.name, err);
}

INSTANTIATE_TEST_SUITE_P(Tiny, Mamba2Gpu, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ssmjit

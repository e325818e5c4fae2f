// sample_tokens: the arguments are checked once, here at the edge (SampleTokensCheck), then bound
// to the sampling kernels (kernels_dsl/sample/Sample.h) and launched on the caller's stream: the
// arg max, or the draw (then the shared step counter's advance, when step is (1,)).
#include <cuda.h>

#include "kernels_dsl/sample/Sample.h"
#include "runtime/ops/KernelCall.h"
#include "runtime/ops/SampleTokensCheck.h"
#include "runtime/ops/SampleTokensSpec.h"
#include "ssmjit/ops.h"

namespace ssmjit {
namespace {

using detail::KernelCall;
using kernels::kSampleAdvanceStep;
using kernels::kSampleArgmax;
using kernels::kSampleDraw;

constexpr double kLog2e = 1.4426950408889634;  // the draw works in base-2 logits

void bindArgmax(KernelCall& c, const SampleArgs& a, const detail::SampleDims& d) {
  constexpr const dsl::Signature& S = kSampleArgmax;
  c.tensor(S.tensor("logits"), a.logits);
  c.tensor(S.tensor("ids"), a.token_ids);
  c.tensor(S.tensor("idx"), a.row_state_indices);
  c.size(S.size("V"), d.V);
  c.flag(S.flag("has_idx"), a.row_state_indices.defined());
  c.meta("meta:index_bits", detail::fits32({&a.logits, &a.token_ids, &a.row_state_indices}) ? 32 : 64);
}

void bindDraw(KernelCall& c, const SampleArgs& a, const detail::SampleDims& d) {
  constexpr const dsl::Signature& S = kSampleDraw;
  c.tensor(S.tensor("logits"), a.logits);
  c.tensor(S.tensor("ids"), a.token_ids);
  c.tensor(S.tensor("idx"), a.row_state_indices);
  // A shared counter: every row reads step[0].
  c.tensor(S.tensor("step"), a.step, {d.perRow ? 0 : detail::kNoAxis});
  c.size(S.size("V"), d.V);
  c.size(S.size("top_k"), d.topK ? a.top_k : 0);
  c.size(S.size("seed_lo"), static_cast<int64_t>(a.seed & 0xFFFFFFFFu));
  c.size(S.size("seed_hi"), static_cast<int64_t>(a.seed >> 32));
  c.scalar(S.scalar("inv_temp"), static_cast<float>(kLog2e / a.temperature));
  c.scalar(S.scalar("top_p"), d.topP ? a.top_p : 1.0f);
  c.flag(S.flag("has_idx"), a.row_state_indices.defined());
  c.flag(S.flag("has_topk"), d.topK);
  c.flag(S.flag("has_topp"), d.topP);
  c.flag(S.flag("advance"), d.perRow);
}

void bindAdvance(KernelCall& c, const SampleArgs& a) { c.tensor(kSampleAdvanceStep.tensor("step"), a.step); }

unsigned u(int64_t v) { return static_cast<unsigned>(v); }

}  // namespace

void sample_tokens(const SampleArgs& a, Stream stream) {
  const detail::SampleDims d = detail::checkSampleArgs(a, DeviceKind::CUDA, "sample_tokens");
  if (d.batch == 0) return;
  const auto s = static_cast<CUstream>(stream);
  KernelCall c(d.greedy ? kSampleArgmax : kSampleDraw);
  if (d.greedy)
    bindArgmax(c, a, d);
  else
    bindDraw(c, a, d);
  const unsigned grid[3] = {u(d.batch), 1, 1};
  c.launch(grid, s);
  if (!d.greedy && !d.perRow) {
    KernelCall adv(kSampleAdvanceStep);
    bindAdvance(adv, a);
    const unsigned one[3] = {1, 1, 1};
    adv.launch(one, s);
  }
}

std::vector<Specialization> detail::sampleSpecializations(const SampleArgs& a, const std::string& arch) {
  const SampleDims d = checkSampleArgs(a, a.logits.device, "sample_tokens");
  std::vector<Specialization> out;
  KernelCall c(d.greedy ? kSampleArgmax : kSampleDraw);
  if (d.greedy)
    bindArgmax(c, a, d);
  else
    bindDraw(c, a, d);
  out.push_back(c.specialization(arch));
  if (!d.greedy && !d.perRow) {
    KernelCall adv(kSampleAdvanceStep);
    bindAdvance(adv, a);
    out.push_back(adv.specialization(arch));
  }
  return out;
}

}  // namespace ssmjit

// The argument check of sample_tokens (see SampleTokensCheck.h and the contract in ssmjit/ops.h).
#include "runtime/ops/SampleTokensCheck.h"

#include <cmath>
#include <string>

#include "runtime/ops/ArgCheck.h"

namespace ssmjit::detail {
namespace {
constexpr float kMinTemperature = 1e-30f;  // log2(e) / temperature stays a float
}  // namespace

SampleDims checkSampleArgs(const SampleArgs& a, DeviceKind device, const char* op) {
  Checker c(op, device);
  SampleDims d;
  Dim eL[2] = {{-1, "batch"}, {-1, "vocab"}};
  c.lead("logits", a.logits, eL, 2);
  d.batch = eL[0].size = a.logits.shape[0];
  d.V = eL[1].size = a.logits.shape[1];
  if (d.V < 1) c.fail("logits has shape " + a.logits.shapeString() + ", expected a vocab (dim 1) of at least 1");
  c.tensor("logits", a.logits, eL, 2, kFloat16Or32, false);
  if (d.V > 1 && a.logits.strides[1] != 1)
    c.fail("logits has strides " + listString(a.logits.strides, 2) + ", expected stride 1 along the vocab (dim 1)");

  const Dim eB[1] = {{d.batch, "batch"}};
  c.required("token_ids", a.token_ids);
  c.tensor("token_ids", a.token_ids, eB, 1, kIndexTypes, false);
  c.optional("row_state_indices", a.row_state_indices, eB, 1, kIndexTypes, false);

  if (std::isnan(a.temperature)) c.fail("temperature is NaN, expected a number (<= 0: greedy)");
  if (std::isnan(a.top_p) || a.top_p <= 0.0f)
    c.fail("top_p is " + std::to_string(a.top_p) + ", expected 0 < top_p (>= 1: no top-p restriction)");
  if (a.temperature > 0.0f && a.temperature < kMinTemperature)
    c.fail("temperature is " + std::to_string(a.temperature) + ", expected <= 0 (greedy) or >= 1e-30");
  d.greedy = a.temperature <= 0.0f;
  if (d.greedy) return d;
  d.topK = a.top_k > 0 && a.top_k < d.V;
  d.topP = a.top_p < 1.0f;
  if (!a.step.defined())
    c.fail("step is required when temperature > 0 (temperature is " + std::to_string(a.temperature) +
           "), got an undefined tensor: expected a (1,) or (batch,) int64 device counter");
  Dim eS[1] = {{-1, "1 or batch"}};
  c.rank("step", a.step, eS, 1);
  eS[0].size = a.step.shape[0] == 1 ? 1 : d.batch;
  c.tensor("step", a.step, eS, 1, dtypeBit(DType::I64), false);
  d.perRow = a.step.shape[0] != 1;
  return d;
}

}  // namespace ssmjit::detail

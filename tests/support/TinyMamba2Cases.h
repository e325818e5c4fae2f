// The tiny Mamba-2 models the GPU model tests (test_mamba2_gpu, test_speculative_gpu) run on, one
// per set of features: two groups; biases, tied embeddings, the gate's norm first and a dt clamp;
// mamba_ssm's naming. Each case is a model and the dtype it runs in, named for gtest.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "ssmjit/mamba2_model.h"
#include "tests/support/LayerSizes.h"
#include "tests/support/TinyMamba2.h"

namespace ssmjit::testing {

struct TinyMamba2Case {
  const char* name;
  TinyMamba2 model;
  DType dtype;
};

inline TinyMamba2 tinyMamba2(int64_t hidden, int64_t heads, int64_t headDim, int64_t state, int64_t groups) {
  TinyMamba2 m = withLayerSizes<TinyMamba2>(hidden, heads, headDim, state, groups);
  m.vocab = 50;
  m.layers = 2;
  return m;
}

// Groups2Fp32, BiasTiedClampFp32, then mamba_ssm's naming in each of `namingDtypes` (F32:
// MambaSsmNamingFp32, BF16: MambaSsmNamingBf16).
inline std::vector<TinyMamba2Case> tinyMamba2Cases(std::initializer_list<DType> namingDtypes) {
  std::vector<TinyMamba2Case> c;
  c.push_back({"Groups2Fp32", tinyMamba2(16, 4, 8, 8, 2), DType::F32});
  TinyMamba2 b = tinyMamba2(32, 4, 16, 16, 1);
  b.use_bias = true;
  b.tie = true;
  b.norm_before_gate = true;
  b.dt_min = 0.001;
  b.dt_max = 0.2;
  c.push_back({"BiasTiedClampFp32", b, DType::F32});
  TinyMamba2 m = tinyMamba2(64, 4, 32, 16, 1);
  m.naming = model::CheckpointNaming::MambaSsm;
  for (DType t : namingDtypes) c.push_back({t == DType::BF16 ? "MambaSsmNamingBf16" : "MambaSsmNamingFp32", m, t});
  return c;
}

// The case's model written to `dir` (random tensors from seed 7) and loaded in its dtype.
inline std::unique_ptr<Mamba2Model> loadTinyMamba2Case(const std::string& dir, const TinyMamba2Case& tc,
                                                       int64_t maxBatch, int64_t maxPrefillTokens,
                                                       int64_t maxDraftTokens = 0) {
  writeTinyMamba2(dir, tc.model, tinyMamba2Tensors(tc.model, 7));
  Mamba2ModelOptions o;
  o.dtype = tc.dtype;
  o.max_batch = maxBatch;
  o.max_prefill_tokens = maxPrefillTokens;
  o.max_draft_tokens = maxDraftTokens;
  return Mamba2Model::load(dir, o);
}

}  // namespace ssmjit::testing

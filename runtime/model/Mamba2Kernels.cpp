// The kernels of a Mamba-2 model, named without a GPU (Mamba2Kernels.h): the model's forward pass
// run through a sink that specialises each op call instead of launching it, on stand-in buffers.
#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/OpSpecializations.h"
#include "runtime/model/Mamba2Kernels.h"
#include "runtime/model/Mamba2ModelImpl.h"
#include "runtime/ops/KernelCall.h"
#include "runtime/ops/RmsNormSpec.h"
#include "runtime/ops/SampleTokensSpec.h"

namespace ssmjit {

using detail::rows;

namespace {

// Names each op call's kernels instead of launching it; each distinct one once.
struct SpecSink : OpSink {
  explicit SpecSink(std::string a) : arch(std::move(a)) {}
  void add(Specialization s) {
    if (std::find(specs.begin(), specs.end(), s) == specs.end()) specs.push_back(std::move(s));
  }
  void embedding(const EmbeddingArgs& a) override { add(opspec::embedding(a, arch)); }
  void rmsNorm(const RmsNormArgs& a) override { add(detail::rmsNormSpecialization(a, arch)); }
  void layer(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s, const Mamba2LayerArgs& a,
             Mamba2LayerMode mode) override {
    for (Specialization& sp : detail::mamba2LayerSpecializations(d, w, s, a, mode, arch)) add(std::move(sp));
  }
  void commit(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s, const TensorView& slotIds,
              const TensorView& numAccepted) override {
    Mamba2DecodeStepArgs a;
    a.state_indices = slotIds;
    a.num_accepted = numAccepted;
    a.parts = DecodeStepParts::ReplayOnly;
    add(opspec::decodeStep(detail::mamba2DecodeState(s), detail::mamba2MixerWeights(d, w), a, arch));
  }
  void linear(const LinearArgs&) override {}  // cuBLASLt: nothing to compile
  std::string arch;
  std::vector<Specialization> specs;
};

// Stand-ins for a checkpoint's tensors: defined where the config says the checkpoint has them,
// with D's shape; placeWeights reads nothing else.
model::Mamba2Weights standInWeights(const model::Mamba2Config& c) {
  void* const fake = reinterpret_cast<void*>(uintptr_t{256});
  const TensorView t = TensorView::contiguous(fake, DType::F32, {1}, DeviceKind::CPU);
  model::Mamba2Weights w;
  w.embedding = w.norm_f = w.lm_head = t;
  w.layers.resize(c.num_layers);
  for (model::Mamba2LayerWeights& l : w.layers) {
    l.norm = l.in_proj_weight = l.conv1d_weight = l.dt_bias = l.A_log = l.gated_norm = l.out_proj_weight = t;
    if (c.use_bias) l.in_proj_bias = l.out_proj_bias = t;
    if (c.use_conv_bias) l.conv1d_bias = t;
    l.D = TensorView::contiguous(fake, DType::F32, {c.d_has_hdim ? c.d_inner() : c.num_heads}, DeviceKind::CPU);
  }
  return w;
}

// One count of each divisibility class (detail::divClass) up to `most`: the prefill's tokens and
// sequences can be any count, so each class is named once. Every class appears among any 16
// consecutive counts.
std::vector<int64_t> oneOfEachClass(int64_t most) {
  std::vector<int64_t> v, seen;
  for (int64_t n = most; n >= 1 && n > most - 16; --n)
    if (std::find(seen.begin(), seen.end(), detail::divClass(n)) == seen.end()) {
      seen.push_back(detail::divClass(n));
      v.push_back(n);
    }
  return v;
}

}  // namespace

std::vector<Specialization> detail::mamba2ModelSpecializations(const std::string& dir, const Mamba2ModelOptions& o,
                                                               const std::string& arch, int tensorParallel) {
  checkModelOptions(o);
  const model::Mamba2Config c = model::loadMamba2Config(dir);
  Mamba2Model::Impl m;
  m.cfg = mamba2ModelConfig(c);
  m.opt = o;
  m.listedRanks = tensorParallel;
  DeviceArena arena, work;
  placeWeights(standInWeights(c), o.dtype, m, arena);
  placeStates(m, arena);
  placeActivations(m, arena);
  arena.place(reinterpret_cast<void*>(uintptr_t{1} << 40));
  if (m.cfg.tied_embeddings) m.lmHead = m.embedding;
  work.add(m.workspace, DType::F32, {workspaceFloats(m)});
  work.place(reinterpret_cast<void*>(uintptr_t{1} << 41));

  SpecSink ops(arch);
  const int64_t V = m.cfg.vocab, S = o.max_batch;
  const TensorView logits = TensorView::contiguous(reinterpret_cast<void*>(uintptr_t{1} << 42), DType::F32, {S, V});
  const TensorView step = TensorView::contiguous(reinterpret_cast<void*>(uintptr_t{3} << 42), DType::I64, {1});
  const int64_t L = m.cacheDepth();
  const TensorView verifyLogits =
      TensorView::contiguous(reinterpret_cast<void*>(uintptr_t{5} << 42), DType::F32, {S * std::max<int64_t>(L, 1), V});
  const TensorView rowSteps =
      TensorView::contiguous(reinterpret_cast<void*>(uintptr_t{7} << 42), DType::I64, {S * std::max<int64_t>(L, 1)});
  // generate()'s sampling: greedy, and drawn with each of its restrictions; rows keyed by `keys`
  // (undefined: not keyed, as the prefill's first tokens are).
  auto sampling = [&](const TensorView& lg, int64_t n, const TensorView& counter, const TensorView& keys) {
    for (auto [temperature, topK, topP] :
         {std::tuple{0.0f, 0, 1.0f}, std::tuple{1.0f, 0, 1.0f}, std::tuple{1.0f, 50, 1.0f}, std::tuple{1.0f, 0, 0.9f},
          std::tuple{1.0f, 50, 0.9f}}) {
      SampleArgs a;
      a.logits = rows(lg, n);
      a.token_ids = rows(m.ids, n);
      a.temperature = temperature;
      a.top_k = topK;
      a.top_p = topP;
      a.step = counter;
      if (keys.defined()) a.row_state_indices = rows(keys, n);
      for (Specialization& sp : detail::sampleSpecializations(a, arch)) ops.add(std::move(sp));
    }
  };
  for (int64_t T : oneOfEachClass(o.max_prefill_tokens))
    for (int64_t nseq : oneOfEachClass(S))
      if (nseq <= T) {
        m.prefillOps(T, nseq, rows(logits, nseq), ops);
        sampling(logits, nseq, step, TensorView{});
      }
  for (int64_t b = 1;; b = std::min(2 * b, S)) {
    m.decodeOps(rows(m.ids, b), rows(m.slots, b), rows(logits, b), ops);
    sampling(logits, b, step, m.slots);
    if (L > 0) {  // generate()'s verify of max_draft_tokens drafts, its per-row draws, a commit
      m.verifyOps(rows(m.ids, b * L), L, rows(m.slots, b), rows(m.last, b), rows(verifyLogits, b * L), ops);
      sampling(verifyLogits, b * L, rows(rowSteps, b * L), m.ids);
      m.commitOps(rows(m.slots, b), rows(m.last, b), ops);
    }
    if (b == S) break;
  }
  return ops.specs;
}

}  // namespace ssmjit

// The Mamba-2 model (mamba2_model.h): loading, and the forward pass over the layers for a packed
// prefill row or a decode step (its buffers: Mamba2Buffers.cpp).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/model/Mamba2Kernels.h"
#include "runtime/model/Mamba2ModelImpl.h"
#include "runtime/model/OverlappedAllReduce.h"
#include "runtime/ops/ArgCheck.h"
#include "ssmjit/mamba2_model.h"

namespace ssmjit {

using detail::modelArgError;
using detail::rows;

namespace {

void checkLogits(const char* call, const TensorView& logits, const detail::Dim (&expect)[2]) {
  detail::Checker c(call, DeviceKind::CUDA);
  c.required("logits", logits);
  c.setDeviceId(logits.deviceId, "logits");
  c.rank("logits", logits, expect, 2);
  c.tensor("logits", logits, expect, 2, detail::kF32Only, false);
}

void uploadInt32(const TensorView& dst, const std::vector<int32_t>& v) {
  driver::check(driver::api().cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(dst.data), v.data(), v.size() * 4),
                "Mamba2Model: cuMemcpyHtoD");
}


void uploadWeights(const model::Mamba2Weights& h, DType act, Mamba2Model::Impl& m) {
  DeviceArena arena;
  const std::vector<detail::Upload> ups = detail::placeWeights(h, act, m, arena);
  m.weightMem = arena.allocate();
  if (m.cfg.tied_embeddings) m.lmHead = m.embedding;
  detail::uploadAll(ups);
}

}  // namespace

void Mamba2Model::Impl::forwardLayers(int64_t T, Mamba2LayerMode mode, const TensorView& tokenIds,
                                      const Mamba2LayerArgs& layerArgs, OpSink& ops) const {
  EmbeddingArgs e;
  e.ids = tokenIds;
  e.table = embedding;
  e.out = rows(hidden, T);
  ops.embedding(e);
  for (size_t l = 0; l < layers.size(); ++l) {
    RmsNormArgs n;
    n.x = rows(l == 0 ? hidden : mixed, T);
    if (l > 0) n.residual = rows(residual, T);
    n.residual_out = rows(residual, T);
    n.weight = layerNorms[l];
    n.out = rows(normed, T);
    n.eps = cfg.dims.norm_eps;
    ops.rmsNorm(n);
    Mamba2LayerArgs a = layerArgs;
    a.hidden = rows(normed, T);
    a.out = rows(mixed, T);
    a.workspace = workspace;
    ops.layer(shard.local, layers[l], states[l], a, mode);
  }
}

// logits = lm_head(rms_norm(x + res) * norm_f), in fp32.
void Mamba2Model::Impl::logits(const TensorView& x, const TensorView& res, const TensorView& normedOut,
                               const TensorView& out, OpSink& ops) const {
  RmsNormArgs n;
  n.x = x;
  n.residual = res;
  n.weight = normF;
  n.out = normedOut;
  n.eps = cfg.dims.norm_eps;
  ops.rmsNorm(n);
  LinearArgs lm;
  lm.x = normedOut;
  lm.weight = lmHead;
  lm.y = out;
  lm.workspace = workspace;
  ops.linear(lm);
}

void Mamba2Model::Impl::prefillOps(int64_t T, int64_t nseq, const TensorView& logitsOut, OpSink& ops) const {
  Mamba2LayerArgs a;
  a.cu_seqlens = rows(cu, nseq + 1);
  a.state_indices = rows(slots, nseq);
  forwardLayers(T, Mamba2LayerMode::Prefill, rows(ids, T), a, ops);
  // Only each prompt's last token reaches the head: gather its rows (the embedding op indexes
  // any table), then the final norm and lm_head on nseq rows.
  EmbeddingArgs g;
  g.ids = rows(last, nseq);
  g.table = rows(mixed, T);
  g.out = rows(gathered, nseq);
  ops.embedding(g);
  g.table = rows(residual, T);
  g.out = rows(gatheredResidual, nseq);
  ops.embedding(g);
  logits(rows(gathered, nseq), rows(gatheredResidual, nseq), rows(gatheredNormed, nseq), logitsOut, ops);
}

void Mamba2Model::Impl::decodeOps(const TensorView& tokenIds, const TensorView& slotIds, const TensorView& logitsOut,
                                  OpSink& ops) const {
  const int64_t B = tokenIds.shape[0];
  Mamba2LayerArgs a;
  a.state_indices = slotIds;
  forwardLayers(B, Mamba2LayerMode::Decode, tokenIds, a, ops);
  logits(rows(mixed, B), rows(residual, B), rows(normed, B), logitsOut, ops);
}

void Mamba2Model::Impl::verifyOps(const TensorView& tokenIds, int64_t L, const TensorView& slotIds,
                                  const TensorView& numAccepted, const TensorView& logitsOut, OpSink& ops) const {
  const int64_t T = tokenIds.shape[0];
  Mamba2LayerArgs a;
  a.state_indices = slotIds;
  a.num_accepted = numAccepted;
  a.tokens_per_sequence = L;
  forwardLayers(T, Mamba2LayerMode::Verify, tokenIds, a, ops);
  logits(rows(mixed, T), rows(residual, T), rows(normed, T), logitsOut, ops);
}

void Mamba2Model::Impl::commitOps(const TensorView& slotIds, const TensorView& numAccepted, OpSink& ops) const {
  for (size_t l = 0; l < layers.size(); ++l) ops.commit(shard.local, layers[l], states[l], slotIds, numAccepted);
}

namespace {

// Launches every op on `stream`; under tensor parallelism each layer's partial outputs are summed
// over the ranks (a prefill's in row pieces overlapping out_proj, a decode's or verify's few rows
// at once).
struct LaunchSink : OpSink {
  LaunchSink(Stream s, Communicator* tp) : stream(s), tp(tp) {}
  void embedding(const EmbeddingArgs& a) override { ssmjit::embedding(a, stream); }
  void rmsNorm(const RmsNormArgs& a) override { rms_norm(a, stream); }
  void layer(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s, const Mamba2LayerArgs& a,
             Mamba2LayerMode mode) override {
    if (tp && mode == Mamba2LayerMode::Prefill) {
      detail::mamba2TpLayerPrefill(d, w, s, a, *tp, stream);
      return;
    }
    switch (mode) {
      case Mamba2LayerMode::Prefill: mamba2_layer_prefill(d, w, s, a, stream); break;
      case Mamba2LayerMode::Decode: mamba2_layer_decode(d, w, s, a, stream); break;
      case Mamba2LayerMode::Verify: mamba2_layer_verify(d, w, s, a, stream); break;
    }
    if (tp) tp->allReduceSum(a.out, stream);
  }
  void commit(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s, const TensorView& slotIds,
              const TensorView& numAccepted) override {
    mamba2_layer_commit(d, w, s, slotIds, numAccepted, stream);
  }
  void linear(const LinearArgs& a) override { ssmjit::linear(a, stream); }
  Stream stream;
  Communicator* tp;
};

}  // namespace

Mamba2Model::Mamba2Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Mamba2Model::~Mamba2Model() = default;
const Mamba2ModelConfig& Mamba2Model::config() const { return impl_->cfg; }
const Mamba2ModelOptions& Mamba2Model::options() const { return impl_->opt; }

std::unique_ptr<Mamba2Model> Mamba2Model::load(const std::string& dir, const Mamba2ModelOptions& options) {
  detail::checkModelOptions(options);
  const model::Mamba2Checkpoint ckpt(dir);
  auto m = std::make_unique<Impl>();
  m->cfg = detail::mamba2ModelConfig(ckpt.config);
  m->opt = options;
  driver::ensureContext();
  uploadWeights(ckpt.weights, options.dtype, *m);

  DeviceArena states, acts;
  detail::placeStates(*m, states);
  m->stateMem = states.allocate();
  m->stateMem.fill(0);
  detail::placeActivations(*m, acts);
  m->actMem = acts.allocate();
  DeviceArena work;
  work.add(m->workspace, DType::F32, {detail::workspaceFloats(*m)});
  m->workMem = work.allocate();
  return std::unique_ptr<Mamba2Model>(new Mamba2Model(std::move(m)));
}

void Mamba2Model::prefill(const std::vector<std::vector<int32_t>>& prompts, const std::vector<int32_t>& slots,
                          const TensorView& logitsOut, Stream stream) {
  Impl& m = *impl_;
  const auto nseq = static_cast<int64_t>(prompts.size());
  if (nseq < 1 || nseq > m.opt.max_batch)
    modelArgError("prefill got " + std::to_string(nseq) + " prompts, expected 1 to max_batch (" +
                  std::to_string(m.opt.max_batch) + ")");
  if (static_cast<int64_t>(slots.size()) != nseq)
    modelArgError("prefill got " + std::to_string(slots.size()) + " slots for " + std::to_string(nseq) + " prompts");
  std::vector<int32_t> ids, cu{0}, last;
  std::vector<bool> used(m.opt.max_batch, false);
  for (int64_t i = 0; i < nseq; ++i) {
    if (prompts[i].empty()) modelArgError("prompt " + std::to_string(i) + " is empty, expected at least one token");
    const int32_t s = slots[i];
    if (s < 0 || s >= m.opt.max_batch || used[s])
      modelArgError("slots[" + std::to_string(i) + "] is " + std::to_string(s) + ", expected a distinct slot in [0, " +
                    std::to_string(m.opt.max_batch) + ")");
    used[s] = true;
    for (int32_t t : prompts[i]) {
      if (t < 0 || t >= m.cfg.vocab)
        modelArgError("prompt " + std::to_string(i) + " holds token " + std::to_string(t) + ", expected [0, " +
                      std::to_string(m.cfg.vocab) + ")");
      ids.push_back(t);
    }
    cu.push_back(static_cast<int32_t>(ids.size()));
    last.push_back(cu.back() - 1);
  }
  const auto T = static_cast<int64_t>(ids.size());
  if (T > m.opt.max_prefill_tokens)
    modelArgError("prefill got " + std::to_string(T) + " tokens, expected at most max_prefill_tokens (" +
                  std::to_string(m.opt.max_prefill_tokens) + ")");
  const detail::Dim expect[] = {{nseq, "prompts"}, {m.cfg.vocab, "vocab"}};
  checkLogits("prefill", logitsOut, expect);
  // The inputs are uploaded synchronously: wait for earlier work on the stream that reads them.
  const CUstream s = static_cast<CUstream>(stream);
  driver::check(driver::api().cuStreamSynchronize(s), "Mamba2Model::prefill: cuStreamSynchronize");
  uploadInt32(m.ids, ids);
  uploadInt32(m.cu, cu);
  uploadInt32(m.slots, slots);
  uploadInt32(m.last, last);
  // A slot that starts a sequence has no verify tokens cached.
  if (m.cacheDepth() > 0)
    for (const Mamba2LayerState& st : m.states)
      for (int32_t slot : slots)
        driver::check(driver::api().cuMemsetD32Async(
                          reinterpret_cast<CUdeviceptr>(static_cast<int32_t*>(st.cached_tokens.data) + slot), 0, 1, s),
                      "Mamba2Model::prefill: cuMemsetD32Async");
  LaunchSink ops(stream, m.opt.tensor_parallel);
  m.prefillOps(T, nseq, logitsOut, ops);
}

void Mamba2Model::decode(const TensorView& tokenIds, const TensorView& slots, const TensorView& logitsOut,
                         Stream stream) {
  Impl& m = *impl_;
  const int64_t B = tokenIds.ndim == 1 ? tokenIds.shape[0] : -1;
  if (B < 1 || B > m.opt.max_batch)
    modelArgError("decode: token_ids has shape " + tokenIds.shapeString() +
                  ", expected (B,) with 1 <= B <= max_batch (" + std::to_string(m.opt.max_batch) + ")");
  const detail::Dim expect[] = {{B, "batch"}, {m.cfg.vocab, "vocab"}};
  checkLogits("decode", logitsOut, expect);
  LaunchSink ops(stream, m.opt.tensor_parallel);
  m.decodeOps(tokenIds, slots, logitsOut, ops);
}

void Mamba2Model::verify(const TensorView& tokenIds, const TensorView& slots, const TensorView& numAccepted,
                         const TensorView& logitsOut, Stream stream) {
  Impl& m = *impl_;
  if (m.cacheDepth() == 0)
    modelArgError("verify: options.max_draft_tokens is 0, expected >= 1 (the model was loaded without verify caches)");
  const bool shaped = tokenIds.ndim == 2 && tokenIds.dtype == DType::I32 && tokenIds.strides[1] == 1 &&
                      tokenIds.strides[0] == tokenIds.shape[1];
  const int64_t B = shaped ? tokenIds.shape[0] : -1, L = shaped ? tokenIds.shape[1] : -1;
  if (B < 1 || B > m.opt.max_batch || L < 1 || L > m.cacheDepth())
    modelArgError("verify: token_ids has shape " + tokenIds.shapeString() + " (" + dtypeName(tokenIds.dtype) +
         "), expected contiguous int32 (B, L) with 1 <= B <= max_batch (" + std::to_string(m.opt.max_batch) +
         ") and 1 <= L <= max_draft_tokens + 1 (" + std::to_string(m.cacheDepth()) + ")");
  const detail::Dim expect[] = {{B * L, "batch x tokens"}, {m.cfg.vocab, "vocab"}};
  checkLogits("verify", logitsOut, expect);
  TensorView flat = tokenIds;
  flat.ndim = 1;
  flat.shape[0] = B * L;
  flat.strides[0] = 1;
  LaunchSink ops(stream, m.opt.tensor_parallel);
  m.verifyOps(flat, L, slots, numAccepted, logitsOut, ops);
}

void Mamba2Model::commit(const TensorView& slots, const TensorView& numAccepted, Stream stream) {
  Impl& m = *impl_;
  if (m.cacheDepth() == 0)
    modelArgError("commit: options.max_draft_tokens is 0, expected >= 1 (the model was loaded without verify caches)");
  LaunchSink ops(stream, m.opt.tensor_parallel);
  m.commitOps(slots, numAccepted, ops);
}

const Mamba2LayerState& Mamba2Model::layer_state(int64_t layer) const {
  const Impl& m = *impl_;
  if (layer < 0 || layer >= m.cfg.layers)
    modelArgError("layer_state: layer is " + std::to_string(layer) + ", expected [0, " + std::to_string(m.cfg.layers) + ")");
  return m.states[static_cast<size_t>(layer)];
}

}  // namespace ssmjit

// The Mamba-2 model (mamba2_model.h): device weights, per-slot states and activation buffers
// carved from three allocations, and the forward pass over the layers for a packed prefill row
// or a decode step.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/model/DeviceArena.h"
#include "runtime/model/Mamba2Weights.h"
#include "runtime/ops/ArgCheck.h"
#include "runtime/reference/ElementAccess.h"
#include "ssmjit/mamba2_model.h"

namespace ssmjit {

struct Mamba2Model::Impl {
  Mamba2ModelConfig cfg;
  Mamba2ModelOptions opt;
  DeviceBuffer weightMem, stateMem, actMem, workMem;
  std::vector<Mamba2LayerWeights> layers;
  std::vector<TensorView> layerNorms;
  std::vector<Mamba2LayerState> states;
  TensorView embedding, normF, lmHead;
  // Activations, rows = max(max_prefill_tokens, max_batch).
  TensorView hidden, residual, normed, mixed;
  TensorView ids, cu, slots, last;  // prefill's int32 inputs
  TensorView gathered, gatheredResidual, gatheredNormed;
  TensorView workspace;

  void forwardLayers(int64_t T, bool prefill, const TensorView& tokenIds, const TensorView& cuSeqlens,
                     const TensorView& slotIds, Stream s) const;
  void logits(const TensorView& x, const TensorView& res, const TensorView& normedOut, const TensorView& out,
              Stream s) const;
};

namespace {

constexpr const char* kOp = "Mamba2Model";

[[noreturn]] void fail(const std::string& msg) {
  throw Error(Error::Kind::InvalidArgument, std::string(kOp) + ": " + msg);
}

TensorView rows(const TensorView& t, int64_t n) { return t.narrow(0, 0, n); }

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

// A checkpoint tensor as `dtype`, in `staging` (bytes), optionally mapped element by element.
// Same dtype and no map: the bytes as stored.
template <class Map>
void convert(const TensorView& src, DType dtype, std::vector<char>& staging, const Map& map) {
  const int64_t n = src.numel();
  staging.resize(static_cast<size_t>(n * dtypeBytes(dtype)));
  const TensorView dst = TensorView::contiguous(staging.data(), dtype, {n}, DeviceKind::CPU);
  for (int64_t i = 0; i < n; ++i) reference::storeElement(dst, i, map(reference::loadElement(src, i)));
}

// Records `dst` (dtype, shape) in the arena and what fills it from `src`.
struct Upload {
  const TensorView* src;
  TensorView* dst;
  bool negExp;  // A = -exp(A_log)
};

void uploadAll(const std::vector<Upload>& ups) {
  std::vector<char> staging;
  for (const Upload& u : ups) {
    if (!u.src->defined()) continue;
    const size_t bytes = static_cast<size_t>(u.dst->numel() * dtypeBytes(u.dst->dtype));
    const void* from = u.src->data;
    if (u.negExp || u.src->dtype != u.dst->dtype) {
      if (u.negExp)
        convert(*u.src, u.dst->dtype, staging, [](double v) { return -std::exp(v); });
      else
        convert(*u.src, u.dst->dtype, staging, [](double v) { return v; });
      from = staging.data();
    }
    driver::check(driver::api().cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(u.dst->data), from, bytes),
                  "Mamba2Model: uploading weights");
  }
}

// The model's sizes from a checkpoint's config. A clamp of [0, inf) changes nothing after the
// softplus, so it becomes "no clamp" (the kernels then skip it).
Mamba2ModelConfig modelConfig(const model::Mamba2Config& c) {
  Mamba2ModelConfig m;
  Mamba2Dims& d = m.dims;
  d.hidden = c.hidden_size;
  d.heads = c.num_heads;
  d.head_dim = c.head_dim;
  d.state = c.state_size;
  d.groups = c.n_groups;
  d.conv_width = c.conv_kernel;
  d.chunk_size = static_cast<int>(c.chunk_size);
  d.norm_eps = static_cast<float>(c.norm_eps);
  d.norm_before_gate = c.norm_before_gate;
  if (!(c.dt_min <= 0 && std::isinf(c.dt_max))) {
    d.dt_min = static_cast<float>(c.dt_min);
    d.dt_max = static_cast<float>(c.dt_max);
  }
  m.layers = c.num_layers;
  m.vocab = c.vocab_rows;
  m.tied_embeddings = c.tie_embeddings;
  return m;
}

// Places every weight in one allocation, in the model's dtype (A, D and dt_bias in fp32), and
// uploads them. The conv weight (convDim, 1, W) becomes (convDim, W): the same bytes.
void uploadWeights(const model::Mamba2Weights& h, DType act, Mamba2Model::Impl& m) {
  const Mamba2Dims& d = m.cfg.dims;
  DeviceArena arena;
  std::vector<Upload> ups;
  auto add = [&](const TensorView& src, TensorView& dst, DType t, std::initializer_list<int64_t> shape,
                 bool negExp = false) {
    if (!src.defined()) return;
    arena.add(dst, t, shape);
    ups.push_back({&src, &dst, negExp});
  };
  const int64_t L = m.cfg.layers;
  m.layers.resize(L);
  m.layerNorms.resize(L);
  for (int64_t l = 0; l < L; ++l) {
    const model::Mamba2LayerWeights& s = h.layers[l];
    Mamba2LayerWeights& w = m.layers[l];
    add(s.norm, m.layerNorms[l], act, {d.hidden});
    add(s.in_proj_weight, w.in_proj, act, {d.inProjRows(), d.hidden});
    add(s.in_proj_bias, w.in_proj_bias, act, {d.inProjRows()});
    add(s.conv1d_weight, w.conv_weight, act, {d.convDim(), d.conv_width});
    add(s.conv1d_bias, w.conv_bias, act, {d.convDim()});
    add(s.dt_bias, w.dt_bias, DType::F32, {d.heads});
    add(s.A_log, w.A, DType::F32, {d.heads}, true);
    if (s.D.numel() == d.heads)
      add(s.D, w.D, DType::F32, {d.heads});
    else
      add(s.D, w.D, DType::F32, {d.heads, d.head_dim});
    add(s.gated_norm, w.norm_weight, act, {d.dInner()});
    add(s.out_proj_weight, w.out_proj, act, {d.hidden, d.dInner()});
    add(s.out_proj_bias, w.out_proj_bias, act, {d.hidden});
  }
  add(h.embedding, m.embedding, act, {m.cfg.vocab, d.hidden});
  add(h.norm_f, m.normF, act, {d.hidden});
  if (!m.cfg.tied_embeddings) add(h.lm_head, m.lmHead, act, {m.cfg.vocab, d.hidden});
  m.weightMem = arena.allocate();
  if (m.cfg.tied_embeddings) m.lmHead = m.embedding;
  uploadAll(ups);
}

// The rows of the decode/prefill buffers: a prefill of max_prefill_tokens or a step of max_batch.
int64_t bufferRows(const Mamba2ModelOptions& o) { return std::max(o.max_prefill_tokens, o.max_batch); }

void placeActivations(Mamba2Model::Impl& m, DeviceArena& a) {
  const Mamba2Dims& d = m.cfg.dims;
  const int64_t R = bufferRows(m.opt), S = m.opt.max_batch;
  a.add(m.hidden, m.opt.dtype, {R, d.hidden});
  a.add(m.residual, DType::F32, {R, d.hidden});
  a.add(m.normed, m.opt.dtype, {R, d.hidden});
  a.add(m.mixed, m.opt.dtype, {R, d.hidden});
  a.add(m.ids, DType::I32, {R});
  a.add(m.cu, DType::I32, {S + 1});
  a.add(m.slots, DType::I32, {S});
  a.add(m.last, DType::I32, {S});
  a.add(m.gathered, m.opt.dtype, {S, d.hidden});
  a.add(m.gatheredResidual, DType::F32, {S, d.hidden});
  a.add(m.gatheredNormed, m.opt.dtype, {S, d.hidden});
}

void placeStates(Mamba2Model::Impl& m, DeviceArena& a) {
  const Mamba2Dims& d = m.cfg.dims;
  const int64_t S = m.opt.max_batch;
  m.states.resize(m.cfg.layers);
  for (Mamba2LayerState& s : m.states) {
    a.add(s.conv_state, m.opt.dtype, {S, d.convDim(), d.conv_width - 1});
    a.add(s.ssm_state, m.opt.state_dtype, {S, d.heads, d.head_dim, d.state});
  }
}

// The layer workspace for the largest prefill and decode calls, and the lm_head GEMM's.
int64_t workspaceFloats(const Mamba2Model::Impl& m) {
  const Mamba2Dims& d = m.cfg.dims;
  const int64_t T = m.opt.max_prefill_tokens, S = m.opt.max_batch;
  Mamba2LayerArgs pre{rows(m.normed, T), rows(m.mixed, T), m.cu, {}, m.slots, {}};
  Mamba2LayerArgs dec{rows(m.normed, S), rows(m.mixed, S), {}, {}, m.slots, {}};
  LinearArgs lm;
  lm.x = rows(m.normed, S);
  lm.weight = m.lmHead;
  lm.y = TensorView::contiguous(m.residual.data, DType::F32, {S, m.cfg.vocab}, DeviceKind::CUDA, m.residual.deviceId);
  const int64_t need = std::max(mamba2_layer_workspace_size(d, m.layers[0], m.states[0], pre, true),
                                mamba2_layer_workspace_size(d, m.layers[0], m.states[0], dec, false));
  return std::max(need, linear_workspace_size(lm));
}

}  // namespace

void Mamba2Model::Impl::forwardLayers(int64_t T, bool prefill, const TensorView& tokenIds, const TensorView& cuSeqlens,
                                      const TensorView& slotIds, Stream s) const {
  EmbeddingArgs e;
  e.ids = tokenIds;
  e.table = embedding;
  e.out = rows(hidden, T);
  ssmjit::embedding(e, s);
  for (size_t l = 0; l < layers.size(); ++l) {
    RmsNormArgs n;
    n.x = rows(l == 0 ? hidden : mixed, T);
    if (l > 0) n.residual = rows(residual, T);
    n.residual_out = rows(residual, T);
    n.weight = layerNorms[l];
    n.out = rows(normed, T);
    n.eps = cfg.dims.norm_eps;
    rms_norm(n, s);
    Mamba2LayerArgs a{rows(normed, T), rows(mixed, T), cuSeqlens, {}, slotIds, workspace};
    if (prefill)
      mamba2_layer_prefill(cfg.dims, layers[l], states[l], a, s);
    else
      mamba2_layer_decode(cfg.dims, layers[l], states[l], a, s);
  }
}

// logits = lm_head(rms_norm(x + res) * norm_f), in fp32.
void Mamba2Model::Impl::logits(const TensorView& x, const TensorView& res, const TensorView& normedOut,
                               const TensorView& out, Stream s) const {
  RmsNormArgs n;
  n.x = x;
  n.residual = res;
  n.weight = normF;
  n.out = normedOut;
  n.eps = cfg.dims.norm_eps;
  rms_norm(n, s);
  LinearArgs lm;
  lm.x = normedOut;
  lm.weight = lmHead;
  lm.y = out;
  lm.workspace = workspace;
  linear(lm, s);
}

Mamba2Model::Mamba2Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Mamba2Model::~Mamba2Model() = default;
const Mamba2ModelConfig& Mamba2Model::config() const { return impl_->cfg; }
const Mamba2ModelOptions& Mamba2Model::options() const { return impl_->opt; }

std::unique_ptr<Mamba2Model> Mamba2Model::load(const std::string& dir, const Mamba2ModelOptions& options) {
  if (options.max_batch < 1) fail("options.max_batch is " + std::to_string(options.max_batch) + ", expected >= 1");
  if (options.max_prefill_tokens < 1)
    fail("options.max_prefill_tokens is " + std::to_string(options.max_prefill_tokens) + ", expected >= 1");
  if (options.dtype == DType::I32 || options.dtype == DType::I64)
    fail(std::string("options.dtype is ") + dtypeName(options.dtype) + ", expected float32, bfloat16 or float16");
  const model::Mamba2Checkpoint ckpt(dir);
  auto m = std::make_unique<Impl>();
  m->cfg = modelConfig(ckpt.config);
  m->opt = options;
  driver::ensureContext();
  uploadWeights(ckpt.weights, options.dtype, *m);

  DeviceArena states, acts;
  placeStates(*m, states);
  m->stateMem = states.allocate();
  m->stateMem.fill(0);
  placeActivations(*m, acts);
  m->actMem = acts.allocate();
  DeviceArena work;
  work.add(m->workspace, DType::F32, {workspaceFloats(*m)});
  m->workMem = work.allocate();
  return std::unique_ptr<Mamba2Model>(new Mamba2Model(std::move(m)));
}

void Mamba2Model::prefill(const std::vector<std::vector<int32_t>>& prompts, const std::vector<int32_t>& slots,
                          const TensorView& logitsOut, Stream stream) {
  Impl& m = *impl_;
  const auto nseq = static_cast<int64_t>(prompts.size());
  if (nseq < 1 || nseq > m.opt.max_batch)
    fail("prefill got " + std::to_string(nseq) + " prompts, expected 1 to max_batch (" +
         std::to_string(m.opt.max_batch) + ")");
  if (static_cast<int64_t>(slots.size()) != nseq)
    fail("prefill got " + std::to_string(slots.size()) + " slots for " + std::to_string(nseq) + " prompts");
  std::vector<int32_t> ids, cu{0}, last;
  std::vector<bool> used(m.opt.max_batch, false);
  for (int64_t i = 0; i < nseq; ++i) {
    if (prompts[i].empty()) fail("prompt " + std::to_string(i) + " is empty, expected at least one token");
    const int32_t s = slots[i];
    if (s < 0 || s >= m.opt.max_batch || used[s])
      fail("slots[" + std::to_string(i) + "] is " + std::to_string(s) + ", expected a distinct slot in [0, " +
           std::to_string(m.opt.max_batch) + ")");
    used[s] = true;
    for (int32_t t : prompts[i]) {
      if (t < 0 || t >= m.cfg.vocab)
        fail("prompt " + std::to_string(i) + " holds token " + std::to_string(t) + ", expected [0, " +
             std::to_string(m.cfg.vocab) + ")");
      ids.push_back(t);
    }
    cu.push_back(static_cast<int32_t>(ids.size()));
    last.push_back(cu.back() - 1);
  }
  const auto T = static_cast<int64_t>(ids.size());
  if (T > m.opt.max_prefill_tokens)
    fail("prefill got " + std::to_string(T) + " tokens, expected at most max_prefill_tokens (" +
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
  const TensorView cuView = rows(m.cu, nseq + 1), slotView = rows(m.slots, nseq), lastView = rows(m.last, nseq);
  m.forwardLayers(T, true, rows(m.ids, T), cuView, slotView, stream);
  // Only each prompt's last token reaches the head: gather its rows (the embedding op indexes
  // any table), then the final norm and lm_head on nseq rows.
  EmbeddingArgs g;
  g.ids = lastView;
  g.table = rows(m.mixed, T);
  g.out = rows(m.gathered, nseq);
  embedding(g, stream);
  g.table = rows(m.residual, T);
  g.out = rows(m.gatheredResidual, nseq);
  embedding(g, stream);
  m.logits(rows(m.gathered, nseq), rows(m.gatheredResidual, nseq), rows(m.gatheredNormed, nseq), logitsOut, stream);
}

void Mamba2Model::decode(const TensorView& tokenIds, const TensorView& slots, const TensorView& logitsOut,
                         Stream stream) {
  Impl& m = *impl_;
  const int64_t B = tokenIds.ndim == 1 ? tokenIds.shape[0] : -1;
  if (B < 1 || B > m.opt.max_batch)
    fail("decode: token_ids has shape " + tokenIds.shapeString() + ", expected (B,) with 1 <= B <= max_batch (" +
         std::to_string(m.opt.max_batch) + ")");
  const detail::Dim expect[] = {{B, "batch"}, {m.cfg.vocab, "vocab"}};
  checkLogits("decode", logitsOut, expect);
  m.forwardLayers(B, false, tokenIds, {}, slots, stream);
  m.logits(rows(m.mixed, B), rows(m.residual, B), rows(m.normed, B), logitsOut, stream);
}

}  // namespace ssmjit

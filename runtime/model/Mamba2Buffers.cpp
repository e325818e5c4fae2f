// The Mamba-2 model's device buffers (Mamba2ModelImpl.h): weights converted from the checkpoint,
// per-slot states, activations and the workspace, each group carved from one allocation.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/Driver.h"
#include "runtime/model/Mamba2Kernels.h"
#include "runtime/model/Mamba2ModelImpl.h"
#include "runtime/reference/ElementAccess.h"

namespace ssmjit {

using detail::modelArgError;
using detail::rows;

namespace {

// A checkpoint tensor as `dtype`, in `staging` (bytes), optionally mapped element by element.
// Same dtype and no map: the bytes as stored.
template <class Map>
void convert(const TensorView& src, DType dtype, std::vector<char>& staging, const Map& map) {
  const int64_t n = src.numel();
  staging.resize(static_cast<size_t>(n * dtypeBytes(dtype)));
  const TensorView dst = TensorView::contiguous(staging.data(), dtype, {n}, DeviceKind::CPU);
  for (int64_t i = 0; i < n; ++i) reference::storeElement(dst, i, map(reference::loadElement(src, i)));
}


// Rows of a step: max_batch sequences of one token, or of max_draft_tokens + 1 in a verify.
int64_t stepRows(const Mamba2ModelOptions& o) { return o.max_batch * (o.max_draft_tokens + 1); }
// The rows of the activation buffers: a prefill of max_prefill_tokens or a step.
int64_t bufferRows(const Mamba2ModelOptions& o) { return std::max(o.max_prefill_tokens, stepRows(o)); }

}  // namespace

void detail::checkModelOptions(const Mamba2ModelOptions& o) {
  if (o.max_batch < 1) modelArgError("options.max_batch is " + std::to_string(o.max_batch) + ", expected >= 1");
  if (o.max_prefill_tokens < 1)
    modelArgError("options.max_prefill_tokens is " + std::to_string(o.max_prefill_tokens) + ", expected >= 1");
  for (auto [name, t] : {std::pair{"dtype", o.dtype}, std::pair{"state_dtype", o.state_dtype}})
    if (t == DType::I32 || t == DType::I64)
      modelArgError(std::string("options.") + name + " is " + dtypeName(t) + ", expected float32, bfloat16 or float16");
  if (o.max_draft_tokens < 0 || o.max_draft_tokens > kMaxTokens - 1)
    modelArgError("options.max_draft_tokens is " + std::to_string(o.max_draft_tokens) + ", expected 0 to kMaxTokens - 1 (" +
         std::to_string(kMaxTokens - 1) + ")");
}

void detail::uploadAll(const std::vector<Upload>& ups) {
  std::vector<char> staging;
  for (const Upload& u : ups) {
    if (!u.src->defined()) continue;
    const size_t bytes = static_cast<size_t>(u.dst->numel() * dtypeBytes(u.dst->dtype));
    const void* from = u.src->data;
    if (u.slice) {
      double (*negExp)(double) = [](double v) { return -std::exp(v); };
      model::sliceTensor(*u.src, *u.slice, u.dst->dtype, staging, u.negExp ? negExp : nullptr);
      from = staging.data();
    } else if (u.negExp || u.src->dtype != u.dst->dtype) {
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


// A clamp of [0, inf) changes nothing after the softplus, so it becomes "no clamp" (the kernels
// then skip it).
Mamba2ModelConfig detail::mamba2ModelConfig(const model::Mamba2Config& c) {
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

std::vector<detail::Upload> detail::placeWeights(const model::Mamba2Weights& h, DType act, Mamba2Model::Impl& m, DeviceArena& arena) {
  const Communicator* tp = m.opt.tensor_parallel;
  m.shard = model::planMamba2Shard(m.cfg.dims, tp ? tp->rank() : 0, tp ? tp->size() : m.listedRanks);
  const model::Mamba2LayerShard& s0 = m.shard;
  const bool sharded = s0.ranks > 1;
  const Mamba2Dims& d = s0.local;
  std::vector<Upload> ups;
  auto add = [&](const TensorView& src, TensorView& dst, DType t, std::initializer_list<int64_t> shape,
                 bool negExp = false, const model::TensorSlice* slice = nullptr) {
    if (!src.defined()) return;
    arena.add(dst, t, shape);
    ups.push_back({&src, &dst, negExp, sharded ? slice : nullptr});
  };
  const int64_t L = m.cfg.layers;
  m.layers.resize(L);
  m.layerNorms.resize(L);
  for (int64_t l = 0; l < L; ++l) {
    const model::Mamba2LayerWeights& s = h.layers[l];
    Mamba2LayerWeights& w = m.layers[l];
    add(s.norm, m.layerNorms[l], act, {d.hidden});
    add(s.in_proj_weight, w.in_proj, act, {d.inProjRows(), d.hidden}, false, &s0.inProj);
    add(s.in_proj_bias, w.in_proj_bias, act, {d.inProjRows()}, false, &s0.inProj);
    add(s.conv1d_weight, w.conv_weight, act, {d.convDim(), d.conv_width}, false, &s0.conv);
    add(s.conv1d_bias, w.conv_bias, act, {d.convDim()}, false, &s0.conv);
    add(s.dt_bias, w.dt_bias, DType::F32, {d.heads}, false, &s0.heads);
    add(s.A_log, w.A, DType::F32, {d.heads}, true, &s0.heads);
    if (s.D.numel() == m.cfg.dims.heads)
      add(s.D, w.D, DType::F32, {d.heads}, false, &s0.heads);
    else
      add(s.D, w.D, DType::F32, {d.heads, d.head_dim}, false, &s0.channels);
    add(s.gated_norm, w.norm_weight, act, {d.dInner()}, false, &s0.channels);
    add(s.out_proj_weight, w.out_proj, act, {d.hidden, d.dInner()}, false, &s0.outProj);
    if (s0.outProjBias) add(s.out_proj_bias, w.out_proj_bias, act, {d.hidden});
  }
  add(h.embedding, m.embedding, act, {m.cfg.vocab, d.hidden});
  add(h.norm_f, m.normF, act, {d.hidden});
  if (!m.cfg.tied_embeddings) add(h.lm_head, m.lmHead, act, {m.cfg.vocab, d.hidden});
  return ups;
}


void detail::placeActivations(Mamba2Model::Impl& m, DeviceArena& a) {
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

void detail::placeStates(Mamba2Model::Impl& m, DeviceArena& a) {
  const Mamba2Dims& d = m.shard.local;
  const int64_t S = m.opt.max_batch;
  m.states.resize(m.cfg.layers);
  for (Mamba2LayerState& s : m.states) {
    a.add(s.conv_state, m.opt.dtype, {S, d.convDim(), d.conv_width - 1});
    a.add(s.ssm_state, m.opt.state_dtype, {S, d.heads, d.head_dim, d.state});
    if (const int64_t Lc = m.cacheDepth(); Lc > 0) {
      a.add(s.xbc_cache, m.opt.dtype, {S, Lc, d.convDim()});
      a.add(s.dt_cache, m.opt.dtype, {S, Lc, d.heads});
      a.add(s.cached_tokens, DType::I32, {S});
      a.add(s.arrivals, DType::I32, {S});
    }
  }
}

int64_t detail::workspaceFloats(const Mamba2Model::Impl& m) {
  const Mamba2Dims& d = m.shard.local;
  const int64_t T = m.opt.max_prefill_tokens, S = m.opt.max_batch, R = stepRows(m.opt);
  Mamba2LayerArgs pre{rows(m.normed, T), rows(m.mixed, T), m.cu, {}, m.slots, {}};
  Mamba2LayerArgs dec{rows(m.normed, S), rows(m.mixed, S), {}, {}, m.slots, {}};
  LinearArgs lm;
  lm.x = rows(m.normed, R);
  lm.weight = m.lmHead;
  // Sizing only: an address apart from every buffer (the logits of R rows can outgrow residual's).
  void* const apart = reinterpret_cast<void*>(uintptr_t{1} << 46);
  lm.y = TensorView::contiguous(apart, DType::F32, {R, m.cfg.vocab}, DeviceKind::CUDA, m.residual.deviceId);
  int64_t need = std::max(mamba2_layer_workspace_size(d, m.layers[0], m.states[0], pre, Mamba2LayerMode::Prefill),
                          mamba2_layer_workspace_size(d, m.layers[0], m.states[0], dec, Mamba2LayerMode::Decode));
  if (m.cacheDepth() > 0) {
    Mamba2LayerArgs ver{rows(m.normed, R), rows(m.mixed, R), {}, {}, m.slots, {}, m.slots, m.cacheDepth()};
    need = std::max(need, mamba2_layer_workspace_size(d, m.layers[0], m.states[0], ver, Mamba2LayerMode::Verify));
  }
  need = std::max(need, linear_workspace_size(lm));
  lm.x = rows(lm.x, S);
  lm.y = rows(lm.y, S);
  return std::max(need, linear_workspace_size(lm));
}

}  // namespace ssmjit

// Float64 reference of the Mamba-2 layer and model (see Mamba2ModelRef.h): token by token, each
// sequence's conv window and SSM state carried in double, so that a prefill and the same tokens
// fed as decode steps run the same arithmetic.
#include "runtime/reference/Mamba2ModelRef.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/reference/ElementAccess.h"
#include "runtime/reference/Mamba2RefParts.h"
#include "runtime/reference/RefHelpers.h"
#include "ssmjit/error.h"

namespace ssmjit::reference {

using model::Mamba2Config;
using model::Mamba2LayerWeights;

namespace mamba2_parts {

HeadDt headDt(const Mamba2Config& c, const Mamba2LayerWeights& w, int64_t h, double dt) {
  const double raw = dt + el(w.dt_bias, {h});
  const double sp = raw > 20.0 ? raw : std::log1p(std::exp(raw));
  return {raw, sp, std::min(std::max(sp, c.dt_min), c.dt_max), sp < c.dt_min || sp > c.dt_max};
}

void linear(const TensorView& W, const TensorView& b, const double* x, double* y) {
  for (int64_t r = 0; r < W.shape[0]; ++r) {
    double acc = b.defined() ? el(b, {r}) : 0.0;
    for (int64_t c = 0; c < W.shape[1]; ++c) acc += el(W, {r, c}) * x[c];
    y[r] = acc;
  }
}

void rmsNorm(const double* v, int64_t n, const TensorView& w, int64_t w0, double eps, double* out) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += v[i] * v[i];
  const double r = 1.0 / std::sqrt(ss / double(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = v[i] * r * el(w, {w0 + i});
}

void checkSeqlens(const char* op, const std::vector<int64_t>& cu, int64_t T) {
  if (cu.empty() || cu.front() != 0 || cu.back() != T)
    invalid(op, "cu_seqlens must start at 0 and end at the token count " + std::to_string(T));
  for (size_t i = 1; i < cu.size(); ++i)
    if (cu[i] < cu[i - 1])
      invalid(op, "cu_seqlens[" + std::to_string(i) + "] = " + std::to_string(cu[i]) + " is below cu_seqlens[" +
                      std::to_string(i - 1) + "] = " + std::to_string(cu[i - 1]));
}

int64_t checkRow(const char* op, const Mamba2Config& c, const std::vector<double>& hidden,
                 const std::vector<int64_t>& cu, std::vector<Mamba2SequenceState>& states, const char* statesArg) {
  const int64_t D = c.hidden_size;
  if (hidden.size() % at(D) != 0)
    invalid(op, "hidden has " + std::to_string(hidden.size()) + " values, expected tokens x " + std::to_string(D));
  const int64_t T = int64_t(hidden.size()) / D;
  checkSeqlens(op, cu, T);
  const size_t nseq = cu.size() - 1;
  if (states.size() != nseq)
    invalid(op, std::string(statesArg) + " has " + std::to_string(states.size()) +
                    " entries, expected one per sequence (" + std::to_string(nseq) + ")");
  for (size_t i = 0; i < nseq; ++i) {
    prepareState(op, statesArg, "conv", states[i].conv, at(c.conv_dim() * (c.conv_kernel - 1)), i);
    prepareState(op, statesArg, "ssm", states[i].ssm, at(c.num_heads * c.head_dim * c.state_size), i);
  }
  return T;
}

void prepareState(const char* op, const char* arg, const char* what, std::vector<double>& s, size_t n, size_t seq) {
  if (s.empty()) s.assign(n, 0.0);
  if (s.size() != n)
    invalid(op, std::string(arg) + "[" + std::to_string(seq) + "]." + what + " has " + std::to_string(s.size()) +
                    " values, expected " + std::to_string(n));
}

namespace {

// The depthwise causal conv and its SiLU over the window (the state's W-1 columns, then xbc);
// the window then slides: the oldest column out, this token in.
void convToken(const Mamba2Config& c, const Mamba2LayerWeights& w, const double* xbc, double* state, double* acc,
               double* post) {
  const int64_t K = c.conv_kernel - 1;
  for (int64_t ch = 0; ch < c.conv_dim(); ++ch) {
    double* win = &state[at(ch * K)];
    double a = w.conv1d_bias.defined() ? el(w.conv1d_bias, {ch}) : 0.0;
    for (int64_t k = 0; k < K; ++k) a += el(w.conv1d_weight, {ch, 0, k}) * win[k];
    a += el(w.conv1d_weight, {ch, 0, K}) * xbc[ch];
    acc[ch] = a;
    post[ch] = silu(a);
    if (K > 0) {
      std::rotate(win, win + 1, win + K);
      win[K - 1] = xbc[ch];
    }
  }
}

// The SSM's step on the state S (H, P, N) from post = [x | B | C] and the in_proj dt: writes y.
void ssmToken(const Mamba2Config& c, const Mamba2LayerWeights& w, const double* post, const double* dt, double* S,
              double* y) {
  const int64_t H = c.num_heads, P = c.head_dim, N = c.state_size, G = c.n_groups;
  const double* x = post;
  const double* B = x + c.d_inner();
  const double* C = B + G * N;
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = h / (H / G);
    const double dtv = headDt(c, w, h, dt[h]).value;
    const double decay = std::exp(-std::exp(el(w.A_log, {h})) * dtv);
    for (int64_t p = 0; p < P; ++p) {
      const double xv = x[h * P + p];
      double* Sp = &S[at((h * P + p) * N)];
      double yv = el(w.D, {c.d_has_hdim ? h * P + p : h}) * xv;
      for (int64_t n = 0; n < N; ++n) {
        Sp[n] = decay * Sp[n] + dtv * xv * B[g * N + n];
        yv += C[g * N + n] * Sp[n];
      }
      y[h * P + p] = yv;
    }
  }
}

// The gated RMSNorm (see Mamba2ModelRef.h), normed from y and the gate z.
void gatedNorm(const Mamba2Config& c, const TensorView& weight, const double* y, const double* z, double* normed) {
  const int64_t E = c.d_inner(), gs = E / c.n_groups;
  for (int64_t i = 0; i < E; ++i) normed[i] = c.norm_before_gate ? y[i] : y[i] * silu(z[i]);
  for (int64_t g = 0; g < c.n_groups; ++g) rmsNorm(&normed[g * gs], gs, weight, g * gs, c.norm_eps, &normed[g * gs]);
  if (c.norm_before_gate)
    for (int64_t i = 0; i < E; ++i) normed[i] *= silu(z[i]);
}

}  // namespace

void layerToken(const Mamba2Config& c, const Mamba2LayerWeights& w, const double* u, Mamba2SequenceState& s,
                const TokenValues& v, double* out) {
  linear(w.in_proj_weight, w.in_proj_bias, u, v.proj);
  const double* z = v.proj;
  const double* xbc = z + c.d_inner();
  convToken(c, w, xbc, s.conv.data(), v.acc, v.post);
  ssmToken(c, w, v.post, xbc + c.conv_dim(), s.ssm.data(), v.y);
  gatedNorm(c, w.gated_norm, v.y, z, v.normed);
  linear(w.out_proj_weight, w.out_proj_bias, v.normed, out);
}

}  // namespace mamba2_parts

using namespace mamba2_parts;

std::vector<double> mamba2_layer(const Mamba2Config& cfg, const Mamba2LayerWeights& w,
                                 const std::vector<double>& hidden, const std::vector<int64_t>& cu_seqlens,
                                 std::vector<Mamba2SequenceState>& states) {
  constexpr const char* kOp = "reference::mamba2_layer";
  checkRow(kOp, cfg, hidden, cu_seqlens, states, "states");
  const int64_t D = cfg.hidden_size;
  const size_t nseq = cu_seqlens.size() - 1;
  std::vector<double> out(hidden.size());
  std::vector<double> proj(at(cfg.in_proj_rows())), acc(at(cfg.conv_dim())), post(acc.size()), y(at(cfg.d_inner())),
      normed(y.size());
  const TokenValues v{proj.data(), acc.data(), post.data(), y.data(), normed.data()};
  for (size_t i = 0; i < nseq; ++i)
    for (int64_t t = cu_seqlens[i]; t < cu_seqlens[i + 1]; ++t)
      layerToken(cfg, w, &hidden[at(t * D)], states[i], v, &out[at(t * D)]);
  return out;
}

std::vector<double> mamba2_model(const Mamba2Config& cfg, const model::Mamba2Weights& w,
                                 const std::vector<int64_t>& tokens, const std::vector<int64_t>& cu_seqlens,
                                 std::vector<std::vector<Mamba2SequenceState>>& states) {
  constexpr const char* kOp = "reference::mamba2_model";
  const int64_t T = int64_t(tokens.size()), D = cfg.hidden_size, V = cfg.vocab_rows;
  checkSeqlens(kOp, cu_seqlens, T);
  if (states.empty()) states.resize(at(cfg.num_layers), std::vector<Mamba2SequenceState>(cu_seqlens.size() - 1));
  if (states.size() != at(cfg.num_layers))
    invalid(kOp, "states has " + std::to_string(states.size()) + " layers, expected " + std::to_string(cfg.num_layers));

  std::vector<double> h(at(T * D)), residual(at(T * D), 0.0), normed(at(T * D));
  for (int64_t t = 0; t < T; ++t) {
    const int64_t tok = tokens[at(t)];
    if (tok < 0 || tok >= V)
      invalid(kOp, "tokens[" + std::to_string(t) + "] = " + std::to_string(tok) + ", expected [0, " +
                       std::to_string(V) + ")");
    for (int64_t d = 0; d < D; ++d) h[at(t * D + d)] = el(w.embedding, {tok, d});
  }
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    const model::Mamba2LayerWeights& lw = w.layers[at(l)];
    for (size_t i = 0; i < h.size(); ++i) residual[i] += h[i];
    for (int64_t t = 0; t < T; ++t) rmsNorm(&residual[at(t * D)], D, lw.norm, 0, cfg.norm_eps, &normed[at(t * D)]);
    h = mamba2_layer(cfg, lw, normed, cu_seqlens, states[at(l)]);
  }
  for (size_t i = 0; i < h.size(); ++i) residual[i] += h[i];
  std::vector<double> logits(at(T * V));
  for (int64_t t = 0; t < T; ++t) {
    rmsNorm(&residual[at(t * D)], D, w.norm_f, 0, cfg.norm_eps, &normed[at(t * D)]);
    linear(w.lm_head, TensorView{}, &normed[at(t * D)], &logits[at(t * V)]);
  }
  return logits;
}

std::vector<double> mamba2_model_verify(const Mamba2Config& cfg, const model::Mamba2Weights& w,
                                        const std::vector<int64_t>& tokens, int64_t L,
                                        const std::vector<std::vector<Mamba2SequenceState>>& states) {
  constexpr const char* kOp = "reference::mamba2_model_verify";
  if (states.size() != at(cfg.num_layers))
    invalid(kOp, "states has " + std::to_string(states.size()) + " layers, expected " + std::to_string(cfg.num_layers));
  const int64_t B = int64_t(states[0].size());
  if (L < 1 || int64_t(tokens.size()) != B * L)
    invalid(kOp, "tokens has " + std::to_string(tokens.size()) + " values for L = " + std::to_string(L) +
                     ", expected L >= 1 tokens for each of the states' " + std::to_string(B) + " sequences");
  std::vector<int64_t> cu(at(B + 1));
  for (int64_t b = 0; b <= B; ++b) cu[at(b)] = b * L;
  std::vector<std::vector<Mamba2SequenceState>> scratch = states;
  return mamba2_model(cfg, w, tokens, cu, scratch);
}

}  // namespace ssmjit::reference

// Float64 reference of the Mamba-2 layer and model (see Mamba2ModelRef.h): token by token, each
// sequence's conv window and SSM state carried in double, so that a prefill and the same tokens
// fed as decode steps run the same arithmetic.
#include "runtime/reference/Mamba2ModelRef.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/reference/ElementAccess.h"
#include "runtime/reference/RefHelpers.h"
#include "ssmjit/error.h"

namespace ssmjit::reference {

namespace {

using model::Mamba2Config;
using model::Mamba2LayerWeights;

double silu(double v) { return v / (1.0 + std::exp(-v)); }

// y = W x (+ b) for W (rows, cols).
void linear(const TensorView& W, const TensorView& b, const double* x, double* y) {
  for (int64_t r = 0; r < W.shape[0]; ++r) {
    double acc = b.defined() ? el(b, {r}) : 0.0;
    for (int64_t c = 0; c < W.shape[1]; ++c) acc += el(W, {r, c}) * x[c];
    y[r] = acc;
  }
}

// out = v / sqrt(mean(v^2) + eps) * w[w0 + i] over n values.
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

// A state vector of `n` values: zeros when empty, else exactly n.
void prepareState(const char* what, std::vector<double>& s, size_t n, size_t seq) {
  if (s.empty()) s.assign(n, 0.0);
  if (s.size() != n)
    invalid("reference::mamba2_layer", std::string("states[") + std::to_string(seq) + "]." + what + " has " +
                                           std::to_string(s.size()) + " values, expected " + std::to_string(n));
}

// One layer's arithmetic for one token at a time.
class LayerStep {
 public:
  LayerStep(const Mamba2Config& c, const Mamba2LayerWeights& w)
      : c_(c), w_(w), H_(c.num_heads), P_(c.head_dim), N_(c.state_size), G_(c.n_groups), K_(c.conv_kernel - 1),
        E_(c.d_inner()), Dc_(c.conv_dim()), proj_(at(c.in_proj_rows())), post_(at(Dc_)), y_(at(E_)), normed_(at(E_)) {}

  // u (hidden) -> out (hidden), updating state s.
  void token(const double* u, Mamba2SequenceState& s, double* out) {
    linear(w_.in_proj_weight, w_.in_proj_bias, u, proj_.data());
    const double* z = proj_.data();
    const double* xbc = z + E_;
    const double* dt = xbc + Dc_;
    for (int64_t ch = 0; ch < Dc_; ++ch) {
      double* win = &s.conv[at(ch * K_)];
      double acc = w_.conv1d_bias.defined() ? el(w_.conv1d_bias, {ch}) : 0.0;
      for (int64_t k = 0; k < K_; ++k) acc += el(w_.conv1d_weight, {ch, 0, k}) * win[k];
      acc += el(w_.conv1d_weight, {ch, 0, K_}) * xbc[ch];
      post_[at(ch)] = silu(acc);
      if (K_ > 0) {  // the window slides: the oldest column out, this token in
        std::rotate(win, win + 1, win + K_);
        win[K_ - 1] = xbc[ch];
      }
    }
    const double* x = post_.data();
    const double* B = x + E_;
    const double* C = B + G_ * N_;
    for (int64_t h = 0; h < H_; ++h) {
      const int64_t g = h / (H_ / G_);
      double v = dt[h] + el(w_.dt_bias, {h});
      v = v > 20.0 ? v : std::log1p(std::exp(v));
      const double dtv = std::min(std::max(v, c_.dt_min), c_.dt_max);
      const double decay = std::exp(-std::exp(el(w_.A_log, {h})) * dtv);
      for (int64_t p = 0; p < P_; ++p) {
        const double xv = x[h * P_ + p];
        double* S = &s.ssm[at((h * P_ + p) * N_)];
        double y = el(w_.D, {c_.d_has_hdim ? h * P_ + p : h}) * xv;
        for (int64_t n = 0; n < N_; ++n) {
          S[n] = decay * S[n] + dtv * xv * B[g * N_ + n];
          y += C[g * N_ + n] * S[n];
        }
        y_[at(h * P_ + p)] = y;
      }
    }
    gatedNorm(z);
    linear(w_.out_proj_weight, w_.out_proj_bias, normed_.data(), out);
  }

 private:
  void gatedNorm(const double* z) {
    const int64_t gs = E_ / G_;
    if (!c_.norm_before_gate)
      for (int64_t i = 0; i < E_; ++i) y_[at(i)] *= silu(z[i]);
    for (int64_t g = 0; g < G_; ++g)
      rmsNorm(&y_[at(g * gs)], gs, w_.gated_norm, g * gs, c_.norm_eps, &normed_[at(g * gs)]);
    if (c_.norm_before_gate)
      for (int64_t i = 0; i < E_; ++i) normed_[at(i)] *= silu(z[i]);
  }

  const Mamba2Config& c_;
  const Mamba2LayerWeights& w_;
  const int64_t H_, P_, N_, G_, K_, E_, Dc_;
  std::vector<double> proj_, post_, y_, normed_;
};

}  // namespace

std::vector<double> mamba2_layer(const Mamba2Config& cfg, const Mamba2LayerWeights& w,
                                 const std::vector<double>& hidden, const std::vector<int64_t>& cu_seqlens,
                                 std::vector<Mamba2SequenceState>& states) {
  constexpr const char* kOp = "reference::mamba2_layer";
  const int64_t D = cfg.hidden_size;
  if (hidden.size() % at(D) != 0)
    invalid(kOp, "hidden has " + std::to_string(hidden.size()) + " values, expected tokens x " + std::to_string(D));
  const int64_t T = int64_t(hidden.size()) / D;
  checkSeqlens(kOp, cu_seqlens, T);
  const size_t nseq = cu_seqlens.size() - 1;
  if (states.size() != nseq)
    invalid(kOp, "states has " + std::to_string(states.size()) + " entries, expected one per sequence (" +
                     std::to_string(nseq) + ")");
  for (size_t i = 0; i < nseq; ++i) {
    prepareState("conv", states[i].conv, at(cfg.conv_dim() * (cfg.conv_kernel - 1)), i);
    prepareState("ssm", states[i].ssm, at(cfg.num_heads * cfg.head_dim * cfg.state_size), i);
  }
  std::vector<double> out(hidden.size());
  LayerStep step(cfg, w);
  for (size_t i = 0; i < nseq; ++i)
    for (int64_t t = cu_seqlens[i]; t < cu_seqlens[i + 1]; ++t)
      step.token(&hidden[at(t * D)], states[i], &out[at(t * D)]);
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
      invalid(kOp, "tokens[" + std::to_string(t) + "] = " + std::to_string(tok) + ", expected [0, " + std::to_string(V) + ")");
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

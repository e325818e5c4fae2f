// Float64 backward of the Mamba-2 layer reference (Mamba2ModelRef.h): the forward run again
// through the forward's own parts (Mamba2RefParts.h), keeping every token's intermediates, then
// the adjoint stage by stage in reverse: out_proj, the gated norm, the SSM (a reverse loop per
// sequence, d(state) carried backward), the conv (its window reading the initial conv state
// first), in_proj.
#include <cmath>
#include <string>

#include "runtime/reference/ElementAccess.h"
#include "runtime/reference/Mamba2ModelRef.h"
#include "runtime/reference/Mamba2RefParts.h"
#include "runtime/reference/RefHelpers.h"

namespace ssmjit::reference {

namespace {

using model::Mamba2Config;
using model::Mamba2LayerWeights;
using namespace mamba2_parts;

constexpr const char* kOp = "reference::mamba2_layer_backward";

// The forward's intermediates of every token of the row, one row per token (TokenValues).
struct Tape {
  std::vector<double> proj, acc, post, y, normed;
  std::vector<double> ssmBefore;  // (T, H*P*N): the SSM state each token starts from
};

Tape recordForward(const Mamba2Config& c, const Mamba2LayerWeights& w, const std::vector<double>& hidden,
                   const std::vector<int64_t>& cu, const std::vector<Mamba2SequenceState>& init) {
  const int64_t T = cu.back(), Rp = c.in_proj_rows(), Dc = c.conv_dim(), E = c.d_inner();
  const size_t ssm = at(E * c.state_size);
  Tape tp{std::vector<double>(at(T * Rp)), std::vector<double>(at(T * Dc)), std::vector<double>(at(T * Dc)),
          std::vector<double>(at(T * E)),  std::vector<double>(at(T * E)),  std::vector<double>(at(T) * ssm)};
  std::vector<double> out(at(c.hidden_size));
  for (size_t i = 0; i + 1 < cu.size(); ++i) {
    Mamba2SequenceState s = init[i];
    for (int64_t t = cu[i]; t < cu[i + 1]; ++t) {
      std::copy(s.ssm.begin(), s.ssm.end(), tp.ssmBefore.begin() + std::ptrdiff_t(at(t) * ssm));
      const TokenValues v{&tp.proj[at(t * Rp)], &tp.acc[at(t * Dc)], &tp.post[at(t * Dc)], &tp.y[at(t * E)],
                          &tp.normed[at(t * E)]};
      layerToken(c, w, &hidden[at(t * c.hidden_size)], s, v, out.data());
    }
  }
  return tp;
}

// y = W x (+ b) for each of T tokens: dx = W^T dy; dW += dy x^T; db += dy (db empty: no bias).
void linearBackward(const TensorView& W, const std::vector<double>& x, const std::vector<double>& dy, int64_t T,
                    std::vector<double>& dx, std::vector<double>& dW, std::vector<double>& db) {
  const int64_t R = W.shape[0], C = W.shape[1];
  dx.assign(at(T * C), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t r = 0; r < R; ++r) {
      const double g = dy[at(t * R + r)];
      if (!db.empty()) db[at(r)] += g;
      for (int64_t c = 0; c < C; ++c) {
        dW[at(r * C + c)] += g * x[at(t * C + c)];
        dx[at(t * C + c)] += g * el(W, {r, c});
      }
    }
}

// out_i = v_i r w[w0 + i], r = 1 / sqrt(mean(v^2) + eps): dv from dout; dw += dout v r.
void rmsNormBackward(const double* v, int64_t n, const TensorView& w, int64_t w0, double eps, const double* dout,
                     double* dv, std::vector<double>& dw) {
  double ss = 0, dot = 0;
  for (int64_t i = 0; i < n; ++i) ss += v[i] * v[i];
  const double r = 1.0 / std::sqrt(ss / double(n) + eps);
  for (int64_t i = 0; i < n; ++i) dot += el(w, {w0 + i}) * dout[i] * v[i];
  for (int64_t i = 0; i < n; ++i) {
    dv[i] = r * el(w, {w0 + i}) * dout[i] - v[i] * r * r * r * dot / double(n);
    dw[at(w0 + i)] += dout[i] * v[i] * r;
  }
}

// The gated norm's adjoint per token: dnormed -> dy, and d(z) into dproj's z columns.
void gatedNormBackward(const Mamba2Config& c, const Mamba2LayerWeights& w, const Tape& tp,
                       const std::vector<double>& dnormed, std::vector<double>& dy, std::vector<double>& dproj,
                       std::vector<double>& dweight) {
  const int64_t E = c.d_inner(), gs = E / c.n_groups, Rp = c.in_proj_rows(), T = int64_t(dy.size()) / E;
  std::vector<double> v(at(E)), dn(at(E)), dv(at(E)), n(at(E));
  for (int64_t t = 0; t < T; ++t) {
    const double* y = &tp.y[at(t * E)];
    const double* z = &tp.proj[at(t * Rp)];
    const double* dout = &dnormed[at(t * E)];
    // The norm's input v and its output's gradient dn: before the gate (nbg) or after it.
    for (int64_t i = 0; i < E; ++i) {
      v[at(i)] = c.norm_before_gate ? y[i] : y[i] * silu(z[i]);
      dn[at(i)] = c.norm_before_gate ? dout[i] * silu(z[i]) : dout[i];
    }
    for (int64_t g = 0; g < c.n_groups; ++g) {
      rmsNormBackward(&v[at(g * gs)], gs, w.gated_norm, g * gs, c.norm_eps, &dn[at(g * gs)], &dv[at(g * gs)], dweight);
      if (c.norm_before_gate) rmsNorm(&v[at(g * gs)], gs, w.gated_norm, g * gs, c.norm_eps, &n[at(g * gs)]);
    }
    for (int64_t i = 0; i < E; ++i) {
      const double zi = z[i];
      dy[at(t * E + i)] = c.norm_before_gate ? dv[at(i)] : dv[at(i)] * silu(zi);
      dproj[at(t * Rp + i)] = (c.norm_before_gate ? dout[i] * n[at(i)] : dv[at(i)] * y[i]) * siluGrad(zi);
    }
  }
}

// One token of the SSM's adjoint (S = exp(A dt') S + dt' x B, y = C.S + D x). dS (H, P, N):
// d(state after the token) on entry, d(state before it) on exit. Writes d(x, B, C) into dpost
// (zero on entry) and d(in_proj dt) into ddt; adds to dA_log, dD, ddt_bias.
void ssmTokenBackward(const Mamba2Config& c, const Mamba2LayerWeights& w, const double* post, const double* dtIn,
                      const double* before, const double* dy, double* dS, double* dpost, double* ddt,
                      Mamba2LayerGradientsRef& g) {
  const int64_t H = c.num_heads, P = c.head_dim, N = c.state_size, G = c.n_groups;
  const double* x = post;
  const double* B = x + c.d_inner();
  const double* C = B + G * N;
  double* dB = dpost + c.d_inner();
  double* dC = dB + G * N;
  for (int64_t h = 0; h < H; ++h) {
    const int64_t grp = h / (H / G);
    const HeadDt dt = headDt(c, w, h, dtIn[h]);
    const double a = -std::exp(el(w.A_log, {h})), decay = std::exp(a * dt.value);
    double ddecay = 0, ddtv = 0;
    for (int64_t p = 0; p < P; ++p) {
      const int64_t hp = h * P + p, di = c.d_has_hdim ? hp : h;
      const double xv = x[hp], dyv = dy[hp];
      g.D[at(di)] += dyv * xv;
      double dx = dyv * el(w.D, {di});
      for (int64_t n = 0; n < N; ++n) {
        const int64_t i = hp * N + n, bn = grp * N + n;
        const double sPrev = before[i], sNew = decay * sPrev + dt.value * xv * B[bn];
        dC[bn] += dyv * sNew;
        const double ds = dS[i] + dyv * C[bn];  // d(state after): the carried part and y's read
        ddecay += ds * sPrev;
        ddtv += ds * xv * B[bn];
        dx += ds * dt.value * B[bn];
        dB[bn] += ds * dt.value * xv;
        dS[i] = ds * decay;
      }
      dpost[hp] = dx;
    }
    // decay = exp(a dt'), a = -exp(A_log): d decay / d A_log = decay dt' a.
    g.A_log[at(h)] += ddecay * decay * a * dt.value;
    ddtv += ddecay * decay * a;
    ddt[h] = ddtv * dt.grad();
    g.dt_bias[at(h)] += ddt[h];
  }
}

// The SSM's adjoint over the sequence of tokens [t0, t0 + len), from the last token back: dS
// starts as d(final ssm state) and ends as d(initial ssm state).
void ssmBackward(const Mamba2Config& c, const Mamba2LayerWeights& w, const Tape& tp, int64_t t0, int64_t len,
                 const std::vector<double>& dy, std::vector<double>& dS, std::vector<double>& dpost,
                 std::vector<double>& dproj, Mamba2LayerGradientsRef& g) {
  const int64_t E = c.d_inner(), Dc = c.conv_dim(), Rp = c.in_proj_rows(), S = E * c.state_size;
  for (int64_t t = t0 + len - 1; t >= t0; --t)
    ssmTokenBackward(c, w, &tp.post[at(t * Dc)], &tp.proj[at(t * Rp + E + Dc)], &tp.ssmBefore[at(t * S)],
                     &dy[at(t * E)], dS.data(), &dpost[at(t * Dc)], &dproj[at(t * Rp + E + Dc)], g);
}

// The conv's adjoint over the sequence of tokens [t0, t0 + len). Channel ch of token t reads
// ext[t - K + k], k = 0..K (K = W-1), where ext[j] is the initial conv state's column K + j for
// j < 0 and token j's xBC after; the final state's column k is ext[len - K + k]. dpost: d(SiLU
// output); writes d(xBC) into dproj's xBC columns and d(initial conv state) into dinit.
void convBackward(const Mamba2Config& c, const Mamba2LayerWeights& w, const Tape& tp, const std::vector<double>& init,
                  int64_t t0, int64_t len, const std::vector<double>& dpost, const std::vector<double>& dfinal,
                  std::vector<double>& dproj, std::vector<double>& dinit, Mamba2LayerGradientsRef& g) {
  const int64_t K = c.conv_kernel - 1, Dc = c.conv_dim(), Rp = c.in_proj_rows(), E = c.d_inner(), X = K + len;
  auto ext = [&](int64_t ch, int64_t j) {
    return j < 0 ? init[at(ch * K + K + j)] : tp.proj[at((t0 + j) * Rp + E + ch)];
  };
  std::vector<double> dext(at(Dc * X), 0.0);  // (Dc, K + len): d(ext[j]) at column j + K
  for (int64_t t = 0; t < len; ++t)
    for (int64_t ch = 0; ch < Dc; ++ch) {
      const double da = dpost[at((t0 + t) * Dc + ch)] * siluGrad(tp.acc[at((t0 + t) * Dc + ch)]);
      if (!g.conv1d_bias.empty()) g.conv1d_bias[at(ch)] += da;
      for (int64_t k = 0; k <= K; ++k) {
        g.conv1d_weight[at(ch * (K + 1) + k)] += da * ext(ch, t - K + k);
        dext[at(ch * X + t + k)] += da * el(w.conv1d_weight, {ch, 0, k});
      }
    }
  if (!dfinal.empty())
    for (int64_t ch = 0; ch < Dc; ++ch)
      for (int64_t k = 0; k < K; ++k) dext[at(ch * X + len + k)] += dfinal[at(ch * K + k)];
  for (int64_t ch = 0; ch < Dc; ++ch)
    for (int64_t j = -K; j < len; ++j)
      (j < 0 ? dinit[at(ch * K + K + j)] : dproj[at((t0 + j) * Rp + E + ch)]) = dext[at(ch * X + j + K)];
}

std::vector<double> zerosLike(const TensorView& t) {
  return t.defined() ? std::vector<double>(at(t.numel()), 0.0) : std::vector<double>();
}

// dout shaped as hidden; dfinal_states empty or one per sequence, each member empty or full.
void checkGradientArgs(const Mamba2Config& c, const std::vector<double>& hidden, size_t nseq,
                       const std::vector<double>& dout, const std::vector<Mamba2SequenceState>& dfinal) {
  if (dout.size() != hidden.size())
    invalid(kOp, "dout has " + std::to_string(dout.size()) + " values, expected " + std::to_string(hidden.size()) +
                     " (as hidden)");
  if (!dfinal.empty() && dfinal.size() != nseq)
    invalid(kOp, "dfinal_states has " + std::to_string(dfinal.size()) +
                     " entries, expected none or one per sequence (" + std::to_string(nseq) + ")");
  const size_t nconv = at(c.conv_dim() * (c.conv_kernel - 1)), nssm = at(c.d_inner() * c.state_size);
  for (size_t i = 0; i < dfinal.size(); ++i) {
    std::vector<double> conv = dfinal[i].conv, ssm = dfinal[i].ssm;
    prepareState(kOp, "dfinal_states", "conv", conv, nconv, i);
    prepareState(kOp, "dfinal_states", "ssm", ssm, nssm, i);
  }
}

}  // namespace

Mamba2LayerGradientsRef mamba2_layer_backward(const Mamba2Config& cfg, const Mamba2LayerWeights& w,
                                              const std::vector<double>& hidden, const std::vector<int64_t>& cu_seqlens,
                                              const std::vector<Mamba2SequenceState>& initial_states,
                                              const std::vector<double>& dout,
                                              const std::vector<Mamba2SequenceState>& dfinal_states) {
  const int64_t D = cfg.hidden_size;
  std::vector<Mamba2SequenceState> init = initial_states;
  const int64_t T = checkRow(kOp, cfg, hidden, cu_seqlens, init, "initial_states");
  const size_t nseq = cu_seqlens.size() - 1;
  const size_t nconv = at(cfg.conv_dim() * (cfg.conv_kernel - 1)), nssm = at(cfg.d_inner() * cfg.state_size);
  checkGradientArgs(cfg, hidden, nseq, dout, dfinal_states);

  const Tape tp = recordForward(cfg, w, hidden, cu_seqlens, init);
  Mamba2LayerGradientsRef g;
  g.in_proj_weight = zerosLike(w.in_proj_weight);
  g.in_proj_bias = zerosLike(w.in_proj_bias);
  g.conv1d_weight = zerosLike(w.conv1d_weight);
  g.conv1d_bias = zerosLike(w.conv1d_bias);
  g.dt_bias = zerosLike(w.dt_bias);
  g.A_log = zerosLike(w.A_log);
  g.D = zerosLike(w.D);
  g.gated_norm = zerosLike(w.gated_norm);
  g.out_proj_weight = zerosLike(w.out_proj_weight);
  g.out_proj_bias = zerosLike(w.out_proj_bias);
  g.initial_states.resize(nseq);

  std::vector<double> dnormed, dy(at(T * cfg.d_inner())), dpost(at(T * cfg.conv_dim()), 0.0),
      dproj(at(T * cfg.in_proj_rows()), 0.0);
  linearBackward(w.out_proj_weight, tp.normed, dout, T, dnormed, g.out_proj_weight, g.out_proj_bias);
  gatedNormBackward(cfg, w, tp, dnormed, dy, dproj, g.gated_norm);
  const std::vector<double> none;
  for (size_t i = 0; i < nseq; ++i) {
    const int64_t t0 = cu_seqlens[i], len = cu_seqlens[i + 1] - t0;
    const Mamba2SequenceState* dfinal = dfinal_states.empty() ? nullptr : &dfinal_states[i];
    std::vector<double>& dS = g.initial_states[i].ssm;
    dS = dfinal && !dfinal->ssm.empty() ? dfinal->ssm : std::vector<double>(nssm, 0.0);
    ssmBackward(cfg, w, tp, t0, len, dy, dS, dpost, dproj, g);
    g.initial_states[i].conv.assign(nconv, 0.0);
    convBackward(cfg, w, tp, init[i].conv, t0, len, dpost, dfinal ? dfinal->conv : none, dproj,
                 g.initial_states[i].conv, g);
  }
  linearBackward(w.in_proj_weight, hidden, dproj, T, g.hidden, g.in_proj_weight, g.in_proj_bias);
  return g;
}

}  // namespace ssmjit::reference

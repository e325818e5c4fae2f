// The float64 CPU reference of selective_scan_backward (see ssmjit/reference.h).
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/ops/SelectiveScanCheck.h"
#include "runtime/reference/ElementAccess.h"
#include "runtime/reference/RefHelpers.h"
#include "runtime/reference/ScanSequences.h"
#include "ssmjit/error.h"
#include "ssmjit/reference.h"

namespace ssmjit::reference {
namespace {

constexpr const char* kOp = "reference::selective_scan_backward";

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

void selective_scan_backward(const SelectiveScanBackwardArgs& b) {
  const detail::ScanDims d = detail::checkSelectiveScanBackwardArgs(b, DeviceKind::CPU, kOp);
  const SelectiveScanArgs& a = b.forward;
  // Sequences (row, start, length), every check before anything is written.
  const ScanSequences q = scanSequences(kOp, a, d);
  const auto& [row, start, len] = q;
  // The slots: the forward's initial ones (read, and where dinitial_states goes), and
  // final_state_indices for dfinal_states' slots (the check counted those in finalSlots).
  const bool hasDinit = b.dinitial_states.defined();
  std::vector<int64_t> in, fin;
  if (a.initial_states.defined())
    in = scanSlots(kOp, "initial_state_indices", a.initial_state_indices, d.nseq, d.initSlots);
  if (b.dfinal_states.defined())
    fin = scanSlots(kOp, "final_state_indices", a.final_state_indices, d.nseq, d.finalSlots);
  if (hasDinit) checkDistinctInitialSlots(kOp, d.nseq, d.initSlots, [&](int64_t i) { return in[at(i)]; });

  // Every gradient in double, written once at the end (outputs alias no input: the check).
  const int64_t D = d.D, N = d.N, L = d.L, Bt = d.batch, G = d.G, per = d.D / d.G;
  auto xIdx = [&](int64_t r, int64_t ch, int64_t tok) { return at((r * D + ch) * L + tok); };
  auto bcIdx = [&](bool varying, int64_t r, int64_t ch, int64_t n, int64_t tok) {
    return varying ? at(((r * G + ch / per) * N + n) * L + tok) : at(ch * N + n);
  };
  std::vector<double> du(at(Bt * D * L), 0.0), ddelta(du.size(), 0.0), dz(a.z.defined() ? du.size() : 0, 0.0);
  std::vector<double> dA(at(D * N), 0.0), dD(at(D), 0.0), ddb(at(D), 0.0);
  std::vector<double> dB(d.bVarying ? at(Bt * G * N * L) : at(D * N), 0.0);
  std::vector<double> dC(d.cVarying ? at(Bt * G * N * L) : at(D * N), 0.0);
  std::vector<double> dinit(hasDinit ? at(d.initSlots * D * N) : 0, 0.0);

  auto bc = [&](const TensorView& t, bool varying, int64_t r, int64_t ch, int64_t n, int64_t tok) {
    return varying ? el(t, {r, ch / per, n, tok}) : el(t, {ch, n});
  };
  std::vector<double> h, g(at(N)), Av(at(N)), dtv, uv, yv;
  for (int64_t i = 0; i < d.nseq; ++i) {
    const int64_t r = row[at(i)], t0 = start[at(i)], T = len[at(i)];
    const int64_t inSlot = in.empty() ? -1 : in[at(i)], finSlot = fin.empty() ? -1 : fin[at(i)];
    h.assign(at((T + 1) * N), 0.0);  // h[t * N + n]: the state before token t (h[T]: the final one)
    dtv.assign(at(T), 0.0), uv.assign(at(T), 0.0), yv.assign(at(T), 0.0);
    for (int64_t ch = 0; ch < D; ++ch) {
      for (int64_t n = 0; n < N; ++n) {
        Av[at(n)] = el(a.A, {ch, n});
        h[at(n)] = inSlot >= 0 ? el(a.initial_states, {inSlot, ch, n}) : 0.0;
      }
      const double Dch = a.D.defined() ? el(a.D, {ch}) : 0.0;
      const double bias = a.delta_bias.defined() ? el(a.delta_bias, {ch}) : 0.0;
      // The forward, every state kept: y' is y before the gate.
      for (int64_t t = 0; t < T; ++t) {
        const int64_t tok = t0 + t;
        const double u = el(a.u, {r, ch, tok});
        double dt = el(a.delta, {r, ch, tok}) + bias;
        if (a.delta_softplus) dt = dt > 20.0 ? dt : std::log1p(std::exp(dt));
        double y = Dch * u;
        for (int64_t n = 0; n < N; ++n) {
          const double s = std::exp(dt * Av[at(n)]) * h[at(t * N + n)] + dt * bc(a.B, d.bVarying, r, ch, n, tok) * u;
          h[at((t + 1) * N + n)] = s;
          y += bc(a.C, d.cVarying, r, ch, n, tok) * s;
        }
        dtv[at(t)] = dt, uv[at(t)] = u, yv[at(t)] = y;
      }
      // The adjoint, from the sequence's end.
      for (int64_t n = 0; n < N; ++n) g[at(n)] = finSlot >= 0 ? el(b.dfinal_states, {finSlot, ch, n}) : 0.0;
      for (int64_t t = T - 1; t >= 0; --t) {
        const int64_t tok = t0 + t;
        const double u = uv[at(t)], dt = dtv[at(t)], dout = el(b.dout, {r, ch, tok});
        double dy = dout;
        if (a.z.defined()) {
          const double z = el(a.z, {r, ch, tok}), sz = sigmoid(z);
          dy = dout * z * sz;
          dz[xIdx(r, ch, tok)] = dout * yv[at(t)] * sz * (1.0 + z * (1.0 - sz));
        }
        double duv = dy * Dch, ddt = 0.0;
        for (int64_t n = 0; n < N; ++n) {
          double& gn = g[at(n)];
          const double Bv = bc(a.B, d.bVarying, r, ch, n, tok), Cv = bc(a.C, d.cVarying, r, ch, n, tok);
          const double hPrev = h[at(t * N + n)], hCur = h[at((t + 1) * N + n)], e = std::exp(dt * Av[at(n)]);
          gn += Cv * dy;
          duv += gn * dt * Bv;
          ddt += gn * (Bv * u + Av[at(n)] * e * hPrev);
          dA[at(ch * N + n)] += gn * dt * e * hPrev;
          dB[bcIdx(d.bVarying, r, ch, n, tok)] += gn * dt * u;
          dC[bcIdx(d.cVarying, r, ch, n, tok)] += dy * hCur;
          gn *= e;  // on to the state before this token
        }
        dD[at(ch)] += dy * u;
        double ddv = ddt;
        if (a.delta_softplus) {
          const double x = el(a.delta, {r, ch, tok}) + bias;
          ddv *= x <= 20.0 ? sigmoid(x) : 1.0;
        }
        ddb[at(ch)] += ddv;
        du[xIdx(r, ch, tok)] = duv;
        ddelta[xIdx(r, ch, tok)] = ddv;
      }
      if (hasDinit && inSlot >= 0)
        for (int64_t n = 0; n < N; ++n) dinit[at((inSlot * D + ch) * N + n)] = g[at(n)];
    }
  }

  // Every output rounded once.
  for (int64_t r = 0; r < Bt; ++r)
    for (int64_t ch = 0; ch < D; ++ch)
      for (int64_t tok = 0; tok < L; ++tok) {
        put(b.du, {r, ch, tok}, du[xIdx(r, ch, tok)]);
        put(b.ddelta, {r, ch, tok}, ddelta[xIdx(r, ch, tok)]);
        if (b.dz.defined()) put(b.dz, {r, ch, tok}, dz[xIdx(r, ch, tok)]);
      }
  for (int64_t ch = 0; ch < D; ++ch) {
    for (int64_t n = 0; n < N; ++n) put(b.dA, {ch, n}, dA[at(ch * N + n)]);
    if (b.dD.defined()) put(b.dD, {ch}, dD[at(ch)]);
    if (b.ddelta_bias.defined()) put(b.ddelta_bias, {ch}, ddb[at(ch)]);
  }
  auto writeBC = [&](const TensorView& t, bool varying, const std::vector<double>& v) {
    if (varying) {
      for (int64_t r = 0; r < Bt; ++r)
        for (int64_t gr = 0; gr < G; ++gr)
          for (int64_t n = 0; n < N; ++n)
            for (int64_t tok = 0; tok < L; ++tok) put(t, {r, gr, n, tok}, v[at(((r * G + gr) * N + n) * L + tok)]);
    } else {
      for (int64_t ch = 0; ch < D; ++ch)
        for (int64_t n = 0; n < N; ++n) put(t, {ch, n}, v[at(ch * N + n)]);
    }
  };
  writeBC(b.dB, d.bVarying, dB);
  writeBC(b.dC, d.cVarying, dC);
  if (hasDinit)
    for (int64_t i = 0; i < d.nseq; ++i) {
      const int64_t s = in[at(i)];
      if (s < 0) continue;
      for (int64_t ch = 0; ch < D; ++ch)
        for (int64_t n = 0; n < N; ++n) put(b.dinitial_states, {s, ch, n}, dinit[at((s * D + ch) * N + n)]);
    }
}

}  // namespace ssmjit::reference

// The float64 CPU reference of ssd_backward (see ssmjit/reference.h): the forward recurrence
// recomputed per sequence, head and channel, then its adjoint walked from the sequence's end.
#include <cmath>
#include <cstdint>
#include <vector>

#include "runtime/ops/SsdCheck.h"
#include "runtime/reference/SsdCall.h"
#include "ssmjit/reference.h"

namespace ssmjit::reference {

void ssd_backward(const SsdBackwardArgs& b) {
  constexpr const char* kOp = "reference::ssd_backward";
  const detail::SsdDims d = detail::checkSsdBackwardArgs(b, DeviceKind::CPU, kOp);
  const SsdArgs& a = b.forward;
  const SsdCall q = readSsdCall(kOp, a, d, b.dfinal_states, /*forward=*/false, b.dinitial_states.defined());
  const int64_t Bt = d.batch, L = d.L, H = d.H, P = d.P, G = d.G, N = d.N;

  // Every gradient in double, written once at the end (outputs alias no input: the check).
  auto xi = [&](int64_t r, int64_t tok, int64_t h, int64_t p) { return at(((r * L + tok) * H + h) * P + p); };
  auto ti = [&](int64_t r, int64_t tok, int64_t h) { return at((r * L + tok) * H + h); };
  auto bi = [&](int64_t r, int64_t tok, int64_t g, int64_t n) { return at(((r * L + tok) * G + g) * N + n); };
  std::vector<double> dx(at(Bt * L * H * P)), dz(a.z.defined() ? dx.size() : 0), ddt(at(Bt * L * H));
  std::vector<double> dB(at(Bt * L * G * N)), dC(dB.size()), dA(at(H)), ddtBias(at(H));
  std::vector<double> dD(d.dPerChannel ? at(H * P) : at(H));
  std::vector<double> dinit(b.dinitial_states.defined() ? at(d.initSlots * H * P * N) : 0);

  std::vector<double> dt, dtGrad, ddtPrime, S, g(at(N)), y;
  for (int64_t i = 0; i < d.nseq; ++i) {
    const int64_t r = q.seq.row[at(i)], t0 = q.seq.start[at(i)], T = q.seq.len[at(i)];
    const int64_t in = q.initSlot.empty() ? -1 : q.initSlot[at(i)];
    const int64_t fin = q.finalSlot.empty() ? -1 : q.finalSlot[at(i)];
    for (int64_t h = 0; h < H; ++h) {
      const int64_t grp = h / d.headsPerGroup;
      const double A = el(a.A, {h});
      dt.resize(at(T)), dtGrad.resize(at(T)), y.resize(at(T));
      ddtPrime.assign(at(T), 0.0);  // d loss / d dt', summed over the head's channels
      for (int64_t t = 0; t < T; ++t) {
        const DtPrime v = dtPrime(a, el(a.dt, {r, t0 + t, h}), h);
        dt[at(t)] = v.value, dtGrad[at(t)] = v.grad;
      }
      for (int64_t p = 0; p < P; ++p) {
        const double Dv = !a.D.defined() ? 0.0 : d.dPerChannel ? el(a.D, {h, p}) : el(a.D, {h});
        // The forward, every state kept: S[t * N + n] is the state before token t (S[T * N + n]
        // the final one); y[t] is the output before the gate.
        S.assign(at((T + 1) * N), 0.0);
        for (int64_t n = 0; n < N; ++n) S[at(n)] = in >= 0 ? el(a.initial_states, {in, h, p, n}) : 0.0;
        for (int64_t t = 0; t < T; ++t) {
          const int64_t tok = t0 + t;
          const double x = el(a.x, {r, tok, h, p}), e = std::exp(dt[at(t)] * A);
          double yt = Dv * x;
          for (int64_t n = 0; n < N; ++n) {
            const double s = e * S[at(t * N + n)] + dt[at(t)] * x * el(a.B, {r, tok, grp, n});
            S[at((t + 1) * N + n)] = s;
            yt += el(a.C, {r, tok, grp, n}) * s;
          }
          y[at(t)] = yt;
        }
        // The adjoint g (of the state after token t), from dfinal_states at the end.
        for (int64_t n = 0; n < N; ++n) g[at(n)] = fin >= 0 ? el(b.dfinal_states, {fin, h, p, n}) : 0.0;
        for (int64_t t = T - 1; t >= 0; --t) {
          const int64_t tok = t0 + t;
          const double x = el(a.x, {r, tok, h, p}), e = std::exp(dt[at(t)] * A), dout = el(b.dout, {r, tok, h, p});
          double dy = dout;
          if (a.z.defined()) {
            const double z = el(a.z, {r, tok, h, p}), sz = 1.0 / (1.0 + std::exp(-z));
            dy = dout * z * sz;
            dz[xi(r, tok, h, p)] = dout * y[at(t)] * sz * (1.0 + z * (1.0 - sz));
          }
          double dxv = dy * Dv, ddtv = 0.0, dAv = 0.0;
          for (int64_t n = 0; n < N; ++n) {
            const double Bv = el(a.B, {r, tok, grp, n}), sPrev = S[at(t * N + n)];
            double& gn = g[at(n)];
            gn += el(a.C, {r, tok, grp, n}) * dy;
            dxv += gn * dt[at(t)] * Bv;
            ddtv += gn * (Bv * x + A * e * sPrev);
            dAv += gn * dt[at(t)] * e * sPrev;
            dB[bi(r, tok, grp, n)] += gn * dt[at(t)] * x;
            dC[bi(r, tok, grp, n)] += dy * S[at((t + 1) * N + n)];
            gn *= e;  // on to the state before this token
          }
          dx[xi(r, tok, h, p)] = dxv;
          ddtPrime[at(t)] += ddtv;
          dA[at(h)] += dAv;
          dD[d.dPerChannel ? at(h * P + p) : at(h)] += dy * x;
        }
        if (!dinit.empty() && in >= 0)
          for (int64_t n = 0; n < N; ++n) dinit[at(((in * H + h) * P + p) * N + n)] = g[at(n)];
      }
      for (int64_t t = 0; t < T; ++t) {
        const double v = ddtPrime[at(t)] * dtGrad[at(t)];
        ddt[ti(r, t0 + t, h)] = v;
        ddtBias[at(h)] += v;
      }
    }
  }

  // Every output rounded once; dinitial_states only at the slots sequences read.
  for (int64_t r = 0; r < Bt; ++r)
    for (int64_t tok = 0; tok < L; ++tok)
      for (int64_t h = 0; h < H; ++h) {
        put(b.ddt, {r, tok, h}, ddt[ti(r, tok, h)]);
        for (int64_t p = 0; p < P; ++p) {
          put(b.dx, {r, tok, h, p}, dx[xi(r, tok, h, p)]);
          if (b.dz.defined()) put(b.dz, {r, tok, h, p}, dz[xi(r, tok, h, p)]);
        }
      }
  for (int64_t r = 0; r < Bt; ++r)
    for (int64_t tok = 0; tok < L; ++tok)
      for (int64_t grp = 0; grp < G; ++grp)
        for (int64_t n = 0; n < N; ++n) {
          put(b.dB, {r, tok, grp, n}, dB[bi(r, tok, grp, n)]);
          put(b.dC, {r, tok, grp, n}, dC[bi(r, tok, grp, n)]);
        }
  for (int64_t h = 0; h < H; ++h) {
    put(b.dA, {h}, dA[at(h)]);
    if (b.ddt_bias.defined()) put(b.ddt_bias, {h}, ddtBias[at(h)]);
    if (b.dD.defined() && !d.dPerChannel) put(b.dD, {h}, dD[at(h)]);
    if (b.dD.defined() && d.dPerChannel)
      for (int64_t p = 0; p < P; ++p) put(b.dD, {h, p}, dD[at(h * P + p)]);
  }
  for (int64_t i = 0; i < d.nseq && !dinit.empty(); ++i) {
    const int64_t s = q.initSlot[at(i)];
    if (s < 0) continue;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t p = 0; p < P; ++p)
        for (int64_t n = 0; n < N; ++n) put(b.dinitial_states, {s, h, p, n}, dinit[at(((s * H + h) * P + p) * N + n)]);
  }
}

}  // namespace ssmjit::reference

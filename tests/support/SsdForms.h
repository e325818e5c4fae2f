// Two float64 forms of ssd for the CPU tests of ssd and ssd_backward, which
// share nothing with the reference (runtime/reference/SsdRef.cpp, a plain recurrence):
//   - the quadratic ("attention") form: y_t = exp(seg(-1, t)) C_t . h0 + sum_{s <= t} (C_t . B_s)
//     exp(seg(s, t)) dt'_s x_s + D x_t, with the segment sums seg(s, t) = sum_{s < r <= t} dt'_r A
//     summed token by token, never differenced (Listing 1 of the Mamba-2 paper);
//   - the chunked form with any chunk size Q: per chunk from the sequence's start, the in-chunk
//     product with cumsum differences, the chunk's state, and states passed from chunk to chunk.
// Inputs are read as stored, once, into doubles (SsdInputs), so that a test can also perturb them.
// The problems themselves (SsdCase, SsdProblem) are tools/problems/SsdProblem.h.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "ssmjit/ops.h"
#include "tests/support/HostTensors.h"
#include "tools/problems/HostTensor.h"
#include "tools/problems/SsdProblem.h"

namespace ssmjit::testing {

// Every input as stored, row-major, in double; initial states by slot.
struct SsdInputs {
  int64_t batch, L, H, P, G, N, nseq;
  std::vector<double> x, dt, A, B, C, D, z, dtBias, init;  // D: (H) or (H, P); empty: none
  bool dPerChannel, softplus;
  double dtMin, dtMax;
  std::vector<int64_t> row, start, len, initSlot;

  explicit SsdInputs(const SsdProblem& p)
      : batch(p.c.batch),
        L(p.c.L),
        H(p.c.H),
        P(p.c.P),
        G(p.c.G),
        N(p.c.N),
        nseq(p.nseq),
        x(valuesOf(p.x)),
        dt(valuesOf(p.dt)),
        A(valuesOf(p.A)),
        B(valuesOf(p.B)),
        C(valuesOf(p.C)),
        D(valuesOf(p.Dv)),
        z(valuesOf(p.z)),
        dtBias(valuesOf(p.dtBias)),
        init(valuesOf(p.init)),
        dPerChannel(p.c.dPerChannel),
        softplus(p.c.softplus),
        dtMin(p.c.dtMin),
        dtMax(p.c.dtMax),
        row(p.row),
        start(p.start),
        len(p.len),
        initSlot(p.initSlot) {}

  size_t xi(int64_t r, int64_t t, int64_t h, int64_t p) const { return size_t(((r * L + t) * H + h) * P + p); }
  size_t bi(int64_t r, int64_t t, int64_t g, int64_t n) const { return size_t(((r * L + t) * G + g) * N + n); }
  double dtPrime(int64_t r, int64_t t, int64_t h) const {
    double v = dt[size_t((r * L + t) * H + h)] + (dtBias.empty() ? 0.0 : dtBias[size_t(h)]);
    if (softplus) v = v > 20.0 ? v : std::log1p(std::exp(v));
    return dtMax > dtMin ? std::clamp(v, dtMin, dtMax) : v;
  }
  double h0(int64_t i, int64_t h, int64_t p, int64_t n) const {
    const int64_t s = initSlot.empty() ? -1 : initSlot[size_t(i)];
    return s < 0 ? 0.0 : init[size_t(((s * H + h) * P + p) * N + n)];
  }
  double gated(double y, int64_t r, int64_t t, int64_t h, int64_t p) const {
    if (!D.empty()) y += (dPerChannel ? D[size_t(h * P + p)] : D[size_t(h)]) * x[xi(r, t, h, p)];
    if (z.empty()) return y;
    const double zv = z[xi(r, t, h, p)];
    return y * zv / (1.0 + std::exp(-zv));
  }
};

// What a form computes: out (batch, L, H, P), per sequence the final state (nseq, H, P, N), the
// decay (nseq, H), and (quadratic form only) the state after every token (per sequence, token
// t of it: states[i][((t * H + h) * P + p) * N + n]).
struct SsdResult {
  std::vector<double> y, final, decay;
  std::vector<std::vector<double>> states;
};

inline SsdResult quadraticForm(const SsdInputs& in) {
  const int64_t H = in.H, P = in.P, N = in.N, hpg = in.H / in.G;
  SsdResult r;
  r.y.assign(size_t(in.batch * in.L * H * P), 0.0);
  r.final.assign(size_t(in.nseq * H * P * N), 0.0);
  r.decay.assign(size_t(in.nseq * H), 1.0);
  r.states.resize(size_t(in.nseq));
  for (int64_t i = 0; i < in.nseq; ++i) {
    const int64_t row = in.row[size_t(i)], t0 = in.start[size_t(i)], T = in.len[size_t(i)];
    std::vector<double>& st = r.states[size_t(i)];
    st.assign(size_t(T * H * P * N), 0.0);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / hpg;
      std::vector<double> a(static_cast<size_t>(T)), dtp(static_cast<size_t>(T));
      for (int64_t t = 0; t < T; ++t)
        dtp[size_t(t)] = in.dtPrime(row, t0 + t, h), a[size_t(t)] = dtp[size_t(t)] * in.A[size_t(h)];
      // seg[s][t] = sum_{s < u <= t} a_u for s < t (s = -1: from before the start), summed.
      std::vector<double> seg(size_t((T + 1) * T), 0.0);
      for (int64_t s = -1; s < T; ++s) {
        double acc = 0;
        for (int64_t t = s + 1; t < T; ++t) acc += a[size_t(t)], seg[size_t((s + 1) * T + t)] = acc;
      }
      auto segsum = [&](int64_t s, int64_t t) { return s == t ? 0.0 : seg[size_t((s + 1) * T + t)]; };
      for (int64_t t = 0; t < T; ++t) r.decay[size_t(i * H + h)] *= std::exp(a[size_t(t)]);
      for (int64_t t = 0; t < T; ++t) {
        const int64_t tok = t0 + t;
        const double fromStart = std::exp(segsum(-1, t));
        for (int64_t p = 0; p < P; ++p) {
          double y = 0;
          for (int64_t n = 0; n < N; ++n) y += in.C[in.bi(row, tok, g, n)] * in.h0(i, h, p, n) * fromStart;
          for (int64_t s = 0; s <= t; ++s) {
            double cb = 0;
            for (int64_t n = 0; n < N; ++n) cb += in.C[in.bi(row, tok, g, n)] * in.B[in.bi(row, t0 + s, g, n)];
            y += cb * std::exp(segsum(s, t)) * dtp[size_t(s)] * in.x[in.xi(row, t0 + s, h, p)];
          }
          r.y[in.xi(row, tok, h, p)] = in.gated(y, row, tok, h, p);
          for (int64_t n = 0; n < N; ++n) {
            double s_ = fromStart * in.h0(i, h, p, n);
            for (int64_t s = 0; s <= t; ++s)
              s_ += std::exp(segsum(s, t)) * dtp[size_t(s)] * in.x[in.xi(row, t0 + s, h, p)] *
                    in.B[in.bi(row, t0 + s, g, n)];
            st[size_t(((t * H + h) * P + p) * N + n)] = s_;
          }
        }
      }
      for (int64_t p = 0; p < P; ++p)
        for (int64_t n = 0; n < N; ++n)
          r.final[size_t(((i * H + h) * P + p) * N + n)] =
              T == 0 ? in.h0(i, h, p, n) : st[size_t((((T - 1) * H + h) * P + p) * N + n)];
    }
  }
  return r;
}

inline SsdResult chunkedForm(const SsdInputs& in, int64_t Q) {
  const int64_t H = in.H, P = in.P, N = in.N, hpg = in.H / in.G;
  SsdResult r;
  r.y.assign(size_t(in.batch * in.L * H * P), 0.0);
  r.final.assign(size_t(in.nseq * H * P * N), 0.0);
  r.decay.assign(size_t(in.nseq * H), 0.0);
  for (int64_t i = 0; i < in.nseq; ++i) {
    const int64_t row = in.row[size_t(i)], t0 = in.start[size_t(i)], T = in.len[size_t(i)];
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / hpg;
      std::vector<double> state(size_t(P * N));  // entering the chunk
      for (int64_t p = 0; p < P; ++p)
        for (int64_t n = 0; n < N; ++n) state[size_t(p * N + n)] = in.h0(i, h, p, n);
      double logDecay = 0;
      for (int64_t c0 = 0; c0 < T; c0 += Q) {
        const int64_t len = std::min(Q, T - c0);
        std::vector<double> cum(static_cast<size_t>(len)), dtp(static_cast<size_t>(len));
        for (int64_t j = 0; j < len; ++j) {
          dtp[size_t(j)] = in.dtPrime(row, t0 + c0 + j, h);
          cum[size_t(j)] = (j ? cum[size_t(j - 1)] : 0.0) + dtp[size_t(j)] * in.A[size_t(h)];
        }
        for (int64_t j = 0; j < len; ++j) {  // the output: from the state entering, and within
          const int64_t tok = t0 + c0 + j;
          for (int64_t p = 0; p < P; ++p) {
            double y = 0;
            for (int64_t n = 0; n < N; ++n) y += in.C[in.bi(row, tok, g, n)] * state[size_t(p * N + n)];
            y *= std::exp(cum[size_t(j)]);
            for (int64_t k = 0; k <= j; ++k) {
              double cb = 0;
              for (int64_t n = 0; n < N; ++n) cb += in.C[in.bi(row, tok, g, n)] * in.B[in.bi(row, t0 + c0 + k, g, n)];
              y +=
                  cb * std::exp(cum[size_t(j)] - cum[size_t(k)]) * dtp[size_t(k)] * in.x[in.xi(row, t0 + c0 + k, h, p)];
            }
            r.y[in.xi(row, tok, h, p)] = in.gated(y, row, tok, h, p);
          }
        }
        const double last = cum[size_t(len - 1)];  // the chunk's state, then the state passed on
        for (int64_t p = 0; p < P; ++p)
          for (int64_t n = 0; n < N; ++n) {
            double s = std::exp(last) * state[size_t(p * N + n)];
            for (int64_t k = 0; k < len; ++k)
              s += std::exp(last - cum[size_t(k)]) * dtp[size_t(k)] * in.x[in.xi(row, t0 + c0 + k, h, p)] *
                   in.B[in.bi(row, t0 + c0 + k, g, n)];
            state[size_t(p * N + n)] = s;
          }
        logDecay += last;
      }
      r.decay[size_t(i * H + h)] = std::exp(logDecay);
      for (int64_t k = 0; k < P * N; ++k) r.final[size_t((i * H + h) * P * N + k)] = state[size_t(k)];
    }
  }
  return r;
}

}  // namespace ssmjit::testing

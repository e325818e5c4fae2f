// The float64 CPU reference of ssd (see ssmjit/reference.h): the plain recurrence per sequence.
#include <cmath>
#include <cstdint>
#include <vector>

#include "runtime/ops/SsdCheck.h"
#include "runtime/reference/SsdCall.h"
#include "ssmjit/reference.h"

namespace ssmjit::reference {

void ssd(const SsdArgs& a) {
  constexpr const char* kOp = "reference::ssd";
  const detail::SsdDims d = detail::checkSsdArgs(a, DeviceKind::CPU, kOp);
  const SsdCall q = readSsdCall(kOp, a, d, a.final_states, /*forward=*/true, /*distinctInitial=*/false);
  const int64_t H = d.H, P = d.P, N = d.N, kmax = d.blocksPerSeq;

  // Everything in double first, written once at the end: the initial states are all read before
  // any state is written (in-place updates), and every output is rounded once.
  std::vector<double> out(a.out.defined() ? at(d.batch * d.L * H * P) : 0), ys(a.y.defined() ? out.size() : 0);
  std::vector<double> fin(at(d.nseq * H * P * N)), blk(at(d.nseq * kmax * H * P * N)), decay(at(d.nseq * H));
  auto state = [&](int64_t i, int64_t h, int64_t p) { return at(((i * H + h) * P + p) * N); };
  auto block = [&](int64_t i, int64_t k, int64_t h, int64_t p) { return at((((i * kmax + k) * H + h) * P + p) * N); };

  std::vector<double> dt, S(at(N));
  for (int64_t i = 0; i < d.nseq; ++i) {
    const int64_t r = q.seq.row[at(i)], t0 = q.seq.start[at(i)], T = q.seq.len[at(i)];
    const int64_t in = q.initSlot.empty() ? -1 : q.initSlot[at(i)];
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / d.headsPerGroup;
      const double A = el(a.A, {h});
      dt.resize(at(T));
      double logDecay = 0;
      for (int64_t t = 0; t < T; ++t) {
        dt[at(t)] = dtPrime(a, el(a.dt, {r, t0 + t, h}), h).value;
        logDecay += dt[at(t)] * A;
      }
      decay[at(i * H + h)] = std::exp(logDecay);
      for (int64_t p = 0; p < P; ++p) {
        for (int64_t n = 0; n < N; ++n) S[at(n)] = in >= 0 ? el(a.initial_states, {in, h, p, n}) : 0.0;
        const double Dv = !a.D.defined() ? 0.0 : d.dPerChannel ? el(a.D, {h, p}) : el(a.D, {h});
        for (int64_t t = 0; t < T; ++t) {
          const int64_t tok = t0 + t;
          const double x = el(a.x, {r, tok, h, p}), e = std::exp(dt[at(t)] * A);
          double y = Dv * x;
          for (int64_t n = 0; n < N; ++n) {
            S[at(n)] = e * S[at(n)] + dt[at(t)] * x * el(a.B, {r, tok, g, n});
            y += el(a.C, {r, tok, g, n}) * S[at(n)];
          }
          if (!ys.empty()) ys[at(((r * d.L + tok) * H + h) * P + p)] = y;
          if (a.z.defined()) {
            const double z = el(a.z, {r, tok, h, p});
            y *= z / (1.0 + std::exp(-z));
          }
          if (!out.empty()) out[at(((r * d.L + tok) * H + h) * P + p)] = y;
          if (q.blockTokens > 0 && (t + 1) % q.blockTokens == 0)
            for (int64_t n = 0; n < N; ++n) blk[block(i, (t + 1) / q.blockTokens - 1, h, p) + at(n)] = S[at(n)];
        }
        for (int64_t n = 0; n < N; ++n) fin[state(i, h, p) + at(n)] = S[at(n)];
      }
    }
  }

  auto writeTokens = [&](const TensorView& t, const std::vector<double>& v) {
    if (v.empty()) return;
    for (int64_t r = 0; r < d.batch; ++r)
      for (int64_t tok = 0; tok < d.L; ++tok)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t p = 0; p < P; ++p) put(t, {r, tok, h, p}, v[at(((r * d.L + tok) * H + h) * P + p)]);
  };
  writeTokens(a.out, out);
  writeTokens(a.y, ys);
  auto writeState = [&](const TensorView& t, int64_t slot, const double* s) {
    for (int64_t h = 0; h < H; ++h)
      for (int64_t p = 0; p < P; ++p)
        for (int64_t n = 0; n < N; ++n) put(t, {slot, h, p, n}, s[(h * P + p) * N + n]);
  };
  for (int64_t i = 0; i < d.nseq; ++i) {
    if (!q.finalSlot.empty() && q.finalSlot[at(i)] >= 0)
      writeState(a.final_states, q.finalSlot[at(i)], &fin[state(i, 0, 0)]);
    for (int64_t k = 0; k < q.blocks(i); ++k) {
      const int64_t slot = q.blockSlot[at(i * kmax + k)];
      if (slot >= 0) writeState(a.block_states, slot, &blk[block(i, k, 0, 0)]);
    }
    if (a.sequence_decay.defined())
      for (int64_t h = 0; h < H; ++h) put(a.sequence_decay, {i, h}, decay[at(i * H + h)]);
  }
}

}  // namespace ssmjit::reference

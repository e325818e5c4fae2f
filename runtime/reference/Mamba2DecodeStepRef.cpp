// Float64 reference of mamba2_decode_step (see ssmjit/reference.h): plain loops over rows,
// channels and tokens, every tensor indexed through its strides.
#include <cmath>
#include <string>
#include <vector>

#include "runtime/ops/Mamba2DecodeStepCheck.h"
#include "runtime/reference/ElementAccess.h"
#include "ssmjit/error.h"
#include "ssmjit/reference.h"

namespace ssmjit::reference {

namespace {

int64_t off(const TensorView& t, std::initializer_list<int64_t> idx) {
  int64_t o = 0, d = 0;
  for (int64_t i : idx) o += i * t.strides[d++];
  return o;
}
double at(const TensorView& t, std::initializer_list<int64_t> idx) { return loadElement(t, off(t, idx)); }
double silu(double v) { return v / (1.0 + std::exp(-v)); }

}  // namespace

void mamba2_decode_step(const Mamba2DecodeState& s, const Mamba2MixerWeights& w, const Mamba2DecodeStepArgs& a) {
  const char* op = "reference::mamba2_decode_step";
  const detail::DecodeStepDims d = detail::checkDecodeStepArgs(s, w, a, DeviceKind::CPU, op);
  const int64_t H = d.H, P = d.P, N = d.N, G = d.G, K = d.W - 1, Dc = d.Dc, HP = H * P, GN = G * N;

  // Every slot and count first: a bad one throws before anything is written.
  std::vector<int64_t> slot(static_cast<size_t>(d.batch)), count(static_cast<size_t>(d.batch), 0),
      ringCount(static_cast<size_t>(d.batch), 0);
  for (int64_t b = 0; b < d.batch; ++b) {
    // Indices and counts read as integers: a huge int64 must not pass through double.
    const int64_t sl = a.state_indices.defined() ? loadIndex(a.state_indices, off(a.state_indices, {b})) : b;
    if (sl != -1 && (sl < 0 || sl >= d.S))
      throw Error(Error::Kind::InvalidArgument, std::string(op) + ": state_indices[" + std::to_string(b) +
                                                    "] = " + std::to_string(sl) + ", expected a slot in [0, " +
                                                    std::to_string(d.S) + ") or -1 (padding)");
    slot[size_t(b)] = sl;
    if (sl == -1) continue;
    if (d.replay) {
      const int64_t c = loadIndex(a.num_accepted, off(a.num_accepted, {b}));
      const int64_t cached = loadIndex(s.cached_tokens, off(s.cached_tokens, {sl}));
      if (c < 0 || c > cached)
        throw Error(Error::Kind::InvalidArgument, std::string(op) + ": num_accepted[" + std::to_string(b) + "] = " +
                                                      std::to_string(c) + ", expected 0.." + std::to_string(cached) +
                                                      " (cached_tokens of slot " + std::to_string(sl) + ")");
      count[size_t(b)] = c;
    }
    if (d.deferred()) {
      const int64_t r = loadIndex(s.ring_tokens, off(s.ring_tokens, {sl}));
      if (r < 0 || r > d.R)
        throw Error(Error::Kind::InvalidArgument,
                    std::string(op) + ": ring_tokens[" + std::to_string(sl) + "] = " + std::to_string(r) +
                        ", expected 0.." + std::to_string(d.R) + " (the ring depth, dim 1 of xbc_ring; slot of row " +
                        std::to_string(b) + ")");
      ringCount[size_t(b)] = r;
    }
  }

  // Per head: dt' from a raw dt.
  auto dtOf = [&](double raw, int64_t h) {
    double v = raw + (w.dt_bias.defined() ? at(w.dt_bias, {h}) : 0.0);
    if (w.dt_softplus) v = v > 20.0 ? v : std::log1p(std::exp(v));
    if (w.dt_max > w.dt_min) v = std::min(std::max(v, double(w.dt_min)), double(w.dt_max));
    return v;
  };
  std::vector<double> win(static_cast<size_t>(Dc * K)), state(static_cast<size_t>(H * P * N)),
      post(static_cast<size_t>(Dc));
  // One token of pre-conv values `in(ch)`: the conv (all channels, window slides), then the SSM
  // update of every head from the post-conv x and B and raw dt `dtRaw(h)`.
  auto token = [&](auto in, auto dtRaw) {
    for (int64_t ch = 0; ch < Dc; ++ch) {
      double acc = w.conv_bias.defined() ? at(w.conv_bias, {ch}) : 0.0;
      double* wn = &win[size_t(ch * K)];
      for (int64_t k = 0; k < K; ++k) acc += at(w.conv_weight, {ch, k}) * wn[k];
      const double v = in(ch);
      acc += at(w.conv_weight, {ch, K}) * v;
      post[size_t(ch)] = silu(acc);
      for (int64_t k = 0; k + 1 < K; ++k) wn[k] = wn[k + 1];
      wn[K - 1] = v;
    }
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / G);
      const double dtv = dtOf(dtRaw(h), h), decay = std::exp(at(w.A, {h}) * dtv);
      for (int64_t p = 0; p < P; ++p)
        for (int64_t n = 0; n < N; ++n) {
          double& st = state[size_t((h * P + p) * N + n)];
          st = st * decay + post[size_t(HP + g * N + n)] * dtv * post[size_t(h * P + p)];
        }
    }
  };

  for (int64_t b = 0; b < d.batch; ++b) {
    const int64_t sl = slot[size_t(b)];
    if (sl == -1) continue;
    for (int64_t ch = 0; ch < Dc; ++ch)
      for (int64_t k = 0; k < K; ++k) win[size_t(ch * K + k)] = at(s.conv_state, {sl, ch, k});
    for (int64_t h = 0; h < H; ++h)
      for (int64_t p = 0; p < P; ++p)
        for (int64_t n = 0; n < N; ++n) state[size_t((h * P + p) * N + n)] = at(s.ssm_state, {sl, h, p, n});

    // Replay: the ring's tokens (deferred), the accepted cached drafts, then commit (deferred:
    // only when the ring cannot take them, or with replay only; else they go to the ring).
    const int64_t c = count[size_t(b)], r = ringCount[size_t(b)];
    auto replay = [&](const TensorView& xbc, const TensorView& dtRaw, int64_t tokens) {
      for (int64_t t = 0; t < tokens; ++t)
        token([&](int64_t ch) { return at(xbc, {sl, t, ch}); }, [&](int64_t h) { return at(dtRaw, {sl, t, h}); });
    };
    replay(s.xbc_ring, s.dt_ring, r);
    replay(s.xbc_cache, s.dt_cache, c);
    const bool commit = d.deferred() ? r + c > 0 && (!d.verify || r + c > d.R) : c > 0;
    if (d.deferred()) {
      if (!commit)
        for (int64_t t = 0; t < c; ++t) {
          for (int64_t ch = 0; ch < Dc; ++ch)
            storeElement(s.xbc_ring, off(s.xbc_ring, {sl, r + t, ch}), at(s.xbc_cache, {sl, t, ch}));
          for (int64_t h = 0; h < H; ++h)
            storeElement(s.dt_ring, off(s.dt_ring, {sl, r + t, h}), at(s.dt_cache, {sl, t, h}));
        }
      storeElement(s.ring_tokens, off(s.ring_tokens, {sl}), commit ? 0.0 : double(r + c));
    }
    if (commit) {
      for (int64_t ch = 0; ch < Dc; ++ch)
        for (int64_t k = 0; k < K; ++k)
          storeElement(s.conv_state, off(s.conv_state, {sl, ch, k}), win[size_t(ch * K + k)]);
      for (int64_t h = 0; h < H; ++h)
        for (int64_t p = 0; p < P; ++p)
          for (int64_t n = 0; n < N; ++n)
            storeElement(s.ssm_state, off(s.ssm_state, {sl, h, p, n}), state[size_t((h * P + p) * N + n)]);
    }
    if (!d.verify) {
      storeElement(s.cached_tokens, off(s.cached_tokens, {sl}), 0.0);
      continue;
    }

    // Verify: the drafts from the corrected (unrounded) state; y per draft; nothing committed.
    for (int64_t t = 0; t < d.L; ++t) {
      token([&](int64_t ch) { return at(a.xBC, {b, t, ch}); }, [&](int64_t h) { return at(a.dt, {b, t, h}); });
      for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h / (H / G);
        const double Dh = w.D.defined() ? at(w.D, {h}) : 0.0;
        for (int64_t p = 0; p < P; ++p) {
          double y = 0;
          for (int64_t n = 0; n < N; ++n) y += state[size_t((h * P + p) * N + n)] * post[size_t(HP + GN + g * N + n)];
          y += Dh * post[size_t(h * P + p)];
          if (a.z.defined()) y *= silu(at(a.z, {b, t, h, p}));
          storeElement(a.y, off(a.y, {b, t, h, p}), y);
        }
      }
    }
    // The drafts into the cache, exactly.
    for (int64_t t = 0; t < d.L; ++t) {
      for (int64_t ch = 0; ch < Dc; ++ch)
        storeElement(s.xbc_cache, off(s.xbc_cache, {sl, t, ch}), at(a.xBC, {b, t, ch}));
      for (int64_t h = 0; h < H; ++h) storeElement(s.dt_cache, off(s.dt_cache, {sl, t, h}), at(a.dt, {b, t, h}));
    }
    storeElement(s.cached_tokens, off(s.cached_tokens, {sl}), double(d.L));
  }
}

}  // namespace ssmjit::reference

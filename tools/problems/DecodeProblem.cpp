#include "tools/problems/DecodeProblem.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <stdexcept>

namespace ssmjit::testing {

namespace {
HostTensor contiguous(DType t, const std::vector<int64_t>& shape, std::mt19937_64& rng) {
  return makeTensor(t, shape, Layout{}, rng);
}
int64_t at(const HostTensor& t, int64_t i) { return static_cast<int64_t>(loadElement(t.view(), i)); }
}  // namespace

std::string DecodeCase::name() const {
  static const char* partNames[] = {"replay_verify", "replay", "verify"};
  std::string s = std::string(partNames[static_cast<int>(parts)]) + "_H" + std::to_string(H) + "_P" +
                  std::to_string(P) + "_N" + std::to_string(N) + "_G" + std::to_string(G) + "_W" + std::to_string(W) +
                  "_b" + std::to_string(batch) + "_L" + std::to_string(L) + "_Lc" + std::to_string(Lc) + "_ssm" +
                  dtypeName(ssmStateType) + "_conv" + dtypeName(convStateType) + "_x" + dtypeName(xType);
  // Every field but the seed shows, so that cases differing in one field get distinct names
  // (gtest rejects duplicates); defaults add nothing, keeping the names short.
  if (dtType != xType) s += std::string("_dt") + dtypeName(dtType);
  if (wType != DType::F32) s += std::string("_w") + dtypeName(wType);
  if (!(convBias || D || z || dtBias)) {
    s += "_noextras";
  } else {
    if (!convBias) s += "_nobias";
    if (!D) s += "_noD";
    if (!z) s += "_noz";
    if (!dtBias) s += "_nodtbias";
  }
  if (!softplus) s += "_nosoftplus";
  if (clamp) s += "_clamp";
  if (indices) s += "_idx";
  if (indices && slots != DecodeCase{}.slots) s += "_S" + std::to_string(slots);  // else S = batch
  if (R > 0) s += "_ring" + std::to_string(R);
  return s;
}

DecodeProblem::DecodeProblem(const DecodeCase& cc) : c(cc), rng(cc.seed) {
  // Rows take distinct slots (the op's rule), drawn below from a permutation of the slots.
  if (c.indices && c.slots < c.batch)
    throw std::invalid_argument("DecodeCase: slots " + std::to_string(c.slots) + " < batch " + std::to_string(c.batch) +
                                " with indices (rows need distinct slots)");
  const int64_t S = c.indices ? c.slots : c.batch, B = c.batch, Dc = c.H * c.P + 2 * c.G * c.N;
  convState = contiguous(c.convStateType, {S, Dc, c.W - 1}, rng);
  fillUniform(convState, rng, -1, 1);
  ssmState = contiguous(c.ssmStateType, {S, c.H, c.P, c.N}, rng);
  fillUniform(ssmState, rng, -1, 1);
  // Per-slot token rows of `depth` (pre-conv xBC and raw dt) and how many each slot holds.
  auto tokenRows = [&](int64_t depth, std::mt19937_64& g, HostTensor& x, HostTensor& dts, HostTensor& count) {
    x = contiguous(c.xType, {S, depth, Dc}, g);
    fillUniform(x, g, -1, 1);
    dts = contiguous(c.dtType, {S, depth, c.H}, g);
    fillUniform(dts, g, c.softplus ? -3 : 0.01, c.softplus ? 0.5 : 0.2);
    count = contiguous(DType::I32, {S}, g);
    for (int64_t s = 0; s < S; ++s)
      storeElement(count.view(), s, double(std::uniform_int_distribution<int64_t>(0, depth)(g)));
  };
  tokenRows(c.Lc, rng, xbcCache, dtCache, cachedTokens);
  arrivals = contiguous(DType::I32, {S}, rng);
  std::fill(arrivals.bytes.begin(), arrivals.bytes.end(), 0);
  if (c.R > 0) {  // from a generator of their own: every other tensor equals the R = 0 problem's
    std::mt19937_64 g(c.seed ^ 0x9e3779b97f4a7c15ULL);
    tokenRows(c.R, g, xbcRing, dtRing, ringTokens);
  }
  convW = contiguous(c.wType, {Dc, c.W}, rng);
  fillUniform(convW, rng, -0.5, 0.5);
  if (c.convBias) {
    convB = contiguous(c.wType, {Dc}, rng);
    fillUniform(convB, rng, -0.5, 0.5);
  }
  A = contiguous(DType::F32, {c.H}, rng);
  fillUniform(A, rng, -2, -0.5);
  if (c.D) {
    D = contiguous(DType::F32, {c.H}, rng);
    fillUniform(D, rng, -1, 1);
  }
  if (c.dtBias) {
    dtBias = contiguous(DType::F32, {c.H}, rng);
    fillUniform(dtBias, rng, -0.5, 0.5);
  }
  if (c.indices) {
    std::vector<int64_t> s(static_cast<size_t>(S));
    std::iota(s.begin(), s.end(), 0);
    std::shuffle(s.begin(), s.end(), rng);
    idx = contiguous(DType::I32, {B}, rng);
    for (int64_t b = 0; b < B; ++b) storeElement(idx.view(), b, b == 1 ? -1.0 : double(s[size_t(b)]));
  }
  if (c.parts != DecodeStepParts::VerifyOnly) accepted = contiguous(DType::I32, {B}, rng);
  if (c.parts != DecodeStepParts::ReplayOnly) {
    xbc = contiguous(c.xType, {B, c.L, Dc}, rng);
    dt = contiguous(c.dtType, {B, c.L, c.H}, rng);
    if (c.z) z = contiguous(c.xType, {B, c.L, c.H, c.P}, rng);
    y = contiguous(c.xType, {B, c.L, c.H, c.P}, rng);
  }
  nextRound(2);
}

void DecodeProblem::nextRound(int acceptMode) {
  if (xbc.defined) fillUniform(xbc, rng, -1, 1);
  if (dt.defined) fillUniform(dt, rng, c.softplus ? -3 : 0.01, c.softplus ? 0.5 : 0.2);
  if (z.defined) fillUniform(z, rng, -2, 2);
  if (y.defined) std::fill(y.bytes.begin(), y.bytes.end(), kPoison);
  if (!accepted.defined) return;
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t s = idx.defined ? at(idx, b) : b;
    const int64_t n = s < 0 ? 0 : at(cachedTokens, s);
    const int64_t v = acceptMode == 0 ? 0 : acceptMode == 1 ? n : std::uniform_int_distribution<int64_t>(0, n)(rng);
    storeElement(accepted.view(), b, double(s < 0 ? 0 : v));
  }
}

Mamba2DecodeState DecodeProblem::state(const Viewer& view) const {
  Mamba2DecodeState s;
  s.conv_state = view(convState);
  s.ssm_state = view(ssmState);
  s.xbc_cache = view(xbcCache);
  s.dt_cache = view(dtCache);
  s.cached_tokens = view(cachedTokens);
  s.arrivals = view(arrivals);
  s.xbc_ring = view(xbcRing);
  s.dt_ring = view(dtRing);
  s.ring_tokens = view(ringTokens);
  return s;
}

Mamba2MixerWeights DecodeProblem::weights(const Viewer& view) const {
  Mamba2MixerWeights w;
  w.conv_weight = view(convW);
  w.conv_bias = view(convB);
  w.A = view(A);
  w.D = view(D);
  w.dt_bias = view(dtBias);
  w.dt_softplus = c.softplus;
  if (c.clamp) {
    w.dt_min = 0.01f;
    w.dt_max = 0.3f;
  }
  return w;
}

Mamba2DecodeStepArgs DecodeProblem::args(const Viewer& view) const {
  Mamba2DecodeStepArgs a;
  a.state_indices = view(idx);
  a.num_accepted = view(accepted);
  a.xBC = view(xbc);
  a.dt = view(dt);
  a.z = view(z);
  a.y = view(y);
  a.parts = c.parts;
  return a;
}

std::vector<char> DecodeProblem::rowsVerified() const {
  std::vector<char> w(static_cast<size_t>(c.batch), 0);
  for (int64_t b = 0; b < c.batch && c.parts != DecodeStepParts::ReplayOnly; ++b)
    w[static_cast<size_t>(b)] = (idx.defined ? at(idx, b) : b) >= 0;
  return w;
}

std::vector<char> DecodeProblem::slotsCommitted() const {
  std::vector<char> w(static_cast<size_t>(ssmState.meta.shape[0]), 0);
  for (int64_t b = 0; b < c.batch && accepted.defined; ++b) {
    const int64_t s = idx.defined ? at(idx, b) : b;
    if (s < 0) continue;
    const int64_t n = at(accepted, b) + (c.R > 0 ? at(ringTokens, s) : 0);
    const bool overflows = c.R == 0 || c.parts == DecodeStepParts::ReplayOnly || n > c.R;
    if (n > 0 && overflows) w[static_cast<size_t>(s)] = 1;
  }
  return w;
}

std::vector<HostTensor*> DecodeProblem::all() {
  return {&convState, &ssmState, &xbcCache, &dtCache, &cachedTokens, &arrivals, &convW, &convB,   &A,      &D,
          &dtBias,    &idx,      &accepted, &xbc,     &dt,           &z,        &y,     &xbcRing, &dtRing, &ringTokens};
}

}  // namespace ssmjit::testing

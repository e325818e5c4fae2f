// Mamba-2 decode-step problems for the tests and `ssmjit bench-decode`: one mixer layer's decode
// state (random conv and SSM states, caches holding random drafts with a random count per slot,
// zeroed arrivals), its weights, and a step's inputs (random drafts, accepted counts within what
// each slot's cache holds, poisoned y), as host tensors; nextRound() draws the next step.
#pragma once
#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "ssmjit/ops.h"
#include "tools/problems/ConvProblem.h"  // DeviceTensors
#include "tools/problems/HostTensor.h"

namespace ssmjit::testing {

struct DecodeCase {
  int64_t H = 4, P = 16, N = 16, G = 2, W = 4;
  int64_t batch = 3, slots = 5, L = 4, Lc = 4;  // Lc >= L
  int64_t R = 0;  // ring depth: > 0 deferred commit (a ring holding a random count per slot)
  DType ssmStateType = DType::F32, convStateType = DType::F32;
  DType xType = DType::F32;   // xBC, xbc_cache, z, y
  DType dtType = DType::F32;  // dt, dt_cache
  DType wType = DType::F32;   // conv weight and bias
  bool convBias = true, D = true, z = true, dtBias = true, softplus = true, clamp = false;
  bool indices = true;  // state_indices: distinct slots in a permuted order, row 1 = -1 when batch > 1
  DecodeStepParts parts = DecodeStepParts::ReplayAndVerify;
  uint64_t seed = 1;
  std::string name() const;  // a gtest-safe name
};
// gtest prints a parameterised case by its name (else its bytes would go into CTest's test names).
inline std::ostream& operator<<(std::ostream& os, const DecodeCase& c) { return os << c.name(); }

// all() order (fixed; undefined tensors still listed): 0 convState, 1 ssmState, 2 xbcCache,
// 3 dtCache, 4 cachedTokens, 5 arrivals, 6 convW, 7 convB, 8 A, 9 D, 10 dtBias, 11 idx,
// 12 accepted, 13 xbc, 14 dt, 15 z, 16 y, 17 xbcRing, 18 dtRing, 19 ringTokens
struct DecodeProblem {
  DecodeCase c;
  std::mt19937_64 rng;
  HostTensor convState, ssmState, xbcCache, dtCache, cachedTokens, arrivals;
  HostTensor xbcRing, dtRing, ringTokens;  // with R > 0
  HostTensor convW, convB, A, D, dtBias;
  HostTensor idx, accepted, xbc, dt, z, y;
  explicit DecodeProblem(const DecodeCase& c);
  Mamba2DecodeState state(const Viewer& view = hostView) const;
  Mamba2MixerWeights weights(const Viewer& view = hostView) const;
  Mamba2DecodeStepArgs args(const Viewer& view = hostView) const;
  // Fresh random drafts (xbc, dt, z) and y re-poisoned; accepted[b] for each non-pad row chosen
  // from cachedTokens' current host values: mode 0 -> 0, 1 -> all cached, 2 -> uniform in [0, cached].
  void nextRound(int acceptMode);
  std::vector<char> rowsVerified() const;  // per row of y: not a pad, when the step verifies
  // Per slot: the step writes its states (its row replays accepted drafts; deferred: ring tokens
  // and accepted drafts that overflow the ring, or any with ReplayOnly), from the host values
  // before the step.
  std::vector<char> slotsCommitted() const;
  std::vector<HostTensor*> all();
};
inline Mamba2DecodeState deviceState(const DecodeProblem& p, const DeviceTensors& d) { return p.state(d.viewer()); }
inline Mamba2MixerWeights deviceWeights(const DecodeProblem& p, const DeviceTensors& d) {
  return p.weights(d.viewer());
}

}  // namespace ssmjit::testing

// A fake mamba2_decode_step call (FakeTensors.h) for the CPU tests of its check and its
// specialisation. Tensor k is the same argument in every call (1 conv_state ... 17 y), so a test
// that swaps one tensor for another fakeView(k, ...) keeps the addresses apart.
#pragma once
#include <cstdint>

#include "ssmjit/ops.h"
#include "tests/support/FakeTensors.h"

namespace ssmjit::testing {

// `batch` rows of L drafts over `slots` state slots with caches `cacheDepth` deep; H heads of P
// channels, G groups of N states, conv width W. `optional`: conv_bias, D, dt_bias, the slot
// indices and z too.
struct FakeDecodeShape {
  int64_t batch = 3, slots = 5, H = 4, P = 8, N = 16, G = 2, W = 4, L = 4, cacheDepth = 6;
  DType convState = DType::BF16;
  bool optional = true;
};

struct FakeDecodeStepCall {
  Mamba2DecodeState s;
  Mamba2MixerWeights w;
  Mamba2DecodeStepArgs a;
};

inline FakeDecodeStepCall fakeDecodeStepCall(const FakeDecodeShape& v) {
  const int64_t B = v.batch, S = v.slots, H = v.H, P = v.P, L = v.L, Lc = v.cacheDepth;
  const int64_t Dc = H * P + 2 * v.G * v.N;  // the conv's channels: x, B and C
  FakeDecodeStepCall c;
  c.s.conv_state = fakeView(1, v.convState, {S, Dc, v.W - 1});
  c.s.ssm_state = fakeView(2, DType::F32, {S, H, P, v.N});
  c.s.xbc_cache = fakeView(3, DType::BF16, {S, Lc, Dc});
  c.s.dt_cache = fakeView(4, DType::BF16, {S, Lc, H});
  c.s.cached_tokens = fakeView(5, DType::I32, {S});
  c.s.arrivals = fakeView(6, DType::I32, {S});
  c.w.conv_weight = fakeView(7, DType::F32, {Dc, v.W});
  c.w.A = fakeView(9, DType::F32, {H});
  c.a.num_accepted = fakeView(13, DType::I32, {B});
  c.a.xBC = fakeView(14, DType::BF16, {B, L, Dc});
  c.a.dt = fakeView(15, DType::BF16, {B, L, H});
  c.a.y = fakeView(17, DType::BF16, {B, L, H, P});
  if (v.optional) {
    c.w.conv_bias = fakeView(8, DType::BF16, {Dc});
    c.w.D = fakeView(10, DType::F32, {H});
    c.w.dt_bias = fakeView(11, DType::F32, {H});
    c.a.state_indices = fakeView(12, DType::I64, {B});
    c.a.z = fakeView(16, DType::BF16, {B, L, H, P});
  }
  return c;
}

}  // namespace ssmjit::testing

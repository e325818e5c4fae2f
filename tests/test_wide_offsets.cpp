// 64-bit offsets (ssmjit/ops.h: "64-bit offsets are used where a tensor needs them"), chosen at
// compile time: for every op, a call whose widened tensor's last element lies at offset
// INT32_MAX - 1 builds 32-bit kernels, and one whose last element lies at INT32_MAX + 1 builds
// 64-bit kernels, for each launch of the call (an offset of exactly INT32_MAX fits an int32; some
// ops keep one element of margin), and the first 64-bit kernel of each op compiles. Fake device addresses stand in for
// the tensors (only their alignment classes bind); the widened tensor is a slice of a wider buffer (its leading stride
// set so that its span is the given number of elements).
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "GpuTest.h"  // SSMJIT_REQUIRE_NVRTC
#include "kernels_dsl/CompileKernel.h"
#include "runtime/ops/CausalConv1dSpec.h"
#include "runtime/ops/Mamba2DecodeStepSpec.h"
#include "runtime/ops/SelectiveScanSpec.h"
#include "runtime/ops/SelectiveStateUpdateSpec.h"
#include "ssmjit/ops.h"
#include "tests/support/FakeDecodeStepCall.h"
#include "tests/support/FakeTensors.h"

using namespace ssmjit;
using ssmjit::testing::fakeView;

namespace {

// `v` (leading dim 2) as a slice of a wider buffer: its leading stride set so that it spans
// `span` elements from its pointer.
TensorView spanning(TensorView v, int64_t span) {
  EXPECT_EQ(v.shape[0], 2);
  v.strides[0] = 0;
  v.strides[0] = span - v.span();
  EXPECT_EQ(v.span(), span);
  return v;
}

// Spans (last offset + 1) on either side of the int32 limit.
constexpr int64_t kFits = INT32_MAX, kWide = int64_t{INT32_MAX} + 2;

// Every launch of a call: the index width each binds, "none" where a kernel binds none.
std::string indexBits(const std::vector<Specialization>& specs) {
  std::string s;
  for (const Specialization& sp : specs) {
    const int64_t* b = sp.find("meta:index_bits");
    s += (s.empty() ? "" : " ") + sp.kernel + ":" + (b ? std::to_string(*b) : "none");
  }
  return s;
}

// `specsOf(span)`: the call's launches with its widened tensor spanning `span` elements. At kFits
// every launch binds 32-bit offsets, at kWide every launch binds 64-bit ones (a kernel that binds
// no width would index the wide tensor in 32 bits), and the first of those compiles (one a call:
// the CPU suite's time).
template <class F>
void expectWidensAtTheLimit(const char* op, F specsOf) {
  SCOPED_TRACE(op);
  const std::vector<Specialization> fits = specsOf(kFits), wide = specsOf(kWide);
  ASSERT_FALSE(wide.empty());
  for (const Specialization& s : fits) EXPECT_EQ(s.get("meta:index_bits", -1), 32) << indexBits(fits);
  for (const Specialization& s : wide) EXPECT_EQ(s.get("meta:index_bits", -1), 64) << indexBits(wide);
  std::string why;
  if (!nvrtcAvailable(&why)) return;  // the selection above is checked either way
  SCOPED_TRACE(wide.front().canonical());
  EXPECT_FALSE(compileKernel(wide.front()).cubin.empty());
}

SelectiveStateUpdateArgs ssuArgs(int64_t span) {
  const int64_t B = 2, H = 8, P = 64, N = 128, G = 1;
  SelectiveStateUpdateArgs a;
  a.state = spanning(fakeView(1, DType::F32, {B, H, P, N}), span);
  a.x = fakeView(2, DType::BF16, {B, H, P});
  a.dt = fakeView(3, DType::BF16, {B, H});
  a.A = fakeView(4, DType::F32, {H});
  a.B = fakeView(5, DType::BF16, {B, G, N});
  a.C = fakeView(6, DType::BF16, {B, G, N});
  a.out = fakeView(7, DType::BF16, {B, H, P});
  a.dt_softplus = true;
  return a;
}

SelectiveStateUpdateArgs ssuTokenArgs(int64_t span) {
  const int64_t B = 2, L = 4, H = 8, P = 64, N = 128, G = 1;
  SelectiveStateUpdateArgs a = ssuArgs(kFits);
  a.x = spanning(fakeView(2, DType::BF16, {B, L, H, P}), span);
  a.dt = fakeView(3, DType::BF16, {B, L, H});
  a.B = fakeView(5, DType::BF16, {B, L, G, N});
  a.C = fakeView(6, DType::BF16, {B, L, G, N});
  a.out = fakeView(7, DType::BF16, {B, L, H, P});
  a.state = fakeView(1, DType::F32, {B, H, P, N});
  return a;
}

CausalConv1dArgs convArgs(int64_t span) {
  const int64_t B = 2, D = 96, L = 200;
  CausalConv1dArgs a;
  a.x = spanning(fakeView(1, DType::BF16, {B, D, L}), span);
  a.out = fakeView(2, DType::BF16, {B, D, L});
  a.weight = fakeView(3, DType::F32, {D, 4});
  a.bias = fakeView(4, DType::F32, {D});
  a.silu = true;
  a.initial_states = a.final_states = fakeView(5, DType::F32, {B, D, 3});
  return a;
}

CausalConv1dBackwardArgs convBackwardArgs(int64_t span) {
  const CausalConv1dArgs f = convArgs(span);
  CausalConv1dBackwardArgs a;
  a.x = f.x;
  a.weight = f.weight;
  a.bias = f.bias;
  a.silu = true;
  a.dout = fakeView(6, DType::BF16, {2, 96, 200});
  a.dx = fakeView(7, DType::BF16, {2, 96, 200});
  a.dweight = fakeView(8, DType::F32, {96, 4});
  a.dbias = fakeView(9, DType::F32, {96});
  return a;
}

CausalConv1dUpdateArgs convUpdateArgs(int64_t span) {
  const int64_t B = 2, D = 96, L = 2;
  CausalConv1dUpdateArgs a;
  a.conv_state = spanning(fakeView(1, DType::F32, {B, D, 3}), span);
  a.x = fakeView(2, DType::BF16, {B, L, D});
  a.out = fakeView(3, DType::BF16, {B, L, D});
  a.weight = fakeView(4, DType::F32, {D, 4});
  return a;
}

SelectiveScanArgs scanArgs(int64_t span) {
  const int64_t Bt = 2, D = 64, N = 16, L = 300;
  SelectiveScanArgs a;
  a.u = spanning(fakeView(1, DType::BF16, {Bt, D, L}), span);
  a.delta = fakeView(2, DType::BF16, {Bt, D, L});
  a.out = fakeView(3, DType::BF16, {Bt, D, L});
  a.A = fakeView(4, DType::F32, {D, N});
  a.B = fakeView(5, DType::BF16, {Bt, 1, N, L});
  a.C = fakeView(6, DType::BF16, {Bt, 1, N, L});
  a.delta_softplus = true;
  return a;
}

SelectiveScanBackwardArgs scanBackwardArgs(int64_t span) {
  SelectiveScanBackwardArgs b;
  b.forward = scanArgs(span);
  b.forward.out = {};
  b.dout = fakeView(7, DType::BF16, {2, 64, 300});
  b.du = fakeView(8, DType::BF16, {2, 64, 300});
  b.ddelta = fakeView(9, DType::BF16, {2, 64, 300});
  b.dA = fakeView(10, DType::F32, {64, 16});
  b.dB = fakeView(11, DType::BF16, {2, 1, 16, 300});
  b.dC = fakeView(12, DType::BF16, {2, 1, 16, 300});
  return b;
}

ssmjit::testing::FakeDecodeStepCall decodeCall(int64_t span) {
  ssmjit::testing::FakeDecodeShape v;
  v.batch = v.slots = 2, v.H = 8, v.P = 64, v.N = 128, v.G = 1, v.cacheDepth = 4;
  v.convState = DType::F32, v.optional = false;
  ssmjit::testing::FakeDecodeStepCall c = ssmjit::testing::fakeDecodeStepCall(v);
  c.s.ssm_state = spanning(c.s.ssm_state, span);
  return c;
}

}  // namespace

TEST(WideOffsets, SelectiveStateUpdate) {
  expectWidensAtTheLimit("selective_state_update", [](int64_t span) {
    return std::vector<Specialization>{detail::ssuSpecialization(ssuArgs(span), false, "sm_90a")};
  });
  expectWidensAtTheLimit("selective_state_update_tokens", [](int64_t span) {
    return std::vector<Specialization>{detail::ssuSpecialization(ssuTokenArgs(span), true, "sm_90a")};
  });
}

TEST(WideOffsets, CausalConv1d) {
  expectWidensAtTheLimit("causal_conv1d",
                         [](int64_t span) { return detail::convSpecializations(convArgs(span), "sm_90a"); });
  expectWidensAtTheLimit("causal_conv1d_backward", [](int64_t span) {
    return detail::convBackwardSpecializations(convBackwardArgs(span), "sm_90a");
  });
  expectWidensAtTheLimit("causal_conv1d_update", [](int64_t span) {
    return std::vector<Specialization>{detail::convUpdateSpecialization(convUpdateArgs(span), "sm_90a")};
  });
}

TEST(WideOffsets, SelectiveScan) {
  expectWidensAtTheLimit("selective_scan",
                         [](int64_t span) { return detail::scanSpecializations(scanArgs(span), "sm_90a"); });
  expectWidensAtTheLimit("selective_scan_backward", [](int64_t span) {
    return detail::scanBackwardSpecializations(scanBackwardArgs(span), "sm_90a");
  });
}

TEST(WideOffsets, Mamba2DecodeStep) {
  expectWidensAtTheLimit("mamba2_decode_step", [](int64_t span) {
    const auto c = decodeCall(span);
    return std::vector<Specialization>{detail::decodeStepSpecialization(c.s, c.w, c.a, "sm_90a")};
  });
}

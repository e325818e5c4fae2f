// The Mamba-2 layer's backward on the GPU against the float64 adjoint of the layer
// (reference::mamba2_layer_backward, itself checked against differences of the forward reference):
// an fp32 layer with biases, a packed row of sequences of 2 (shorter than the conv's window), 37 and
// 101 tokens (crossing chunks of 64), nonzero initial states and final-state gradients, G 2 and a
// G 1 layer with a dt clamp. Every gradient: dhidden, each weight's, the initial states'. Repeated
// calls leave the same bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "GpuTest.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/model/Mamba2Config.h"
#include "runtime/model/Mamba2Weights.h"
#include "runtime/reference/Mamba2ModelRef.h"
#include "ssmjit/mamba2.h"
#include "support/LayerSizes.h"
#include "support/RandomMamba2Layer.h"
#include "support/ReferenceMamba2Layer.h"

namespace ssmjit {
namespace {

using testing::DeviceMamba2Layer;
using testing::HostMamba2Layer;
using testing::HostTensorF32;
using testing::ReferenceLayer;

struct BackwardCase {
  int64_t groups = 2;
  float dtMin = 0, dtMax = 0;
  std::string name;
};
std::ostream& operator<<(std::ostream& os, const BackwardCase& c) { return os << c.name; }

TensorView onDevice(const DeviceBuffer& b, DType t, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(b.data(), t, shape, DeviceKind::CUDA, driver::currentDeviceId());
}

// A device buffer of `n` floats from `v` (or poisoned when v is empty).
DeviceBuffer floats(const std::vector<float>& v, size_t n) {
  DeviceBuffer b(n * 4);
  if (v.empty())
    b.fill(0xFF);
  else
    b.upload(v.data(), n);
  return b;
}

// Relative L2 and worst |got - ref| / (|ref| + rms(ref)) of a gradient; `scale` multiplies got
// first (dA to dA_log).
void expectClose(const std::vector<float>& got, const std::vector<double>& ref, const char* what,
                 const std::vector<double>& scale = {}) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double sq = 0, err = 0;
  for (double r : ref) sq += r * r;
  const double rms = std::sqrt(sq / double(ref.size()));
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = got[i] * (scale.empty() ? 1.0 : scale[i % scale.size()]), e = g - ref[i];
    err += e * e;
    worst = std::max(worst, std::isfinite(g) ? std::abs(e) / (std::abs(ref[i]) + rms) : INFINITY);
  }
  const double rel = std::sqrt(err / std::max(sq, 1e-300));
  std::fprintf(stderr, "[ measured ] %s %s: rel L2 %.3g, worst %.3g\n",
               ::testing::UnitTest::GetInstance()->current_test_info()->name(), what, rel, worst);
  // fp32 math throughout, the SSD's fp32 products on tensor cores split into 16-bit terms.
  EXPECT_LE(rel, 1e-4) << what;
  EXPECT_LE(worst, 1e-3) << what;
}

class Mamba2LayerBackwardGpu : public ::testing::TestWithParam<BackwardCase> {};

TEST_P(Mamba2LayerBackwardGpu, MatchesFloat64Adjoint) {
  SSMJIT_REQUIRE_GPU();
  SSMJIT_REQUIRE_NVRTC();
  const BackwardCase& tc = GetParam();
  Mamba2Dims d = testing::mamba2Dims(64, 8, 16, 16, tc.groups);
  d.chunk_size = 64;
  d.dt_min = tc.dtMin;
  d.dt_max = tc.dtMax;
  HostMamba2Layer host = testing::randomMamba2Layer(d, 31 + tc.groups);
  constexpr int64_t kSlots = 6;
  DeviceMamba2Layer L(host, nullptr, kSlots);
  const std::vector<int64_t> cu = {0, 2, 39, 140};
  const int64_t T = cu.back(), nseq = 3, H = d.hidden, Dc = d.convDim(), W1 = d.conv_width - 1;
  const int64_t ssmSize = d.heads * d.head_dim * d.state;

  std::mt19937_64 rng(99 + tc.groups);
  const std::vector<float> hidden = testing::randomTensor(rng, {T, H}, -1, 1).v;
  const std::vector<float> dout = testing::randomTensor(rng, {T, H}, -1, 1).v;
  // Initial states in slots 0..2, final states to slots 3..5 (their gradients given there).
  const std::vector<float> conv0 = testing::randomTensor(rng, {kSlots, Dc, W1}, -1, 1).v;
  const std::vector<float> ssm0 = testing::randomTensor(rng, {kSlots, ssmSize}, -0.5, 0.5).v;
  const std::vector<float> dconvF = testing::randomTensor(rng, {kSlots, Dc, W1}, -1, 1).v;
  const std::vector<float> dssmF = testing::randomTensor(rng, {kSlots, ssmSize}, -0.5, 0.5).v;
  L.s.conv_state = onDevice(L.buffers.emplace_back(floats(conv0, conv0.size())), DType::F32, {kSlots, Dc, W1});
  L.s.ssm_state =
      onDevice(L.buffers.emplace_back(floats(ssm0, ssm0.size())), DType::F32, {kSlots, d.heads, d.head_dim, d.state});

  std::vector<int32_t> cu32(cu.begin(), cu.end()), initSlots = {0, 1, 2}, finalSlots = {3, 4, 5};
  DeviceBuffer cuBuf = DeviceBuffer::fromHost(cu32), initBuf = DeviceBuffer::fromHost(initSlots),
               finalBuf = DeviceBuffer::fromHost(finalSlots);
  DeviceBuffer hid = floats(hidden, hidden.size()), out = floats({}, hidden.size()), dy = floats(dout, dout.size());
  Mamba2LayerArgs a;
  a.hidden = onDevice(hid, DType::F32, {T, H});
  a.out = onDevice(out, DType::F32, {T, H});
  a.cu_seqlens = onDevice(cuBuf, DType::I32, {nseq + 1});
  a.initial_state_indices = onDevice(initBuf, DType::I32, {nseq});
  a.state_indices = onDevice(finalBuf, DType::I32, {nseq});
  const int64_t fws = mamba2_layer_workspace_size(L.dims, L.w, L.s, a, Mamba2LayerMode::Prefill);
  DeviceBuffer fwsBuf(static_cast<size_t>(fws) * 4);
  a.workspace = onDevice(fwsBuf, DType::F32, {fws});
  mamba2_layer_prefill(L.dims, L.w, L.s, a);
  checkDeviceErrors();

  // Gradients, poisoned.
  std::vector<DeviceBuffer> bufs;
  auto grad = [&](const TensorView& like) {
    if (!like.defined()) return TensorView{};
    bufs.emplace_back(floats({}, static_cast<size_t>(like.numel())));
    TensorView v = like;
    v.data = bufs.back().data();
    return v;
  };
  Mamba2LayerBackwardArgs b;
  b.forward = a;
  b.dout = onDevice(dy, DType::F32, {T, H});
  DeviceBuffer dcf = floats(dconvF, dconvF.size()), dsf = floats(dssmF, dssmF.size());
  b.dfinal_states.conv_state = onDevice(dcf, DType::F32, {kSlots, Dc, W1});
  b.dfinal_states.ssm_state = onDevice(dsf, DType::F32, {kSlots, d.heads, d.head_dim, d.state});
  b.grads.dhidden = grad(a.hidden);
  const Mamba2LayerWeights& w = L.w;
  Mamba2LayerWeights& g = b.grads.weights;
  g.in_proj = grad(w.in_proj);
  g.in_proj_bias = grad(w.in_proj_bias);
  g.conv_weight = grad(w.conv_weight);
  g.conv_bias = grad(w.conv_bias);
  g.A = grad(w.A);
  g.D = grad(w.D);
  g.dt_bias = grad(w.dt_bias);
  g.norm_weight = grad(w.norm_weight);
  g.out_proj = grad(w.out_proj);
  g.out_proj_bias = grad(w.out_proj_bias);
  b.grads.initial_states.conv_state = grad(L.s.conv_state);
  b.grads.initial_states.ssm_state = grad(L.s.ssm_state);
  const int64_t bws = mamba2_layer_backward_workspace_size(L.dims, L.w, L.s, b);
  DeviceBuffer bwsBuf(static_cast<size_t>(bws) * 4);
  bwsBuf.fill(0xFF);  // its contents on entry must not matter
  b.workspace = onDevice(bwsBuf, DType::F32, {bws});
  mamba2_layer_backward(L.dims, L.w, L.s, b);
  checkDeviceErrors();

  // The reference from the same inputs.
  ReferenceLayer R(host);
  std::vector<reference::Mamba2SequenceState> init(nseq), dfinal(nseq);
  for (int64_t i = 0; i < nseq; ++i) {
    const auto at = [](const std::vector<float>& v, int64_t slot, int64_t n) {
      return std::vector<double>(v.begin() + slot * n, v.begin() + (slot + 1) * n);
    };
    init[i] = {at(conv0, initSlots[i], Dc * W1), at(ssm0, initSlots[i], ssmSize)};
    dfinal[i] = {at(dconvF, finalSlots[i], Dc * W1), at(dssmF, finalSlots[i], ssmSize)};
  }
  const reference::Mamba2LayerGradientsRef ref =
      reference::mamba2_layer_backward(R.cfg, R.w, std::vector<double>(hidden.begin(), hidden.end()), cu, init,
                                       std::vector<double>(dout.begin(), dout.end()), dfinal);

  auto down = [](const TensorView& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    driver::check(driver::api().cuMemcpyDtoH(v.data(), reinterpret_cast<CUdeviceptr>(t.data), v.size() * 4),
                  "cuMemcpyDtoH");
    return v;
  };
  expectClose(down(b.grads.dhidden), ref.hidden, "dhidden");
  expectClose(down(g.in_proj), ref.in_proj_weight, "in_proj");
  expectClose(down(g.in_proj_bias), ref.in_proj_bias, "in_proj_bias");
  expectClose(down(g.conv_weight), ref.conv1d_weight, "conv_weight");
  expectClose(down(g.conv_bias), ref.conv1d_bias, "conv_bias");
  expectClose(down(g.A), ref.A_log, "A (as dA_log = dA * A)", std::vector<double>(host.A.v.begin(), host.A.v.end()));
  expectClose(down(g.D), ref.D, "D");
  expectClose(down(g.dt_bias), ref.dt_bias, "dt_bias");
  expectClose(down(g.norm_weight), ref.gated_norm, "norm_weight");
  expectClose(down(g.out_proj), ref.out_proj_weight, "out_proj");
  expectClose(down(g.out_proj_bias), ref.out_proj_bias, "out_proj_bias");
  const std::vector<float> dconv0 = down(b.grads.initial_states.conv_state),
                           dssm0 = down(b.grads.initial_states.ssm_state);
  std::vector<float> gotConv, gotSsm;
  std::vector<double> refConv, refSsm;
  for (int64_t i = 0; i < nseq; ++i) {
    gotConv.insert(gotConv.end(), dconv0.begin() + initSlots[i] * Dc * W1,
                   dconv0.begin() + (initSlots[i] + 1) * Dc * W1);
    gotSsm.insert(gotSsm.end(), dssm0.begin() + initSlots[i] * ssmSize, dssm0.begin() + (initSlots[i] + 1) * ssmSize);
    refConv.insert(refConv.end(), ref.initial_states[i].conv.begin(), ref.initial_states[i].conv.end());
    refSsm.insert(refSsm.end(), ref.initial_states[i].ssm.begin(), ref.initial_states[i].ssm.end());
  }
  expectClose(gotConv, refConv, "d(initial conv states)");
  expectClose(gotSsm, refSsm, "d(initial ssm states)");

  // Deterministic: a second backward leaves the same bytes.
  const std::vector<float> first = down(g.in_proj), firstA = down(g.A);
  mamba2_layer_backward(L.dims, L.w, L.s, b);
  checkDeviceErrors();
  EXPECT_EQ(down(g.in_proj), first);
  EXPECT_EQ(down(g.A), firstA);
}

INSTANTIATE_TEST_SUITE_P(Layers, Mamba2LayerBackwardGpu,
                         ::testing::Values(BackwardCase{2, 0, 0, "G2"}, BackwardCase{1, 0.01f, 0.2f, "G1DtClamp"}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace ssmjit

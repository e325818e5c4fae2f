// The float64 reference of gated_rms_norm_backward against central differences of the forward
// reference: loss = sum(dout * out), every input perturbed one element at a time, for each gate
// placement and with groups.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ssmjit/ops.h"
#include "ssmjit/reference.h"

using namespace ssmjit;

namespace {

struct Rows {
  std::vector<float> v;
  TensorView view(int64_t T, int64_t D) {
    return TensorView::contiguous(v.data(), DType::F32, {T, D}, DeviceKind::CPU);
  }
};

std::vector<float> uniform(size_t n, std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<float> v(n);
  for (float& e : v) e = static_cast<float>(u(rng));
  return v;
}

void checkAgainstDifferences(bool gated, bool normFirst, int64_t groups) {
  constexpr int64_t T = 3, D = 8;
  std::mt19937_64 rng(11 + groups + 2 * gated + 4 * normFirst);
  Rows x{uniform(T * D, rng, -2, 2)}, z{uniform(T * D, rng, -3, 3)}, dout{uniform(T * D, rng, -1, 1)};
  std::vector<float> weight = uniform(D, rng, -1.5, 1.5);
  Rows out{std::vector<float>(T * D)}, dx{std::vector<float>(T * D)}, dz{std::vector<float>(T * D)};
  std::vector<float> dweight(D);
  GatedRmsNormArgs f;
  f.x = x.view(T, D);
  if (gated) f.z = z.view(T, D);
  f.weight = TensorView::contiguous(weight.data(), DType::F32, {D}, DeviceKind::CPU);
  f.out = out.view(T, D);
  f.group_size = D / groups;
  f.norm_before_gate = normFirst;
  auto loss = [&] {
    reference::gated_rms_norm(f);
    double l = 0;
    for (size_t i = 0; i < out.v.size(); ++i) l += double(dout.v[i]) * out.v[i];
    return l;
  };
  GatedRmsNormBackwardArgs b;
  b.forward = f;
  b.forward.out = TensorView{};
  b.dout = dout.view(T, D);
  b.dx = dx.view(T, D);
  if (gated) b.dz = dz.view(T, D);
  b.dweight = TensorView::contiguous(dweight.data(), DType::F32, {D}, DeviceKind::CPU);
  reference::gated_rms_norm_backward(b);
  // Steps of 1e-2 on fp32 values: the difference's truncation (1e-4 relative) and the outputs'
  // rounding (1e-5) stay far below what a missing term of the adjoint changes.
  auto check = [&](std::vector<float>& input, const std::vector<float>& grad, const char* name) {
    for (size_t i = 0; i < input.size(); ++i) {
      const float keep = input[i], h = 1e-2f;
      input[i] = keep + h;
      const double up = loss();
      input[i] = keep - h;
      const double down = loss();
      input[i] = keep;
      const double numeric = (up - down) / (2.0 * h);
      EXPECT_NEAR(grad[i], numeric, 2e-3 * (1.0 + std::fabs(numeric))) << name << "[" << i << "]";
    }
  };
  check(x.v, dx.v, "dx");
  if (gated) check(z.v, dz.v, "dz");
  check(weight, dweight, "dweight");
}

TEST(NormBackwardReference, PlainNormMatchesDifferencesOfTheForward) { checkAgainstDifferences(false, false, 1); }
TEST(NormBackwardReference, GateFirstMatchesDifferencesOfTheForward) { checkAgainstDifferences(true, false, 2); }
TEST(NormBackwardReference, NormFirstMatchesDifferencesOfTheForward) { checkAgainstDifferences(true, true, 2); }

}  // namespace

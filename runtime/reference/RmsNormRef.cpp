// The float64 CPU references of rms_norm and gated_rms_norm (see ssmjit/reference.h).
#include <cmath>
#include <cstdint>
#include <vector>

#include "runtime/ops/RmsNormCheck.h"
#include "runtime/reference/ElementAccess.h"
#include "ssmjit/reference.h"

namespace ssmjit::reference {
namespace {

double silu(double v) { return v / (1.0 + std::exp(-v)); }

// Row t of a (T, D) tensor, as stored.
std::vector<double> row(const TensorView& t, int64_t r, int64_t D) {
  std::vector<double> v(static_cast<size_t>(D));
  for (int64_t d = 0; d < D; ++d) v[static_cast<size_t>(d)] = loadElement(t, r * t.strides[0] + d * t.strides[1]);
  return v;
}

void storeRow(const TensorView& t, int64_t r, const std::vector<double>& v) {
  for (size_t d = 0; d < v.size(); ++d)
    storeElement(t, r * t.strides[0] + static_cast<int64_t>(d) * t.strides[1], v[d]);
}

// g (one row) scaled by rsqrt(mean(g^2) + eps) over each group, times the weight, and by silu(z)
// afterwards when `gateAfter` is given.
std::vector<double> normalise(const std::vector<double>& g, const detail::NormDims& d, const TensorView& weight,
                              double eps, const std::vector<double>* gateAfter) {
  std::vector<double> y(g.size());
  for (int64_t k = 0; k < d.groups(); ++k) {
    const size_t first = static_cast<size_t>(k * d.groupSize), end = first + static_cast<size_t>(d.groupSize);
    double squares = 0;
    for (size_t i = first; i < end; ++i) squares += g[i] * g[i];
    const double rstd = 1.0 / std::sqrt(squares / static_cast<double>(d.groupSize) + eps);
    for (size_t i = first; i < end; ++i) {
      y[i] = g[i] * rstd * loadElement(weight, static_cast<int64_t>(i) * weight.strides[0]);
      if (gateAfter) y[i] *= silu((*gateAfter)[i]);
    }
  }
  return y;
}

}  // namespace

void rms_norm(const RmsNormArgs& a) {
  const detail::NormDims d = detail::checkRmsNormArgs(a, DeviceKind::CPU, "reference::rms_norm");
  for (int64_t t = 0; t < d.T; ++t) {
    std::vector<double> r = row(a.x, t, d.D);  // every input of the row is read before it is written
    if (a.residual.defined()) {
      const std::vector<double> res = row(a.residual, t, d.D);
      for (size_t i = 0; i < r.size(); ++i) r[i] += res[i];
    }
    const std::vector<double> y = normalise(r, d, a.weight, a.eps, nullptr);
    if (a.residual_out.defined()) storeRow(a.residual_out, t, r);
    storeRow(a.out, t, y);
  }
}

void gated_rms_norm(const GatedRmsNormArgs& a) {
  const detail::NormDims d = detail::checkGatedRmsNormArgs(a, DeviceKind::CPU, "reference::gated_rms_norm");
  for (int64_t t = 0; t < d.T; ++t) {
    std::vector<double> g = row(a.x, t, d.D);
    std::vector<double> z;
    if (a.z.defined()) z = row(a.z, t, d.D);
    if (a.z.defined() && !a.norm_before_gate)
      for (size_t i = 0; i < g.size(); ++i) g[i] *= silu(z[i]);
    storeRow(a.out, t, normalise(g, d, a.weight, a.eps, a.z.defined() && a.norm_before_gate ? &z : nullptr));
  }
}

}  // namespace ssmjit::reference

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

void gated_rms_norm_backward(const GatedRmsNormBackwardArgs& a) {
  const detail::NormDims d =
      detail::checkGatedRmsNormBackwardArgs(a, DeviceKind::CPU, "reference::gated_rms_norm_backward");
  const GatedRmsNormArgs& f = a.forward;
  const bool gated = f.z.defined(), normFirst = f.norm_before_gate;
  const size_t GS = static_cast<size_t>(d.groupSize);
  std::vector<double> dweight(static_cast<size_t>(d.D), 0.0);
  for (int64_t t = 0; t < d.T; ++t) {
    const std::vector<double> x = row(f.x, t, d.D), dy = row(a.dout, t, d.D);
    const std::vector<double> z = gated ? row(f.z, t, d.D) : std::vector<double>(x.size(), 0.0);
    std::vector<double> dx(x.size()), dz(x.size());
    for (size_t first = 0; first < x.size(); first += GS) {
      std::vector<double> s(GS, 1.0), ds(GS, 0.0), h(GS), n(GS), gn(GS), dn(GS);
      double squares = 0, dots = 0;
      for (size_t i = 0; i < GS; ++i) {
        const double v = z[first + i], sig = 1.0 / (1.0 + std::exp(-v));
        if (gated) s[i] = v * sig, ds[i] = sig * (1.0 + v * (1.0 - sig));
        h[i] = normFirst ? x[first + i] : x[first + i] * s[i];
        squares += h[i] * h[i];
      }
      const double rstd = 1.0 / std::sqrt(squares / static_cast<double>(GS) + f.eps);
      for (size_t i = 0; i < GS; ++i) {
        const double w = loadElement(f.weight, static_cast<int64_t>(first + i) * f.weight.strides[0]);
        n[i] = h[i] * rstd;
        gn[i] = normFirst ? dy[first + i] * s[i] : dy[first + i];
        dn[i] = gn[i] * w;
        dots += dn[i] * n[i];
        dweight[first + i] += gn[i] * n[i];
        if (normFirst) dz[first + i] = dy[first + i] * n[i] * w * ds[i];
      }
      const double meanDot = dots / static_cast<double>(GS);
      for (size_t i = 0; i < GS; ++i) {
        const double dh = rstd * (dn[i] - n[i] * meanDot);
        dx[first + i] = normFirst ? dh : dh * s[i];
        if (!normFirst) dz[first + i] = dh * x[first + i] * ds[i];
      }
    }
    storeRow(a.dx, t, dx);
    if (gated) storeRow(a.dz, t, dz);
  }
  for (int64_t i = 0; i < d.D; ++i) storeElement(a.dweight, i * a.dweight.strides[0], dweight[static_cast<size_t>(i)]);
}

}  // namespace ssmjit::reference

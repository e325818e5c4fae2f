// The float64 reference of linear (see ssmjit/reference.h).
#include "runtime/ops/LinearCheck.h"
#include "runtime/reference/ElementAccess.h"
#include "ssmjit/reference.h"

namespace ssmjit::reference {

void linear(const LinearArgs& a) {
  const detail::LinearDims d = detail::checkLinearArgs(a, DeviceKind::CPU, "reference::linear");
  const TensorView &x = a.x, &w = a.weight, &y = a.y;
  for (int64_t m = 0; m < d.M; ++m)
    for (int64_t n = 0; n < d.N; ++n) {
      double acc = a.bias.defined() ? loadElement(a.bias, n * a.bias.strides[0]) : 0.0;
      for (int64_t k = 0; k < d.K; ++k)
        acc +=
            loadElement(x, m * x.strides[0] + k * x.strides[1]) * loadElement(w, n * w.strides[0] + k * w.strides[1]);
      storeElement(y, m * y.strides[0] + n * y.strides[1], acc);
    }
}

void linear_backward(const LinearBackwardArgs& a) {
  const detail::LinearDims d = detail::checkLinearBackwardArgs(a, DeviceKind::CPU, "reference::linear_backward");
  const TensorView &x = a.x, &w = a.weight, &dy = a.dy;
  auto at = [](const TensorView& t, int64_t r, int64_t c) {
    return loadElement(t, r * t.strides[0] + c * t.strides[1]);
  };
  if (a.dx.defined())
    for (int64_t m = 0; m < d.M; ++m)
      for (int64_t k = 0; k < d.K; ++k) {
        double acc = 0;
        for (int64_t n = 0; n < d.N; ++n) acc += at(dy, m, n) * at(w, n, k);
        storeElement(a.dx, m * a.dx.strides[0] + k * a.dx.strides[1], acc);
      }
  if (a.dweight.defined())
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t k = 0; k < d.K; ++k) {
        double acc = 0;
        for (int64_t m = 0; m < d.M; ++m) acc += at(dy, m, n) * at(x, m, k);
        storeElement(a.dweight, n * a.dweight.strides[0] + k * a.dweight.strides[1], acc);
      }
  if (a.dbias.defined())
    for (int64_t n = 0; n < d.N; ++n) {
      double acc = 0;
      for (int64_t m = 0; m < d.M; ++m) acc += at(dy, m, n);
      storeElement(a.dbias, n * a.dbias.strides[0], acc);
    }
}

}  // namespace ssmjit::reference

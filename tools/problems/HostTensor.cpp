#include "tools/problems/HostTensor.h"

#include <algorithm>
#include <cmath>

namespace ssmjit::testing {

TensorView HostTensor::view() const {
  TensorView v = meta;
  v.device = DeviceKind::CPU;
  v.data = defined ? const_cast<uint8_t*>(bytes.data()) + byteOffset : nullptr;
  return v;
}

HostTensor makeTensor(DType dtype, const std::vector<int64_t>& shape, const Layout& lay, std::mt19937_64& rng) {
  HostTensor h;
  h.defined = true;
  h.meta.dtype = dtype;
  h.meta.ndim = static_cast<int>(shape.size());
  const int nd = h.meta.ndim;
  std::vector<int64_t> alloc(shape);
  if (lay.padded)
    for (auto& s : alloc) s += 1 + static_cast<int64_t>(rng() % 3);
  std::vector<int> order(static_cast<size_t>(nd));  // memory order, outermost first
  for (int d = 0; d < nd; ++d) order[d] = d;
  if (lay.transposed && nd >= 2) std::swap(order[nd - 1], order[nd - 2]);
  int64_t stride = 1;
  for (int k = nd - 1; k >= 0; --k) {
    const int d = order[k];
    h.meta.shape[d] = shape[d];
    h.meta.strides[d] = stride;
    stride *= std::max<int64_t>(alloc[d], 1);
  }
  const int eb = dtypeBytes(dtype);
  h.byteOffset = lay.offset ? eb : 0;
  h.bytes.assign(static_cast<size_t>(stride * eb + h.byteOffset + 16), kPoison);
  return h;
}

void fillUniform(HostTensor& h, std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  const TensorView v = h.view();
  forEachElement(v, [&](int64_t off, const std::vector<int64_t>&) { storeElement(v, off, u(rng)); });
}

Compared compareTensor(const HostTensor& ref, const std::vector<uint8_t>& got,
                       const std::vector<char>& writtenByFirstIndex) {
  return compareTensor(ref, got, ref.bytes, writtenByFirstIndex);
}

Compared compareTensor(const HostTensor& ref, const std::vector<uint8_t>& got, const std::vector<uint8_t>& before,
                       const std::vector<char>& writtenByFirstIndex) {
  Compared r;
  const TensorView rv = ref.view();
  HostTensor gotT = ref;
  gotT.bytes = got;
  const TensorView gv = gotT.view();
  const int eb = dtypeBytes(rv.dtype);
  std::vector<char> covered(ref.bytes.size(), 0);
  double num = 0, den = 0;
  auto where = [](int64_t off, const std::vector<int64_t>& i) {
    std::string s = "element at offset " + std::to_string(off) + " [";
    for (size_t k = 0; k < i.size(); ++k) s += (k ? ", " : "") + std::to_string(i[k]);
    return s + "]";
  };
  forEachElement(rv, [&](int64_t off, const std::vector<int64_t>& i) {
    if (!writtenByFirstIndex[static_cast<size_t>(i[0])]) return;
    const size_t byte = static_cast<size_t>(ref.byteOffset + off * eb);
    std::fill(covered.begin() + byte, covered.begin() + byte + eb, 1);
    const double g = loadElement(gv, off), e = loadElement(rv, off);
    ++r.written;
    if (!std::isfinite(g) || !std::isfinite(e)) {
      if (r.violations++ == 0)
        r.first = where(off, i) + " is " + std::to_string(g) + ", reference " + std::to_string(e);
      return;
    }
    r.maxAbsErr = std::max(r.maxAbsErr, std::fabs(g - e));
    num += (g - e) * (g - e);
    den += e * e;
  });
  for (size_t k = 0; k < got.size(); ++k) {
    if (covered[k] || got[k] == before[k]) continue;
    if (r.violations++ == 0)
      r.first = "byte " + std::to_string(k) + " (not to be written) changed from " + std::to_string(before[k]) +
                " to " + std::to_string(got[k]);
  }
  r.relL2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  const double rms = r.written ? std::sqrt(den / double(r.written)) : 0.0;
  std::string worst;
  forEachElement(rv, [&](int64_t off, const std::vector<int64_t>& i) {
    if (!writtenByFirstIndex[static_cast<size_t>(i[0])]) return;
    const double g = loadElement(gv, off), e = loadElement(rv, off);
    if (!std::isfinite(g) || !std::isfinite(e)) return;
    const double err = std::fabs(g - e) / (std::fabs(e) + rms + 1e-300);
    if (err > r.maxErr) {
      r.maxErr = err;
      worst = where(off, i) + ": " + std::to_string(g) + ", reference " + std::to_string(e);
    }
  });
  if (r.violations == 0 && !worst.empty()) r.first = "worst " + worst;
  return r;
}

TensorView tokenSlice(TensorView v, int64_t t) {
  if (!v.defined()) return v;
  v.data = static_cast<char*>(v.data) + t * v.strides[1] * dtypeBytes(v.dtype);
  for (int d = 1; d + 1 < v.ndim; ++d) {
    v.shape[d] = v.shape[d + 1];
    v.strides[d] = v.strides[d + 1];
  }
  --v.ndim;
  return v;
}

}  // namespace ssmjit::testing

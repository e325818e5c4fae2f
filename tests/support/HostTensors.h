// Host-tensor helpers of the validation tests (tools/problems/HostTensor.h): reading and writing
// entries, views of part of an axis, poisoned outputs, and every tensor's bytes for "refused and
// wrote nothing" checks.
#pragma once
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tests/support/ExpectError.h"
#include "tools/problems/HostTensor.h"

namespace ssmjit::testing {

// Every tensor's bytes in the problem's all() order (undefined ones empty).
template <class Problem>
std::vector<std::vector<uint8_t>> bytesOf(Problem& p) {
  std::vector<std::vector<uint8_t>> b;
  for (HostTensor* t : p.all()) b.push_back(t->bytes);
  return b;
}

// Expects `run` to refuse p's arguments with "<op>: ..." naming every part, and to leave p's
// tensors as they were. Returns the message.
template <class Problem, class Run>
std::string expectRefusedUnwritten(Problem& p, const std::string& op, const std::vector<std::string>& parts, Run run) {
  const std::vector<std::vector<uint8_t>> before = bytesOf(p);
  const std::string m = invalidArgMessage(run);
  EXPECT_EQ(m.rfind(op + ": ", 0), 0u) << m;
  for (const std::string& part : parts)
    EXPECT_NE(m.find(part), std::string::npos) << "missing '" << part << "' in: " << m;
  EXPECT_EQ(bytesOf(p), before) << "a tensor was written";
  return m;
}

// Entry k of a rank-1 index tensor.
inline void setIndex(HostTensor& t, int64_t k, int64_t v) { storeElement(t.view(), k * t.meta.strides[0], double(v)); }

// The element at index `idx` (one entry an axis).
inline double value(const HostTensor& t, const std::vector<int64_t>& idx) {
  int64_t off = 0;
  for (size_t k = 0; k < idx.size(); ++k) off += idx[k] * t.meta.strides[k];
  return loadElement(t.view(), off);
}

// `len` entries of axis `ax` from `start` on (an undefined view stays undefined).
inline TensorView slice(TensorView t, int ax, int64_t start, int64_t len) {
  if (!t.defined()) return t;
  t.data = static_cast<char*>(t.data) + start * t.strides[ax] * dtypeBytes(t.dtype);
  t.shape[ax] = len;
  return t;
}

// A tensor of random values (seed 0), contiguous unless `lay` says otherwise: an output whose
// every element must be written.
inline HostTensor poisoned(DType t, const std::vector<int64_t>& shape, const Layout& lay = {}) {
  std::mt19937_64 rng(0);
  return makeTensor(t, shape, lay, rng);
}

// A tensor holding `v` in row-major element order (entries past v's end 0).
inline HostTensor hostTensor(DType t, const std::vector<int64_t>& shape, const std::vector<double>& v,
                             const Layout& lay = {}) {
  HostTensor h = poisoned(t, shape, lay);
  size_t k = 0;
  forEachElement(h.view(), [&](int64_t off, const std::vector<int64_t>&) {
    storeElement(h.view(), off, k < v.size() ? v[k] : 0.0);
    ++k;
  });
  return h;
}

// A tensor of values drawn uniformly in [lo, hi).
inline HostTensor randomTensor(DType t, const std::vector<int64_t>& shape, std::mt19937_64& rng, const Layout& lay = {},
                               double lo = -1, double hi = 1) {
  HostTensor h = makeTensor(t, shape, lay, rng);
  fillUniform(h, rng, lo, hi);
  return h;
}

// The tensor's view, or an undefined view where the tensor is.
inline TensorView viewOrNone(const HostTensor& h) { return h.defined ? h.view() : TensorView{}; }

// Every element, in row-major order, as double (none where the tensor is undefined).
inline std::vector<double> valuesOf(const HostTensor& t) {
  std::vector<double> v;
  if (t.defined)
    forEachElement(t.view(),
                   [&](int64_t off, const std::vector<int64_t>&) { v.push_back(loadElement(t.view(), off)); });
  return v;
}

// Elements that are NaN or infinite.
inline int64_t nonFinite(const HostTensor& t) {
  int64_t n = 0;
  forEachElement(t.view(),
                 [&](int64_t off, const std::vector<int64_t>&) { n += !std::isfinite(loadElement(t.view(), off)); });
  return n;
}

}  // namespace ssmjit::testing

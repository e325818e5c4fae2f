// A host tensor copied into another layout, the values unchanged: the layouts a caller hands the
// ops in a model rather than the contiguous ones the problems draw. One description covers them:
// the view as columns [lead, lead + inner) of a (rows, lead + inner + trail) buffer, its first
// `rowDims` dims indexing the rows and the rest packed row-major in the columns.
//   contiguous:            {0, 0, 0}
//   offset start:          {0, k, 0}       (k elements in: the pointer loses its 16-byte alignment)
//   a column slice:        {r, lead, trail} (x, B, C, dt of one (tokens, width) in_proj output:
//                                            token stride = the full width, the pointer offset)
// Every byte outside the view is poisoned (HostTensor.h), so that a kernel writing past a sliced
// output shows in compareTensor, and one reading a gap reads NaN. Index tensors change dtype the
// same way (int32 to int64: values converted exactly). Header-only: the tests use it, the tool
// does not.
#pragma once
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "tools/problems/HostTensor.h"

namespace ssmjit::testing {

struct Slice {
  int rowDims = 0;
  int64_t lead = 0, trail = 0;  // elements before and after the view in each row
};
inline constexpr Slice kContiguous{0, 0, 0};

// `h` (undefined stays undefined) in `s`, stored as `dtype` (h's own when absent). The same
// dtype copies each element's bytes (poison included, bit for bit); another converts the value.
inline HostTensor relayout(const HostTensor& h, const Slice& s, DType dtype) {
  if (!h.defined) return h;
  const TensorView src = h.view();
  if (s.rowDims < 0 || s.rowDims > src.ndim || s.lead < 0 || s.trail < 0)
    throw std::invalid_argument("relayout: slice {" + std::to_string(s.rowDims) + ", " + std::to_string(s.lead) + ", " +
                                std::to_string(s.trail) + "} does not fit a view of rank " + std::to_string(src.ndim));
  HostTensor r;
  r.defined = true;
  r.meta = src;
  r.meta.data = nullptr;
  r.meta.dtype = dtype;
  int64_t stride = 1;
  for (int d = src.ndim - 1; d >= s.rowDims; --d) {
    r.meta.strides[d] = stride;
    stride *= src.shape[d];
  }
  stride += s.lead + s.trail;  // the row width
  int64_t rows = 1;
  for (int d = s.rowDims - 1; d >= 0; --d) {
    r.meta.strides[d] = stride;
    stride *= src.shape[d];
    rows *= src.shape[d];
  }
  const int64_t width = s.rowDims > 0 ? r.meta.strides[s.rowDims - 1] : stride;
  const int eb = dtypeBytes(dtype);
  r.byteOffset = s.lead * eb;
  r.bytes.assign(static_cast<size_t>(rows * width * eb + 16), kPoison);
  const TensorView dst = r.view();
  const bool same = dtype == src.dtype;
  forEachElement(src, [&](int64_t off, const std::vector<int64_t>& i) {
    int64_t to = 0;
    for (int d = 0; d < src.ndim; ++d) to += i[d] * dst.strides[d];
    if (same)
      std::memcpy(static_cast<char*>(dst.data) + to * eb, static_cast<const char*>(src.data) + off * eb, eb);
    else
      storeElement(dst, to, loadElement(src, off));
  });
  return r;
}
inline HostTensor relayout(const HostTensor& h, const Slice& s) { return relayout(h, s, h.meta.dtype); }

// `h` broadcast along `dim` (stride 0 there): every index along it holds the value at index 0.
// The reference reads through the strides, so it sees the broadcast values too.
inline HostTensor broadcastAlong(const HostTensor& h, int dim) {
  if (!h.defined) return h;
  const TensorView src = h.view();
  HostTensor r;
  r.defined = true;
  r.meta = src;
  r.meta.data = nullptr;
  int64_t stride = 1;
  for (int d = src.ndim - 1; d >= 0; --d) {
    r.meta.strides[d] = d == dim ? 0 : stride;
    if (d != dim) stride *= src.shape[d];
  }
  const int eb = dtypeBytes(src.dtype);
  r.bytes.assign(static_cast<size_t>(stride * eb + 16), kPoison);
  const TensorView dst = r.view();
  forEachElement(dst, [&](int64_t to, const std::vector<int64_t>& i) {
    int64_t from = 0;
    for (int d = 0; d < src.ndim; ++d) from += (d == dim ? 0 : i[d]) * src.strides[d];
    std::memcpy(static_cast<char*>(dst.data) + to * eb, static_cast<const char*>(src.data) + from * eb, eb);
  });
  return r;
}

}  // namespace ssmjit::testing

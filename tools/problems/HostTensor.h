// Host tensors for checking kernels against the float64 reference: owned bytes in contiguous,
// padded, transposed or offset layouts with every gap poisoned, random fills, and a comparison
// that checks both the values written and that nothing else changed. Element values go through
// the reference's own conversions (runtime/reference/ElementAccess.h).
#pragma once
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "runtime/reference/ElementAccess.h"
#include "ssmjit/tensor.h"

namespace ssmjit::testing {

using reference::loadElement;
using reference::storeElement;

// Outputs and layout gaps are filled with this byte: 0xFFFF / 0xFFFFFFFF are NaN in fp16, bf16
// and fp32, so an element left unwritten is visible and one written by mistake is caught.
inline constexpr uint8_t kPoison = 0xFF;

// Calls f(offset, index) for every logical element of a view, in row-major index order (index:
// one entry per dim; offset: sum of index * stride).
template <class F>
void forEachElement(const TensorView& t, F f) {
  if (t.numel() == 0) return;
  std::vector<int64_t> idx(static_cast<size_t>(t.ndim), 0);
  while (true) {
    int64_t off = 0;
    for (int d = 0; d < t.ndim; ++d) off += idx[d] * t.strides[d];
    f(off, idx);
    int d = t.ndim - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < t.shape[d]) break;
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

// Memory layouts a host tensor can take. Kernels must read and write through strides only.
struct Layout {
  bool padded = false;      // every dim allocated 1..3 larger: strides with gaps, no multiples of 16
  bool transposed = false;  // the last two dims swapped in memory (inner stride != 1)
  bool offset = false;      // data starts one element into the allocation (alignment < 16 bytes)
};

// A host tensor: owned bytes (gaps poisoned) and a CPU view into them.
struct HostTensor {
  std::vector<uint8_t> bytes;
  TensorView meta;  // shape, strides, dtype; data == nullptr when undefined
  int64_t byteOffset = 0;
  bool defined = false;

  TensorView view() const;  // points into this object's bytes (re-made after copies)
};

// How a problem's call sees its tensors: its own CPU views (hostView) or device copies
// (DeviceTensors::viewer). An undefined tensor is an undefined view.
using Viewer = std::function<TensorView(const HostTensor&)>;
inline TensorView hostView(const HostTensor& h) { return h.defined ? h.view() : TensorView{}; }

// A tensor of `shape` in `lay`, every byte poisoned. Draws from `rng` only for padded layouts.
HostTensor makeTensor(DType dtype, const std::vector<int64_t>& shape, const Layout& lay, std::mt19937_64& rng);

// Every element U(lo, hi), drawn in row-major index order.
void fillUniform(HostTensor& h, std::mt19937_64& rng, double lo, double hi);

// The outcome of comparing what a run left in one tensor with what the reference left.
struct Compared {
  double relL2 = 0;        // ||got - ref|| / ||ref|| over the elements that should be written
  double maxErr = 0;       // max |got - ref| / (|ref| + rms(ref)): catches a few bad elements
                           // that the L2 norm of a large tensor would hide
  double maxAbsErr = 0;    // max |got - ref|
  int64_t written = 0;     // elements compared by value
  int64_t violations = 0;  // written elements not finite, or other bytes that changed
  std::string first;       // the first violation (else the worst element), for messages
};

// `writtenByFirstIndex[i]` says whether elements with first index i are written (row of out,
// slot of state); those are compared with `ref` by value. Every other byte (other elements and
// layout gaps) must equal `before` bit for bit: untouched outputs stay poisoned, untouched state
// stays as it was. Without `before`, ref's own bytes (the reference leaves those alone).
Compared compareTensor(const HostTensor& ref, const std::vector<uint8_t>& got,
                       const std::vector<char>& writtenByFirstIndex);
Compared compareTensor(const HostTensor& ref, const std::vector<uint8_t>& got, const std::vector<uint8_t>& before,
                       const std::vector<char>& writtenByFirstIndex);

// Token t of a multi-token view: the token axis (dim 1) removed.
TensorView tokenSlice(TensorView v, int64_t t);

}  // namespace ssmjit::testing

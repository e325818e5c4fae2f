// Host-side problems for the selective-state-update tests: random inputs stored in every
// supported dtype and in contiguous, padded, transposed and offset layouts, poisoned outputs and
// gaps, the slots a call may write, and comparisons that check both the values written and that
// nothing else changed. CPU only; the GPU tests mirror these buffers byte for byte.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "ssmjit/tensor.h"

namespace ssutest {

using ssmjit::DType;
using ssmjit::StateWrite;
using ssmjit::TensorView;

// Outputs and layout gaps are filled with this byte: 0xFFFF / 0xFFFFFFFF are NaN in fp16, bf16
// and fp32, so an element left unwritten is visible and one written by mistake is caught.
constexpr uint8_t kPoison = 0xFF;

inline double loadValue(const TensorView& t, int64_t off) {
  const char* p = static_cast<const char*>(t.data) + off * ssmjit::dtypeBytes(t.dtype);
  switch (t.dtype) {
    case DType::F32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::F16:
    case DType::BF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return t.dtype == DType::F16 ? ssmjit::reference::fromHalfBits(h)
                                   : ssmjit::reference::fromBFloat16Bits(h);
    }
    case DType::I32: {
      int32_t i;
      std::memcpy(&i, p, 4);
      return i;
    }
    case DType::I64: {
      int64_t i;
      std::memcpy(&i, p, 8);
      return static_cast<double>(i);
    }
  }
  return NAN;
}

inline void storeValue(const TensorView& t, int64_t off, double v) {
  char* p = static_cast<char*>(t.data) + off * ssmjit::dtypeBytes(t.dtype);
  switch (t.dtype) {
    case DType::F32: {
      const auto f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      return;
    }
    case DType::F16:
    case DType::BF16: {
      const uint16_t h = t.dtype == DType::F16 ? ssmjit::reference::toHalfBits(v)
                                               : ssmjit::reference::toBFloat16Bits(v);
      std::memcpy(p, &h, 2);
      return;
    }
    case DType::I32: {
      const auto i = static_cast<int32_t>(v);
      std::memcpy(p, &i, 4);
      return;
    }
    case DType::I64: {
      const auto i = static_cast<int64_t>(v);
      std::memcpy(p, &i, 8);
      return;
    }
  }
}

// Calls f(offset, index) for every logical element of a view (index: one entry per dim).
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

// Memory layouts a test tensor can take. The kernel must read and write through strides only.
struct Layout {
  bool padded = false;      // every dim allocated 1..3 larger: strides with gaps, no multiples of 16
  bool transposed = false;  // the last two dims swapped in memory (inner stride != 1)
  bool offset = false;      // data starts one element into the allocation (alignment < 16 bytes)
};

// A host tensor: owned bytes (gaps poisoned) and a CPU view into them.
struct HostTensor {
  std::vector<uint8_t> bytes;
  TensorView meta;           // shape, strides, dtype; data == nullptr when undefined
  int64_t byteOffset = 0;
  bool defined = false;

  TensorView view() const {  // the view points into this object's bytes (re-made after copies)
    TensorView v = meta;
    v.device = ssmjit::DeviceKind::CPU;
    v.data = defined ? const_cast<uint8_t*>(bytes.data()) + byteOffset : nullptr;
    return v;
  }
};

inline HostTensor makeTensor(DType dtype, const std::vector<int64_t>& shape, const Layout& lay,
                             std::mt19937_64& rng) {
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
  const int eb = ssmjit::dtypeBytes(dtype);
  h.byteOffset = lay.offset ? eb : 0;
  h.bytes.assign(static_cast<size_t>(stride * eb + h.byteOffset + 16), kPoison);
  return h;
}

inline void fillUniform(HostTensor& h, std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  const TensorView v = h.view();
  forEachElement(v, [&](int64_t off, const std::vector<int64_t>&) { storeValue(v, off, u(rng)); });
}

// One test problem. Mamba-1 ignores H and G (P is the channel count D).
struct SsuCase {
  bool mamba2 = true;
  bool tokens = true;  // the multi-token op (else the one-token op; L must be 1)
  int64_t batch = 2, L = 1, H = 4, P = 8, N = 16, G = 2;
  DType stateT = DType::F32, inT = DType::F32, outT = DType::F32;  // inT: x, dt, B, C, z
  bool hasD = true, hasZ = true, hasDtBias = true, softplus = true, clamp = false;
  bool stateIdx = false;
  int pads = 0;  // rows marked -1 (needs stateIdx)
  DType idxT = DType::I32;
  StateWrite write = StateWrite::Final;
  bool strided = false;  // padded / transposed / offset layouts on most tensors
  uint64_t seed = 1;

  bool allF32() const {
    return stateT == DType::F32 && inT == DType::F32 && outT == DType::F32;
  }
  std::string name() const {
    auto dt = [](DType t) {
      return std::string(t == DType::F32 ? "f32" : t == DType::BF16 ? "bf16" : "f16");
    };
    std::string s = mamba2 ? "m2_H" + std::to_string(H) + "P" + std::to_string(P) + "N" +
                                 std::to_string(N) + "G" + std::to_string(G)
                           : "m1_D" + std::to_string(P) + "N" + std::to_string(N);
    s += "_b" + std::to_string(batch) + (tokens ? "_L" + std::to_string(L) : "_1tok");
    s += "_st" + dt(stateT) + "_in" + dt(inT) + "_out" + dt(outT);
    s += write == StateWrite::Final ? "_final" : write == StateWrite::None ? "_none" : "_pertoken";
    if (hasD) s += "_D";
    if (hasZ) s += "_z";
    if (hasDtBias) s += "_bias";
    if (softplus) s += "_softplus";
    if (clamp) s += "_clamp";
    if (stateIdx) s += std::string("_idx") + (idxT == DType::I32 ? "32" : "64");
    if (pads) s += "_pads" + std::to_string(pads);
    if (strided) s += "_strided";
    return s;
  }
};

struct SsuProblem {
  SsuCase c;
  int64_t S = 0;
  HostTensor state, x, dt, A, B, C, D, z, dtBias, out, idx, dst;
  std::vector<int64_t> readSlot;        // per row; -1: pad
  std::vector<char> slotMayBeWritten;   // per slot: written by this call (all else must not change)
  float dtMin = 0, dtMax = 0;

  ssmjit::SelectiveStateUpdateArgs args() const {
    ssmjit::SelectiveStateUpdateArgs a;
    a.state = state.view();
    a.x = x.view();
    a.dt = dt.view();
    a.A = A.view();
    a.B = B.view();
    a.C = C.view();
    a.D = D.view();
    a.z = z.view();
    a.dt_bias = dtBias.view();
    a.out = out.view();
    a.state_batch_indices = idx.view();
    a.dst_state_indices = dst.view();
    a.dt_softplus = c.softplus;
    a.dt_min = dtMin;
    a.dt_max = dtMax;
    a.state_write = c.write;
    return a;
  }
  // Every tensor, in one fixed order (undefined ones included).
  std::vector<HostTensor*> all() {
    return {&state, &x, &dt, &A, &B, &C, &D, &z, &dtBias, &out, &idx, &dst};
  }
  std::vector<const HostTensor*> all() const {
    return {&state, &x, &dt, &A, &B, &C, &D, &z, &dtBias, &out, &idx, &dst};
  }
};

inline SsuProblem makeProblem(SsuCase c) {
  if (c.pads > 0 || c.write == StateWrite::PerToken) c.stateIdx = true;  // they need slots
  if (!c.mamba2) c.H = c.G = 1;
  if (!c.tokens) c.L = 1;
  SsuProblem p;
  p.c = c;
  std::mt19937_64 rng(c.seed * 0x9E3779B97F4A7C15ull + 12345);
  const Layout plain{}, padded{true, false, false}, transposed{false, true, true},
      offsetOnly{false, false, true};
  const Layout& lx = c.strided ? padded : plain;
  const Layout& lbc = c.strided ? transposed : plain;
  const Layout& lst = c.strided ? padded : plain;
  const Layout& lout = c.strided ? offsetOnly : plain;

  // Slots: the rows read a random permutation of slots; PerToken writes go to other slots.
  const bool perToken = c.write == StateWrite::PerToken;
  p.S = c.stateIdx ? c.batch + 3 + (perToken ? c.batch * c.L : 0) : c.batch;
  std::vector<int64_t> slots(static_cast<size_t>(p.S));
  for (int64_t i = 0; i < p.S; ++i) slots[i] = i;
  if (c.stateIdx) std::shuffle(slots.begin(), slots.end(), rng);
  p.readSlot.assign(slots.begin(), slots.begin() + c.batch);
  for (int k = 0; k < c.pads && k < c.batch; ++k) {
    // Spread pads over the batch (first, last, then every few rows).
    const int64_t r = k == 0 ? 0 : k == 1 ? c.batch - 1 : (k * 7) % c.batch;
    p.readSlot[r] = -1;
  }

  auto lead = [&](std::vector<int64_t> rest) {
    std::vector<int64_t> s{c.batch};
    if (c.tokens) s.push_back(c.L);
    s.insert(s.end(), rest.begin(), rest.end());
    return s;
  };
  const std::vector<int64_t> xs = c.mamba2 ? lead({c.H, c.P}) : lead({c.P});
  const std::vector<int64_t> dts = c.mamba2 ? lead({c.H}) : lead({c.P});
  const std::vector<int64_t> bcs = c.mamba2 ? lead({c.G, c.N}) : lead({c.N});
  const std::vector<int64_t> heads = {c.mamba2 ? c.H : c.P};
  const std::vector<int64_t> sts = c.mamba2 ? std::vector<int64_t>{p.S, c.H, c.P, c.N}
                                            : std::vector<int64_t>{p.S, c.P, c.N};

  p.state = makeTensor(c.stateT, sts, lst, rng);
  fillUniform(p.state, rng, -1, 1);
  p.x = makeTensor(c.inT, xs, lx, rng);
  fillUniform(p.x, rng, -1, 1);
  p.dt = makeTensor(c.inT, dts, lx, rng);
  if (c.softplus) {
    fillUniform(p.dt, rng, -4, 1);
    // One value past the softplus threshold (dt' > 20 is used as is).
    storeValue(p.dt.view(), 0, 21.5);
  } else {
    fillUniform(p.dt, rng, 0.01, 0.3);
  }
  p.A = makeTensor(DType::F32, c.mamba2 ? heads : std::vector<int64_t>{c.P, c.N}, plain, rng);
  fillUniform(p.A, rng, c.mamba2 ? -4 : -2, -0.1);
  p.B = makeTensor(c.inT, bcs, lbc, rng);
  fillUniform(p.B, rng, -1, 1);
  p.C = makeTensor(c.inT, bcs, lbc, rng);
  fillUniform(p.C, rng, -1, 1);
  if (c.hasD) {
    p.D = makeTensor(DType::F32, heads, c.strided ? padded : plain, rng);
    fillUniform(p.D, rng, -1, 1);
  }
  if (c.hasZ) {
    p.z = makeTensor(c.inT, xs, lx, rng);
    fillUniform(p.z, rng, -3, 3);
  }
  if (c.hasDtBias) {
    p.dtBias = makeTensor(DType::F32, heads, plain, rng);
    if (c.softplus)
      fillUniform(p.dtBias, rng, -1, 0.5);
    else
      fillUniform(p.dtBias, rng, 0, 0.1);
  }
  if (c.clamp) {
    p.dtMin = 0.05f;  // inside the range of dt', so both bounds bite
    p.dtMax = 0.5f;
  }
  p.out = makeTensor(c.outT, xs, lout, rng);  // all poison

  if (c.stateIdx) {
    p.idx = makeTensor(c.idxT, {c.batch}, c.strided ? padded : plain, rng);
    const TensorView v = p.idx.view();
    for (int64_t b = 0; b < c.batch; ++b) storeValue(v, b * v.strides[0], double(p.readSlot[b]));
  }
  p.slotMayBeWritten.assign(static_cast<size_t>(p.S), 0);
  if (c.write == StateWrite::Final)
    for (int64_t s : p.readSlot)
      if (s >= 0) p.slotMayBeWritten[s] = 1;
  if (perToken) {
    p.dst = makeTensor(c.idxT, c.tokens ? std::vector<int64_t>{c.batch, c.L}
                                        : std::vector<int64_t>{c.batch},
                       c.strided ? padded : plain, rng);
    const TensorView v = p.dst.view();
    int64_t next = c.batch;  // slots[batch..] are read by nobody
    forEachElement(v, [&](int64_t off, const std::vector<int64_t>& i) {
      // About one token in four skips its write (-1); token 0 of row 0 always writes.
      const bool skip = (rng() % 4 == 0) && !(i[0] == 0 && (!c.tokens || i[1] == 0));
      const int64_t s = skip ? -1 : slots[next++];
      storeValue(v, off, double(s));
      if (s >= 0 && p.readSlot[i[0]] >= 0) p.slotMayBeWritten[s] = 1;
    });
  }
  return p;
}

// The outcome of comparing what a run left in one tensor with what the reference left.
struct Compared {
  double relL2 = 0;         // ||got - ref|| / ||ref|| over the elements that should be written
  double maxErr = 0;        // max |got - ref| / (|ref| + rms(ref)): catches a few bad elements
                            // that the L2 norm of a large tensor would hide
  int64_t written = 0;      // elements compared by value
  int64_t violations = 0;   // written elements not finite, or other bytes that changed
  std::string first;        // the first violation, for the failure message
};

// `writtenByFirstIndex[i]` says whether elements with first index i are written (row of out,
// slot of state). Every other byte (other elements and layout gaps) must equal `ref`'s bit for
// bit: untouched outputs stay poisoned, untouched state stays as it was.
inline Compared compareTensor(const HostTensor& ref, const std::vector<uint8_t>& got,
                              const std::vector<char>& writtenByFirstIndex) {
  Compared r;
  const TensorView rv = ref.view();
  HostTensor gotT = ref;
  gotT.bytes = got;
  const TensorView gv = gotT.view();
  const int eb = ssmjit::dtypeBytes(rv.dtype);
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
    const double g = loadValue(gv, off), e = loadValue(rv, off);
    ++r.written;
    if (!std::isfinite(g) || !std::isfinite(e)) {
      if (r.violations++ == 0)
        r.first = where(off, i) + " is " + std::to_string(g) + ", reference " + std::to_string(e);
      return;
    }
    num += (g - e) * (g - e);
    den += e * e;
  });
  for (size_t k = 0; k < got.size(); ++k) {
    if (covered[k] || got[k] == ref.bytes[k]) continue;
    if (r.violations++ == 0)
      r.first = "byte " + std::to_string(k) + " (not to be written) changed from " +
                std::to_string(ref.bytes[k]) + " to " + std::to_string(got[k]);
  }
  r.relL2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  const double rms = r.written ? std::sqrt(den / double(r.written)) : 0.0;
  std::string worst;
  forEachElement(rv, [&](int64_t off, const std::vector<int64_t>& i) {
    if (!writtenByFirstIndex[static_cast<size_t>(i[0])]) return;
    const double g = loadValue(gv, off), e = loadValue(rv, off);
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

// Token t of a multi-token view: the token axis (dim 1) removed.
inline TensorView tokenSlice(TensorView v, int64_t t) {
  if (!v.defined()) return v;
  v.data = static_cast<char*>(v.data) + t * v.strides[1] * ssmjit::dtypeBytes(v.dtype);
  for (int d = 1; d + 1 < v.ndim; ++d) {
    v.shape[d] = v.shape[d + 1];
    v.strides[d] = v.strides[d + 1];
  }
  --v.ndim;
  return v;
}

inline void runReference(const SsuProblem& p) {
  if (p.c.tokens)
    ssmjit::reference::selective_state_update_tokens(p.args());
  else
    ssmjit::reference::selective_state_update(p.args());
}

// Rows of out that are written: every row but the pads.
inline std::vector<char> rowsWritten(const SsuProblem& p) {
  std::vector<char> w(static_cast<size_t>(p.c.batch));
  for (int64_t b = 0; b < p.c.batch; ++b) w[b] = p.readSlot[b] >= 0;
  return w;
}

}  // namespace ssutest

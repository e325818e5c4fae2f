// How a kernel's tiles are spread over threads, as the emitter computes with it. One blocked
// parent layout per kernel (2-D: sizePerThread x threadsPerWarp x warpsPerCTA, dim 1 fastest);
// 2-D tiles use it, 1-D tiles are slices of it (slice(a): the parent with axis a removed),
// scalars are uniform. The IR carries these as #sj.blocked / #sj.slice attributes (SJAttrs.td);
// this is their arithmetic, shared by the assign-layouts pass (which chooses), vectorize-accesses
// and the CUDA emitter (which index).
#pragma once
#include <cstdint>
#include <string>

#include "compiler/dialect/SJDialect.h"

namespace ssmjit::layout {

struct Parent {
  int64_t spt[2] = {1, 1}, tpw[2] = {1, 32}, wpc[2] = {1, 1};
  Parent() = default;
  explicit Parent(sj::BlockedAttr a);
  sj::BlockedAttr attr(mlir::MLIRContext* ctx) const;
  int64_t threads(int d) const { return tpw[d] * wpc[d]; }
  std::string str() const;
};

// Elements one thread holds along parent dim d for a tile extent S (power of two).
inline int64_t perThread(const Parent& p, int d, int64_t S) {
  int64_t T = p.threads(d);
  if (S >= T * p.spt[d]) return S / T;
  if (S >= T) return S / T;
  return 1;  // fewer elements than threads: replicated
}
// Contiguous run of registers along d (coordinates consecutive).
inline int64_t runLength(const Parent& p, int d, int64_t S) {
  int64_t n = perThread(p, d, S);
  return S >= p.threads(d) * p.spt[d] ? p.spt[d] : n;
}

// Layout of one value: blocked (2-D), slice0/slice1 (1-D, #sj.slice<dim = 0 or 1>), or scalar.
enum class Kind { Scalar, Blocked, Slice0, Slice1 };
const char* kindName(Kind k);
// The kind of a layout attribute (#sj.any and #sj.scalar give Scalar).
Kind kindOf(mlir::Attribute layout);
// The layout attribute of a kind, for the kernel's parent.
mlir::Attribute attrOf(Kind k, sj::BlockedAttr parent);
// The parent dim a 1-D slice runs along.
inline int sliceDim(Kind k) { return k == Kind::Slice0 ? 1 : 0; }

// The layout sj-assign-layouts gave v (sj.layouts of its defining op); null for block arguments
// and before that pass.
mlir::Attribute layoutAttr(mlir::Value v);
// The kernel's parent layout (sj.parent); the default Parent before sj-assign-layouts.
Parent parentOf(mlir::Operation* kernel);

}  // namespace ssmjit::layout

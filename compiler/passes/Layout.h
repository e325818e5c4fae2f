// How a kernel's tiles are spread over threads. One blocked parent layout per kernel (2-D:
// sizePerThread x threadsPerWarp x warpsPerCTA, dim 1 fastest); 2-D tiles use it, 1-D tiles are
// slices of it (slice(a): the parent with axis a removed), scalars are uniform. Shared by the
// assign-layouts pass (which chooses) and the CUDA emitter (which indexes).
#pragma once
#include <cstdint>
#include <string>

namespace ssmjit::layout {

struct Parent {
  int64_t spt[2] = {1, 1}, tpw[2] = {1, 32}, wpc[2] = {1, 1};
  int64_t threads(int d) const { return tpw[d] * wpc[d]; }
  std::string str() const;
  static bool parse(const std::string& s, Parent& out);
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

// Layout of one value: "blocked" (2-D), "slice0"/"slice1" (1-D), or "" (scalar).
enum class Kind { Scalar, Blocked, Slice0, Slice1 };
inline const char* kindName(Kind k) {
  switch (k) {
    case Kind::Blocked: return "blocked";
    case Kind::Slice0: return "slice0";
    case Kind::Slice1: return "slice1";
    default: return "scalar";
  }
}
inline Kind parseKind(const std::string& s) {
  if (s == "blocked") return Kind::Blocked;
  if (s == "slice0") return Kind::Slice0;
  if (s == "slice1") return Kind::Slice1;
  return Kind::Scalar;
}
// The parent dim a 1-D slice runs along.
inline int sliceDim(Kind k) { return k == Kind::Slice0 ? 1 : 0; }

}  // namespace ssmjit::layout

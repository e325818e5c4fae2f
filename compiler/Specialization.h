// What a kernel is compiled for: the values bound at the call. Plain C++ (no MLIR), shared by the
// DSL, the compiler, the cache and the runtime.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ssmjit/dtype.h"

namespace ssmjit {

// Binding names follow one convention, so every pass reads them the same way:
//   "<arg>"        a kernel argument (size, stride or flag) bound to a constant;
//   "dtype:<ptr>"  storage dtype (DType) of a pointer argument;
//   "align:<ptr>"  alignment class in bytes (16, 8, 4, 2, 1) of a *data* pointer, never metadata;
//   "div:<arg>"    divisibility class (16, 8, 4, 2, 1; up to 64 for a length cut into tiles) of an
//                  integer argument left dynamic;
//   "meta:<name>"  a build-time constant of the kernel definition (block sizes, index bits, warps).
struct Specialization {
  std::string kernel;                                   // name in the kernel registry
  std::vector<std::pair<std::string, int64_t>> values;  // kept in insertion order
  std::string arch = "sm_90a";                          // NVRTC target: sm_80, sm_90, sm_90a, ...

  Specialization& set(const std::string& name, int64_t v);
  const int64_t* find(const std::string& name) const;
  int64_t get(const std::string& name) const;  // throws if absent
  int64_t get(const std::string& name, int64_t dflt) const;
  // Whether the bindings prove the integer argument `name` a multiple of m (a power of two): bound
  // to such a value, or of a divisibility class that m divides.
  bool provesMultiple(const std::string& name, int64_t m) const;
  std::string canonical() const;  // stable text: the identity used in cache keys
  bool operator==(const Specialization& o) const;
  size_t hash() const;
};

struct SpecializationHash {
  size_t operator()(const Specialization& s) const { return s.hash(); }
};

}  // namespace ssmjit

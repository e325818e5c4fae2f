// A kernel's chooseMeta defaults: each meta value is set unless the caller bound it already
// (SSMJIT_META, a manifest entry or the op).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "compiler/Specialization.h"

namespace ssmjit::kernels {

inline void setDefault(Specialization& s, const std::string& name, int64_t v) {
  if (!s.find(name)) s.set(name, v);
}

inline void setDefaults(Specialization& s, std::initializer_list<std::pair<const char*, int64_t>> defaults) {
  for (const auto& [name, v] : defaults) setDefault(s, name, v);
}

}  // namespace ssmjit::kernels

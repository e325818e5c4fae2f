// Names of enum values as a table: one name per value in declaration order (values 0, 1, ...),
// checked against the enum's last value at compile time so that a new value without a name fails
// to build, as a switch would warn.
#pragma once
#include <cstddef>

namespace ssmjit {

template <auto Last, size_t N>
const char* enumName(decltype(Last) v, const char* const (&names)[N]) {
  static_assert(N == static_cast<size_t>(Last) + 1, "one name per enum value");
  const auto i = static_cast<size_t>(v);
  return i < N ? names[i] : "unknown";
}

}  // namespace ssmjit

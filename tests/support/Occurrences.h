// How often a piece of text occurs in generated code (CUDA C++ or PTX): the golden checks count
// instructions, intrinsics and declarations with it.
#pragma once
#include <cstdint>
#include <string>

namespace ssmjit::testing {

inline int64_t occurrences(const std::string& text, const std::string& what) {
  int64_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace ssmjit::testing

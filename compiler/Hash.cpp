#include "compiler/Hash.h"

#include <cstdio>

namespace ssmjit::hash {

std::string hex(const std::string& s, int bits) {
  char buf[40];
  const uint64_t a = bytes64(s.data(), s.size());
  if (bits <= 64) {
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(a));
  } else {
    const uint64_t b = bytes64(s.data(), s.size(), 0x9e3779b97f4a7c15ull);
    std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(a),
                  static_cast<unsigned long long>(b));
  }
  return buf;
}

}  // namespace ssmjit::hash

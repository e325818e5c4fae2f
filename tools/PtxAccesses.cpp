#include "tools/PtxAccesses.h"

#include <sstream>

namespace ssmjit::tool {
namespace {

// Bytes of a PTX scalar type suffix (u16, bf16, f32, b64, ...); 0 for any other part of an opcode.
int typeBytes(const std::string& t) {
  static const std::map<std::string, int> bytes = {
      {"u8", 1},  {"s8", 1},  {"b8", 1},  {"u16", 2}, {"s16", 2}, {"b16", 2}, {"f16", 2}, {"bf16", 2}, {"u32", 4},
      {"s32", 4}, {"b32", 4}, {"f32", 4}, {"u64", 8}, {"s64", 8}, {"b64", 8}, {"f64", 8}, {"b128", 16}};
  const auto it = bytes.find(t);
  return it == bytes.end() ? 0 : it->second;
}

}  // namespace

GlobalAccesses globalAccesses(const std::string& ptx) {
  GlobalAccesses a;
  std::istringstream in(ptx);
  std::string line;
  while (std::getline(in, line)) {
    const size_t b = line.find_first_not_of(" \t");
    if (b == std::string::npos) continue;
    const bool load = line.compare(b, 10, "ld.global.") == 0, store = line.compare(b, 10, "st.global.") == 0;
    if (!load && !store) continue;
    const std::string op = line.substr(b, line.find_first_of(" \t", b) - b);
    int vec = 1, bytes = 0;
    std::istringstream parts(op);
    std::string p;
    while (std::getline(parts, p, '.')) {
      if (p == "v2")
        vec = 2;
      else if (p == "v4")
        vec = 4;
      else if (p == "v8")
        vec = 8;
      else if (int t = typeBytes(p))
        bytes = t;
    }
    if (bytes > 0) ++(load ? a.loads : a.stores)[vec * bytes];
  }
  return a;
}

std::string describe(const GlobalAccesses& a) {
  auto list = [](const std::map<int, int>& m) {
    if (m.empty()) return std::string("none");
    std::string s;
    for (auto it = m.rbegin(); it != m.rend(); ++it)
      s += (s.empty() ? "" : ", ") + std::to_string(it->second) + " x " + std::to_string(it->first) + " B";
    return s;
  };
  return "loads " + list(a.loads) + "; stores " + list(a.stores);
}

}  // namespace ssmjit::tool

// Outputs that are written while inputs are still read may not share memory with them. Internal
// to the runtime's argument checks.
#pragma once
#include <initializer_list>
#include <string>
#include <utility>

#include "runtime/ops/ArgCheck.h"

namespace ssmjit::detail {

// Throws when `o` and `in` (both given) start at the same address.
inline void noAlias(const Checker& c, const char* outName, const TensorView& o, const char* inName,
                    const TensorView& in) {
  if (o.defined() && in.defined() && o.data == in.data)
    c.fail(std::string(outName) + " has data pointer " + hexPtr(o.data) + ", the same as " + inName +
           "'s, expected a separate tensor (" + outName + " may not alias " + inName + ")");
}

using NamedView = std::pair<const char*, const TensorView*>;

// No output may alias an input or an earlier output.
inline void checkSeparateOutputs(const Checker& c, std::initializer_list<NamedView> outs,
                                 std::initializer_list<NamedView> ins) {
  for (auto o = outs.begin(); o != outs.end(); ++o) {
    for (const auto& [inName, in] : ins) noAlias(c, o->first, *o->second, inName, *in);
    for (auto k = outs.begin(); k != o; ++k) noAlias(c, o->first, *o->second, k->first, *k->second);
  }
}

}  // namespace ssmjit::detail

// A DSL test kernel whose programs form a chain (Dsl.h: ticket, waitFlag, setFlag): program t
// (its ticket) waits for program t - 1's flag, reads the value it stored and stores
// out[t] = 0.5 out[t - 1] + a[t] before it sets its own flag. The words of `flags` (int32) must
// start at 0: the ticket counter at word 0, program t's flag at word 16 + t. The result depends
// on the order (a halving, exact in f32), so a program that read before its predecessor stored
// leaves a wrong value.
#pragma once
#include <vector>

#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/Registry.h"

namespace ssmjit::testing {

inline dsl::KernelDef programChainDef() {
  dsl::KernelDef d;
  d.name = "program_chain";
  d.build = [](dsl::KernelBuilder& k, const Specialization&) {
    using dsl::Value;
    Value a = k.ptrArg("a", dsl::PtrClass::Float), out = k.ptrArg("out", dsl::PtrClass::Float);
    Value flags = k.ptrArg("flags", dsl::PtrClass::Float);
    Value t = k.ticket(flags, k.constInt(0));
    Value prev = k.ifElse(
        t > 0,
        [&] {
          k.waitFlag(flags, t + 15);
          return std::vector<Value>{k.load(out, t - 1)};
        },
        [&] { return std::vector<Value>{k.constFloat(0)}; })[0];
    k.store(out, t, prev * 0.5 + k.load(a, t));
    k.setFlag(flags, t + 16);
  };
  return d;
}

}  // namespace ssmjit::testing

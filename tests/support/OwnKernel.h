// What a test of the DSL on small kernels of its own uses: the builder, the CUDA the pipeline
// generates for such a kernel, how often a piece of text occurs in it, and the error a kernel
// that should not build gives. Tests that include it live in ssmjit::testing.
#pragma once
#include <functional>
#include <string>

#include "kernels_dsl/Dsl.h"
#include "ssmjit/error.h"
#include "tests/support/GeneratedCuda.h"
#include "tests/support/Occurrences.h"

namespace ssmjit::testing {
using dsl::KernelBuilder;
using dsl::Value;

// The kernel `name` built by c.build(k), for a test kernel described by a struct (a copy of c).
template <class Kernel>
dsl::KernelDef kernelDefOf(const char* name, const Kernel& c) {
  dsl::KernelDef d;
  d.name = name;
  d.build = [c](KernelBuilder& k, const Specialization&) { c.build(k); };
  return d;
}

// Builds `body` as a kernel with f32 pointers a and out; returns the error text, or "" if it built.
inline std::string buildError(const std::function<void(KernelBuilder&, Value a, Value out)>& body) {
  dsl::KernelDef def;
  def.name = "own_bad";
  def.build = [&](KernelBuilder& k, const Specialization&) {
    body(k, k.ptrArg("a", dsl::PtrClass::Float), k.ptrArg("out", dsl::PtrClass::Float));
  };
  try {
    ownKernelCuda(def, {"a", "out"});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace ssmjit::testing

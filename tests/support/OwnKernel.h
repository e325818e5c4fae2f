// What a test of the DSL on small kernels of its own uses: the builder, the CUDA the pipeline
// generates for such a kernel and how often a piece of text occurs in it. Tests that include it
// live in ssmjit::testing.
#pragma once
#include "kernels_dsl/Dsl.h"
#include "tests/support/GeneratedCuda.h"
#include "tests/support/Occurrences.h"

namespace ssmjit::testing {
using dsl::KernelBuilder;
using dsl::Value;
}  // namespace ssmjit::testing

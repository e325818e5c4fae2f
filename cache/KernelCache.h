// Compiled kernels by specialisation: the in-process memory cache in front of the JIT pipeline.
// (The on-disk cache will sit behind this same call.)
#pragma once
#include <memory>

#include "compiler/CompiledKernel.h"
#include "compiler/Specialization.h"

namespace ssmjit {

// Returns the compiled kernel for `spec`, compiling it on a miss. Thread-safe; concurrent misses
// on one key compile once. Throws ssmjit::Error (Compile) with NVRTC's log on failure.
std::shared_ptr<const CompiledKernel> getOrCompileKernel(const Specialization& spec);

}  // namespace ssmjit

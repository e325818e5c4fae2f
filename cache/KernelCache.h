// Compiled kernels by specialisation: the in-process memory cache, then the disk cache, then the
// JIT pipeline. A new process with a warm disk cache loads kernels without running MLIR or NVRTC.
#pragma once
#include <memory>

#include "cache/DiskCache.h"
#include "compiler/CompiledKernel.h"
#include "compiler/Specialization.h"

namespace ssmjit {

enum class KernelSource { Memory, Disk, Compiled };
const char* kernelSourceName(KernelSource s);  // "memory", "disk", "compiled"

struct KernelLookup {
  std::shared_ptr<const CompiledKernel> kernel;
  KernelSource source = KernelSource::Compiled;
};

// Returns the compiled kernel for `spec`: from memory, else from the disk cache (unless
// SSMJIT_ALWAYS_COMPILE=1), else compiled and stored to disk. Thread-safe; concurrent misses on
// one key compile once per process. The first use of a key in a process appends it to
// SSMJIT_RECORD's manifest when that is set. Throws ssmjit::Error (Compile) with NVRTC's log.
KernelLookup lookupOrCompileKernel(const Specialization& spec);
inline std::shared_ptr<const CompiledKernel> getOrCompileKernel(const Specialization& spec) {
  return lookupOrCompileKernel(spec).kernel;
}

// The process's disk cache, configured from the environment on first use (cache/DiskCache.h).
cache::DiskCache& processDiskCache();

}  // namespace ssmjit

// Compiled kernels by specialisation: the in-process memory cache, then the disk cache, then the
// JIT pipeline. A new process with a warm disk cache loads kernels without running MLIR or NVRTC.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

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

// Every kernel of `specs` as lookupOrCompileKernel gives it, the missing ones compiled at once on
// up to `threads` threads (0: one per core this process may run on), the calling thread among
// them; each compile is single-threaded, so a call's wall time is its longest compile. Equal
// specialisations compile once (a later copy reports KernelSource::Memory). The lookups come in
// `specs`' order. When a compile fails, specialisations not yet started are left alone and the
// call throws the error of the first failing one in `specs`' order: every one before it was
// started, so which error comes out does not depend on timing. A failed compile stores nothing.
// Only the first `required` specialisations' errors are thrown (all by default): those after them
// are compiled ahead for a later call, which reports their errors itself; a failed one's lookup
// stays empty.
std::vector<KernelLookup> lookupOrCompileKernels(const std::vector<Specialization>& specs, int threads = 0,
                                                 size_t required = SIZE_MAX);

// Whether this process has compiled or loaded `spec`, or is doing so now (memory only).
bool kernelKnown(const Specialization& spec);

// The threads lookupOrCompileKernels uses by default: the cores this process may run on.
int compileThreads();

// The process's disk cache, configured from the environment on first use (cache/DiskCache.h).
cache::DiskCache& processDiskCache();

}  // namespace ssmjit

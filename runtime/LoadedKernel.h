// Kernels loaded into a CUDA context, ready to launch. Internal to the runtime.
#pragma once
#include <cuda.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "compiler/CompiledKernel.h"
#include "compiler/Specialization.h"

namespace ssmjit {

// An op's argument names in a fixed order; the op passes values in that order. A generated
// kernel takes a subset of them (bound arguments are gone), resolved once per loaded kernel.
struct ArgSchema {
  const char* const* names;
  int count;
};

union ArgValue {
  void* ptr;
  int64_t i64;
  float f32;
};

struct LoadedKernel {
  std::shared_ptr<const CompiledKernel> code;
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  bool loadedFromPtx = false;
  std::vector<int> paramToArg;  // kernel param i takes op arg paramToArg[i]
};

// The loaded kernel for `spec` in the current context (compiled through the cache on a miss).
// A hit costs one hash lookup. Throws ssmjit::Error naming a kernel parameter the schema lacks.
const LoadedKernel& loadedKernel(const Specialization& spec, const ArgSchema& schema);

// Launches on `stream` with a 3-D grid and the kernel's own block size. Never synchronises.
void launchKernel(const LoadedKernel& k, const ArgValue* values, const unsigned grid[3], CUstream stream);

}  // namespace ssmjit

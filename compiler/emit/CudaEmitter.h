// Prints a laid-out kernel (after assign-layouts and vectorize-accesses) as CUDA C++: one
// __global__ function whose tiles are per-thread register arrays, calling the embedded device
// library (ssmjit_device.cuh) for conversions, vector accesses and error reports.
#pragma once
#include <string>
#include <vector>

#include "compiler/CompiledKernel.h"

namespace mlir::func {
class FuncOp;
}

namespace ssmjit {

struct EmittedKernel {
  std::string source;
  std::string entry;
  std::vector<KernelParam> params;
  int numThreads = 128;
  int dynamicSharedBytes = 0;  // the dynamic shared buffers' extent, passed at launch
};

EmittedKernel emitCuda(mlir::func::FuncOp kernel);

}  // namespace ssmjit

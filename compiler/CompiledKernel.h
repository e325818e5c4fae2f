// What the compiler hands to the cache and the runtime: plain data, no MLIR.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ssmjit {

// One parameter of the generated __global__ function, in order. Arguments the specialisation bound
// to constants are gone from this list; the runtime fills the rest by name.
struct KernelParam {
  enum class Kind : int { Ptr = 0, I32 = 1, I64 = 2, F32 = 3 };
  std::string name;
  Kind kind;
};

// Read from the CUBIN itself (compiler/CubinInfo), so the figures do not depend on whether NVRTC
// printed ptxas' report; -1 means unknown.
struct ResourceUsage {
  int registers = -1;        // per thread
  int sharedBytes = -1;      // static shared memory per block (without the arch's reserved block)
  int localBytes = -1;       // stack per thread, callees included
  int spillStoreBytes = -1;  // from ptxas' report; -1 when NVRTC gave none and the kernel has a stack
  int spillLoadBytes = -1;
};

struct CompiledKernel {
  std::string entry;  // extern "C" symbol name
  std::vector<KernelParam> params;
  int numThreads = 128;        // block size the code was generated for
  int dynamicSharedBytes = 0;  // dynamic shared memory a block takes (passed at launch)
  std::string cudaSource;      // generated CUDA C++
  std::string ptx;
  std::vector<char> cubin;  // empty when compiled for PTX only
  std::string arch;
  std::string compileLog;
  ResourceUsage resources;
  double compileMs = 0;  // MLIR pipeline + NVRTC
};

}  // namespace ssmjit

// Where a shared library of the CUDA toolkit (NVRTC, cuBLASLt, NCCL) may be: its sonames through
// the loader's path first (ldconfig, LD_LIBRARY_PATH), then the toolkit's own directories, so
// that a toolkit outside the loader path still works when CUDA_HOME points at it.
#pragma once
#include <initializer_list>
#include <string>
#include <vector>

namespace ssmjit {

// The candidates to open in order (compiler/DynamicLibrary.h): each of `names` as given, then for
// each root ($CUDA_HOME, $CUDA_PATH, /usr/local/cuda) its lib64/ and lib/ with each name.
std::vector<std::string> toolkitLibraryCandidates(std::initializer_list<const char*> names);

}  // namespace ssmjit

// Opening a shared library of the CUDA toolkit (NVRTC, cuBLASLt) with dlopen: its sonames through
// the loader's path first (ldconfig, LD_LIBRARY_PATH), then the toolkit's own directories, so that
// a toolkit outside the loader path still works when CUDA_HOME points at it.
#pragma once
#include <initializer_list>
#include <string>

namespace ssmjit {

// The handle of the first candidate dlopen accepts (RTLD_NOW | RTLD_LOCAL; never closed), its
// name in *opened; nullptr when none does, with every candidate and dlopen's reason in *tried
// ("\n  <name>: <error>" each). Candidates: each of `names` as given, then for each root
// ($CUDA_HOME, $CUDA_PATH, /usr/local/cuda) its lib64/ and lib/ with each name.
void* openToolkitLibrary(std::initializer_list<const char*> names, std::string* opened, std::string* tried);

}  // namespace ssmjit

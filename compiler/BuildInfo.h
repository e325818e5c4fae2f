// Identities of this build that the disk cache keys on, hashed from the sources by
// cmake/BuildInfo.cmake (generated BuildInfo.cpp).
#pragma once

namespace ssmjit {

// "<version>-<16 hex>": the version, the LLVM version and the content of every source that shapes
// generated code (compiler/, the DSL). Equal ids generate equal code for equal specialisations.
const char* buildId();

// The content hash of a kernel family (the folder kernels_dsl/<family>/ and the kernels_dsl headers
// it includes: cmake/KernelHashes.cmake), or nullptr for a name that is no such folder.
const char* kernelDefinitionHash(const char* family);

}  // namespace ssmjit

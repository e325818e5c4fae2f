// Identities of this build that the disk cache keys on, hashed from the sources by
// cmake/BuildInfo.cmake (generated BuildInfo.cpp).
#pragma once

namespace ssmjit {

// "<version>-<16 hex>": the version, the LLVM version and the content of every source that shapes
// generated code (compiler/, the DSL). Equal ids generate equal code for equal specialisations.
const char* buildId();

// The content hash of a kernel definition (kernels_dsl/<definitionFile>.cpp and .h), or nullptr
// for a file cmake/BuildInfo.cmake does not list in SSMJIT_KERNEL_DEFINITIONS.
const char* kernelDefinitionHash(const char* definitionFile);

}  // namespace ssmjit

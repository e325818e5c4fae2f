# The identities the disk cache keys on, hashed from the sources at configure time (and configure
# re-runs whenever one of these files changes, so the ids never go stale):
#   build id          version, LLVM version and the sources of everything that shapes generated
#                     code: compiler/ (dialect, passes, emitter, device library) and the DSL;
#   kernel definition one hash per kernel family folder (cmake/KernelHashes.cmake), so editing a
#                     family invalidates only its own kernels' cache entries.
# Writes ${PROJECT_BINARY_DIR}/compiler/BuildInfo.cpp (rewritten only when an id changes).
include(${CMAKE_CURRENT_LIST_DIR}/KernelHashes.cmake)

file(GLOB_RECURSE _codegen_sources LIST_DIRECTORIES false
  ${PROJECT_SOURCE_DIR}/compiler/*.h ${PROJECT_SOURCE_DIR}/compiler/*.cpp
  ${PROJECT_SOURCE_DIR}/compiler/*.td ${PROJECT_SOURCE_DIR}/compiler/*.cuh
  ${PROJECT_SOURCE_DIR}/kernels_dsl/Dsl.h ${PROJECT_SOURCE_DIR}/kernels_dsl/Dsl.cpp
  ${PROJECT_SOURCE_DIR}/kernels_dsl/CompileKernel.h ${PROJECT_SOURCE_DIR}/kernels_dsl/CompileKernel.cpp)
list(SORT _codegen_sources)
ssmjit_files_hash(_build_hash ${PROJECT_SOURCE_DIR} "${PROJECT_VERSION};llvm ${LLVM_PACKAGE_VERSION}" ${_codegen_sources})
set(SSMJIT_BUILD_ID "${PROJECT_VERSION}-${_build_hash}")
set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_codegen_sources})

ssmjit_kernel_hashes(${PROJECT_SOURCE_DIR} SSMJIT_KERNEL_HASH_TABLE _kernel_files)
set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_kernel_files})
configure_file(${PROJECT_SOURCE_DIR}/cmake/BuildInfo.cpp.in ${PROJECT_BINARY_DIR}/compiler/BuildInfo.cpp @ONLY)

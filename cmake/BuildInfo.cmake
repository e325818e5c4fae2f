# The identities the disk cache keys on, hashed from the sources at configure time (and configure
# re-runs whenever one of these files changes, so the ids never go stale):
#   build id          version, LLVM version and the sources of everything that shapes generated
#                     code: compiler/ (dialect, passes, emitter, device library) and the DSL;
#   kernel definition one hash per kernel definition (kernels_dsl/<Name>.cpp, the kernels_dsl
#                     headers it includes and their .cpp), so editing
#                     one kernel invalidates only its own cache entries.
# Writes ${PROJECT_BINARY_DIR}/compiler/BuildInfo.cpp (rewritten only when an id changes).
set(SSMJIT_KERNEL_DEFINITIONS SelectiveStateUpdate CausalConv1d CausalConv1dUpdate CausalConv1dBackward Mamba2DecodeStep SelectiveScan SelectiveScanBackward SsdChunkCumsum SsdBmm SsdChunkState SsdStatePassing SsdChunkScan SsdBwdDstates SsdBwdStatePassing SsdBwdDx SsdBwdDcb SsdBwdBC SsdBwdDt)

file(GLOB_RECURSE _codegen_sources LIST_DIRECTORIES false
  ${PROJECT_SOURCE_DIR}/compiler/*.h ${PROJECT_SOURCE_DIR}/compiler/*.cpp
  ${PROJECT_SOURCE_DIR}/compiler/*.td ${PROJECT_SOURCE_DIR}/compiler/*.cuh
  ${PROJECT_SOURCE_DIR}/kernels_dsl/Dsl.h ${PROJECT_SOURCE_DIR}/kernels_dsl/Dsl.cpp
  ${PROJECT_SOURCE_DIR}/kernels_dsl/CompileKernel.h ${PROJECT_SOURCE_DIR}/kernels_dsl/CompileKernel.cpp)
list(SORT _codegen_sources)
set(_ids "${PROJECT_VERSION};llvm ${LLVM_PACKAGE_VERSION}")
foreach(f ${_codegen_sources})
  file(SHA256 ${f} _h)
  file(RELATIVE_PATH _rel ${PROJECT_SOURCE_DIR} ${f})
  list(APPEND _ids "${_rel}=${_h}")
endforeach()
string(SHA256 _build_hash "${_ids}")
string(SUBSTRING ${_build_hash} 0 16 _build_hash)
set(SSMJIT_BUILD_ID "${PROJECT_VERSION}-${_build_hash}")
set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_codegen_sources})

set(SSMJIT_KERNEL_HASH_TABLE "")
foreach(k ${SSMJIT_KERNEL_DEFINITIONS})
  # The definition, the kernels_dsl headers it includes (its argument contract) and their sources
  # (shared DSL code, such as ConvTiles).
  set(_files ${PROJECT_SOURCE_DIR}/kernels_dsl/${k}.cpp)
  file(STRINGS ${PROJECT_SOURCE_DIR}/kernels_dsl/${k}.cpp _incs REGEX "^#include \"kernels_dsl/[A-Za-z0-9_]+\\.h\"")
  foreach(_inc ${_incs})
    string(REGEX REPLACE "^#include \"(kernels_dsl/[A-Za-z0-9_]+\\.h)\".*" "\\1" _hdr "${_inc}")
    list(APPEND _files ${PROJECT_SOURCE_DIR}/${_hdr})
    string(REGEX REPLACE "\\.h$" ".cpp" _src "${_hdr}")
    if(EXISTS ${PROJECT_SOURCE_DIR}/${_src})
      list(APPEND _files ${PROJECT_SOURCE_DIR}/${_src})
    endif()
  endforeach()
  set(_ids "")
  foreach(f ${_files})
    file(SHA256 ${f} _h)
    list(APPEND _ids ${_h})
  endforeach()
  string(SHA256 _kh "${_ids}")
  string(SUBSTRING ${_kh} 0 16 _kh)
  string(APPEND SSMJIT_KERNEL_HASH_TABLE "      {\"${k}\", \"${_kh}\"},\n")
  set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_files})
endforeach()
configure_file(${PROJECT_SOURCE_DIR}/cmake/BuildInfo.cpp.in ${PROJECT_BINARY_DIR}/compiler/BuildInfo.cpp @ONLY)

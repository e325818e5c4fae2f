# Finds Debian's MLIR/LLVM 22 and links it statically (see shared notes): Debian's exported MLIR
# targets name the LLVM dylib; we repoint the imported LLVM target at the static component archives
# so that our binaries need no LLVM installed at run time.
if(NOT MLIR_DIR)
  find_program(LLVM_CONFIG_22 llvm-config-22 REQUIRED)
  execute_process(COMMAND ${LLVM_CONFIG_22} --prefix OUTPUT_VARIABLE _llvm_prefix OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(MLIR_DIR "${_llvm_prefix}/lib/cmake/mlir")
endif()
if(NOT TARGET zstd::libzstd_shared)
  add_library(zstd::libzstd_shared INTERFACE IMPORTED)
  set_target_properties(zstd::libzstd_shared PROPERTIES INTERFACE_LINK_LIBRARIES zstd)
endif()
find_package(MLIR 22.1 REQUIRED CONFIG)
set_target_properties(LLVM PROPERTIES
  IMPORTED_LOCATION_RELWITHDEBINFO "${LLVM_LIBRARY_DIR}/libLLVMSupport.a"
  IMPORTED_LOCATION_RELEASE "${LLVM_LIBRARY_DIR}/libLLVMSupport.a"
  IMPORTED_LOCATION_DEBUG "${LLVM_LIBRARY_DIR}/libLLVMSupport.a"
  INTERFACE_LINK_LIBRARIES "LLVMDemangle;LLVMCore;LLVMBinaryFormat;LLVMTargetParser;LLVMRemarks;LLVMBitstreamReader")
list(APPEND CMAKE_MODULE_PATH "${MLIR_CMAKE_DIR}" "${LLVM_CMAKE_DIR}")
include(TableGen)
include(AddLLVM)
include(AddMLIR)
separate_arguments(_llvm_defs NATIVE_COMMAND "${LLVM_DEFINITIONS}")
# Applied only to the MLIR-facing targets (compiler, kernels_dsl) through this interface target.
add_library(ssmjit_mlir_flags INTERFACE)
target_include_directories(ssmjit_mlir_flags SYSTEM INTERFACE ${LLVM_INCLUDE_DIRS} ${MLIR_INCLUDE_DIRS})
target_compile_definitions(ssmjit_mlir_flags INTERFACE ${_llvm_defs})

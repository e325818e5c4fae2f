# `cmake --install` gives a relocatable tree: lib/libssmjit.so (RPATH $ORIGIN), include/ssmjit/*.h,
# bin/ssmjit, and lib/cmake/ssmjit so that a host program does find_package(ssmjit) and links
# ssmjit::ssmjit.
include(CMakePackageConfigHelpers)
install(TARGETS ssmjit EXPORT ssmjitTargets LIBRARY DESTINATION lib)
# The public headers: the ground floor's (error, dtype) and the runtime's (tensor views, ops).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/compiler/include/ssmjit ${PROJECT_SOURCE_DIR}/runtime/include/ssmjit
        DESTINATION include)
install(EXPORT ssmjitTargets NAMESPACE ssmjit:: DESTINATION lib/cmake/ssmjit)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/ssmjitConfig.cmake.in
  ${PROJECT_BINARY_DIR}/ssmjitConfig.cmake INSTALL_DESTINATION lib/cmake/ssmjit)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/ssmjitConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/ssmjitConfig.cmake ${PROJECT_BINARY_DIR}/ssmjitConfigVersion.cmake
  DESTINATION lib/cmake/ssmjit)

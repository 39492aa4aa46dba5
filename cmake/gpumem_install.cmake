# install(): headers, the library, and a package config so that find_package(gpumem) works.
include(CMakePackageConfigHelpers)
install(TARGETS gpumem EXPORT gpumem-targets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")
set(GPUMEM_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/gpumem)
install(EXPORT gpumem-targets NAMESPACE gpumem:: DESTINATION ${GPUMEM_INSTALL_CMAKEDIR})
configure_package_config_file(cmake/gpumem-config.cmake.in
  ${PROJECT_BINARY_DIR}/gpumem-config.cmake INSTALL_DESTINATION ${GPUMEM_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/gpumem-config-version.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/gpumem-config.cmake ${PROJECT_BINARY_DIR}/gpumem-config-version.cmake
  DESTINATION ${GPUMEM_INSTALL_CMAKEDIR})

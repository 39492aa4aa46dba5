# ctest driver for the install test (cmake -P): installs a built gpumem tree into a fresh prefix, then
# configures, builds and runs tests/install (a find_package(gpumem) consumer) against that prefix only.
#
# Variables (-D):
#   BUILD_DIR       the gpumem build tree to install
#   CONSUMER_DIR    tests/install
#   WORK_DIR        scratch directory (wiped first)
#   GENERATOR       CMake generator for the consumer
#   CXX_COMPILER    the compiler gpumem was built with
#   BUILD_TYPE      gpumem's build type (also used for the consumer)
#   CXX_FLAGS, EXE_LINKER_FLAGS   gpumem's global flags (sanitizer builds need them in the consumer too)
#   CUDA_ROOT       CUDAToolkit_ROOT, if gpumem was configured with one
cmake_minimum_required(VERSION 3.25)

foreach(var BUILD_DIR CONSUMER_DIR WORK_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_install_test.cmake: -D${var}=... is required")
  endif()
endforeach()

set(prefix ${WORK_DIR}/prefix)
set(consumer_build ${WORK_DIR}/consumer-build)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

function(run_step name)
  message(STATUS "install test: ${name}: ${ARGN}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install test: ${name} failed (${rc}):\n${out}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

set(config_args "")
if(BUILD_TYPE)
  set(config_args --config ${BUILD_TYPE})
endif()
run_step("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} ${config_args})
if(NOT EXISTS ${prefix}/lib/cmake/gpumem/gpumem-config.cmake AND NOT EXISTS ${prefix}/lib64/cmake/gpumem/gpumem-config.cmake)
  message(FATAL_ERROR "install test: no gpumem-config.cmake under ${prefix}/lib*/cmake/gpumem")
endif()

set(configure_args -S ${CONSUMER_DIR} -B ${consumer_build} -G ${GENERATOR}
  -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
  "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${EXE_LINKER_FLAGS}"
  # Only the fresh prefix may provide gpumem: never a package registry or a system install.
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
if(BUILD_TYPE)
  list(APPEND configure_args -DCMAKE_BUILD_TYPE=${BUILD_TYPE})
endif()
if(CUDA_ROOT)
  list(APPEND configure_args -DCUDAToolkit_ROOT=${CUDA_ROOT})
endif()
run_step("configure consumer" ${CMAKE_COMMAND} ${configure_args})
run_step("build consumer" ${CMAKE_COMMAND} --build ${consumer_build})

find_program(consumer_exe consumer PATHS ${consumer_build} NO_DEFAULT_PATH REQUIRED)
run_step("run consumer" ${CMAKE_COMMAND} -E env GPUMEM_BACKEND=host ${consumer_exe})
message(STATUS "install test: consumer said: ${step_output}")
if(NOT step_output MATCHES "consumer: gpumem [0-9.]+, host backend, allocated, filled and freed [0-9]+ bytes")
  message(FATAL_ERROR "install test: unexpected consumer output:\n${step_output}")
endif()
message(STATUS "install test: passed")

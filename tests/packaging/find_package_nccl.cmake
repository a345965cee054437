# The tutti::nccl component end to end, and what an installed tutti says when it cannot have it:
#  1. the installed tree (PREFIX, built without NCCL in CI) must still be found, with
#     tutti_nccl_FOUND false and a reason, when a project asks for OPTIONAL_COMPONENTS nccl;
#  2. where NCCL and the CUDA toolkit are installed: configure and install tutti with
#     TUTTI_WITH_NCCL=ON, check that a missing NCCL or CUDA makes only the component not found,
#     build and run find_package_nccl/ (links tutti::nccl, calls ncclGetVersion: no GPU needed)
#     and the same program through tutti-nccl.pc. Elsewhere step 2 is reported as skipped.
cmake_minimum_required(VERSION 3.25)
set(TUTTI_PACKAGING_NEEDS PREFIX)
include("${CMAKE_CURRENT_LIST_DIR}/common.cmake")

# probe(<prefix> <expect nccl found> <expected reason regex> [configure args...]): a project
# that asks for OPTIONAL_COMPONENTS gloo nccl; checks tutti itself is found either way.
function(probe prefix want_found want_reason)
  set(_dir "${WORK_DIR}/probe")
  file(REMOVE_RECURSE "${_dir}")
  file(WRITE "${_dir}/CMakeLists.txt" [=[
cmake_minimum_required(VERSION 3.25)
project(probe LANGUAGES CXX)
find_package(tutti CONFIG REQUIRED OPTIONAL_COMPONENTS nccl)
if(NOT TARGET tutti::tutti)
  message(FATAL_ERROR "tutti::tutti missing")
endif()
if(tutti_nccl_FOUND AND NOT TARGET tutti::nccl)
  message(FATAL_ERROR "tutti_nccl_FOUND but no tutti::nccl")
endif()
message(STATUS "probe: nccl=[${tutti_nccl_FOUND}] reason=[${tutti_nccl_NOT_FOUND_REASON}]")
]=])
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -S "${_dir}" -B "${_dir}/build" -G "${GENERATOR}"
            "-DCMAKE_CXX_COMPILER=${CXX}" "-DCMAKE_PREFIX_PATH=${prefix}" ${ARGN}
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
  if(NOT _rc EQUAL 0 OR NOT _out MATCHES "probe: nccl=\\[([^]]*)\\] reason=\\[([^]]*)\\]")
    message(FATAL_ERROR "find_package(tutti OPTIONAL_COMPONENTS nccl) failed (${ARGN}):\n${_out}")
  endif()
  set(_found "${CMAKE_MATCH_1}")
  set(_reason "${CMAKE_MATCH_2}")
  if(NOT _found STREQUAL want_found OR NOT _reason MATCHES "${want_reason}")
    message(FATAL_ERROR "find_package(tutti OPTIONAL_COMPONENTS nccl) ${ARGN}: nccl found "
      "'${_found}' (want '${want_found}'), reason '${_reason}' (want /${want_reason}/)")
  endif()
  if(NOT _found AND NOT _out MATCHES "optional component 'nccl' not found")
    message(FATAL_ERROR "no status message says why nccl was not found:\n${_out}")
  endif()
endfunction()

# 1. Installed without the component.
if(NOT EXISTS "${PREFIX}/share/cmake/tutti/tuttiNcclTargets.cmake")
  probe("${PREFIX}" "FALSE" "installed without it")
endif()

# 2. tutti with TUTTI_WITH_NCCL=ON, if this machine has NCCL and CUDA.
set(_build "${WORK_DIR}/tutti-build")
set(_prefix "${WORK_DIR}/prefix")
file(REMOVE_RECURSE "${_build}" "${_prefix}")
execute_process(
  COMMAND "${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${_build}" -G "${GENERATOR}"
          -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_COMPILER=${CXX}" -DTUTTI_WITH_NCCL=ON
          -DTUTTI_BUILD_TESTS=OFF -DTUTTI_BUILD_EXAMPLES=OFF -DTUTTI_BUILD_BENCHMARKS=OFF
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
if(NOT _rc EQUAL 0)
  if(_out MATCHES "TUTTI_WITH_NCCL=ON needs the CUDA toolkit")
    skip("NCCL or the CUDA toolkit is not installed here: checked only that an installed tutti "
         "without tutti::nccl reports it not found")
    return()
  endif()
  message(FATAL_ERROR "configuring tutti with TUTTI_WITH_NCCL=ON failed:\n${_out}")
endif()
step("${CMAKE_COMMAND}" --install "${_build}" --prefix "${_prefix}")

probe("${_prefix}" "TRUE" "^$")
probe("${_prefix}" "FALSE" "NCCL .* was not found" -DCMAKE_DISABLE_FIND_PACKAGE_NCCL=ON)
probe("${_prefix}" "FALSE" "CUDA toolkit .* was not found"
      -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON)

consumer(nccl_version "${PACKAGING_DIR}/find_package_nccl" "-DCMAKE_PREFIX_PATH=${_prefix}")

find_program(PKG_CONFIG NAMES pkg-config pkgconf)
if(PKG_CONFIG)
  set(ENV{PKG_CONFIG_PATH} "${_prefix}/share/pkgconfig")
  execute_process(COMMAND "${PKG_CONFIG}" --print-errors --cflags --libs tutti-nccl
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _flags ERROR_VARIABLE _err OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "pkg-config tutti-nccl failed:\n${_err}")
  endif()
  separate_arguments(_flags UNIX_COMMAND "${_flags}")
  # The loader may not know NCCL's directory: run with the -L directories of the .pc file.
  set(_libdirs "${_flags}")
  list(FILTER _libdirs INCLUDE REGEX "^-L")
  list(TRANSFORM _libdirs REPLACE "^-L" "")
  list(JOIN _libdirs ":" _libpath)
  step("${CXX}" -std=c++20 -O2 "${PACKAGING_DIR}/find_package_nccl/nccl_version.cpp" ${_flags}
       -o "${WORK_DIR}/nccl_version_pc")
  step("${CMAKE_COMMAND}" -E env "LD_LIBRARY_PATH=${_libpath}:$ENV{LD_LIBRARY_PATH}"
       "${WORK_DIR}/nccl_version_pc")
endif()

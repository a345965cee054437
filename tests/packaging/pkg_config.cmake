# pkg-config against the installed tree: builds and runs all_reduce.cpp with the flags of
# tutti.pc, checks that the prefix in the .pc file follows the file (relocatable), and that
# tutti-gloo.pc resolves when the gloo component is installed (its program is built once, by
# the find_package test). Skipped where pkg-config is not installed.
cmake_minimum_required(VERSION 3.25)
set(TUTTI_PACKAGING_NEEDS PREFIX)
include("${CMAKE_CURRENT_LIST_DIR}/common.cmake")

find_program(PKG_CONFIG NAMES pkg-config pkgconf)
if(NOT PKG_CONFIG)
  skip("pkg-config is not installed (Debian: apt install pkg-config)")
  return()
endif()
set(ENV{PKG_CONFIG_PATH} "${PREFIX}/share/pkgconfig")

# pkg_flags(<var> <args>...): the output of pkg-config <args>, as a list.
function(pkg_flags var)
  execute_process(COMMAND "${PKG_CONFIG}" --print-errors ${ARGN}
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "pkg-config ${ARGN} failed:\n${_err}")
  endif()
  separate_arguments(_out UNIX_COMMAND "${_out}")
  set(${var} "${_out}" PARENT_SCOPE)
endfunction()

pkg_flags(_includedir --variable=includedir tutti)
if(NOT EXISTS "${_includedir}/tutti/tutti.hpp")
  message(FATAL_ERROR "tutti.pc's includedir (${_includedir}) does not hold tutti/tutti.hpp")
endif()
pkg_flags(_version --modversion tutti)
file(STRINGS "${SOURCE_DIR}/include/tutti/version.hpp" _defines REGEX "#define TUTTI_VERSION_")
string(REGEX REPLACE ".*MAJOR ([0-9]+).*MINOR ([0-9]+).*PATCH ([0-9]+).*" "\\1.\\2.\\3"
       _header_version "${_defines}")
if(NOT _version STREQUAL _header_version)
  message(FATAL_ERROR "tutti.pc says version ${_version}, version.hpp ${_header_version}")
endif()

pkg_flags(_flags --cflags --libs tutti)
step("${CXX}" -std=c++20 -O2 "${PACKAGING_DIR}/all_reduce.cpp" ${_flags}
     -o "${WORK_DIR}/all_reduce")
step("${WORK_DIR}/all_reduce")

if(EXISTS "${PREFIX}/share/pkgconfig/tutti-gloo.pc")
  pkg_flags(_gloo --cflags --libs tutti-gloo)
  if(NOT "-lgloo" IN_LIST _gloo OR NOT "-DTUTTI_HAVE_GLOO=1" IN_LIST _gloo)
    message(FATAL_ERROR "tutti-gloo.pc: unexpected flags ${_gloo}")
  endif()
  file(WRITE "${WORK_DIR}/empty.cpp" "int main() { return 0; }\n")
  step("${CXX}" "${WORK_DIR}/empty.cpp" -Wl,--no-as-needed ${_gloo} -o "${WORK_DIR}/gloo_link")
endif()

# Driver for tutti's compile-fail tests (internal, run by ctest).
#
#   cmake -DBUILD_DIR=<top build dir> -DTARGET=cf_<name> -DSOURCE=<file.cpp>
#         [-DCONFIG=<config>] [-DCOMPILER=<c++ path>] -P compile_fail_check.cmake
#
# Passes only if building TARGET fails AND the diagnostics match every
# "// expect-error: <regex>" line of SOURCE (CMake regex syntax). So a typo in
# the test, or a failure for some other reason, cannot make it pass.

cmake_minimum_required(VERSION 3.21)

foreach(_var IN ITEMS BUILD_DIR TARGET SOURCE)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "compile_fail_check: -D${_var}=... is required")
  endif()
endforeach()

# Read the expectations. file(READ) + string(REGEX) keeps ';' in a regex intact.
file(READ "${SOURCE}" _content)
set(_regexes "")
set(_count 0)
set(_rest "${_content}")
while(TRUE)
  string(REGEX MATCH "//[ \t]*expect-error:[ \t]*([^\r\n]*)" _line "${_rest}")
  if(_line STREQUAL "")
    break()
  endif()
  string(STRIP "${CMAKE_MATCH_1}" _re)
  if(NOT _re STREQUAL "")
    math(EXPR _count "${_count} + 1")
    set(_regex_${_count} "${_re}")
  endif()
  string(FIND "${_rest}" "${_line}" _pos)
  string(LENGTH "${_line}" _len)
  math(EXPR _pos "${_pos} + ${_len}")
  string(SUBSTRING "${_rest}" ${_pos} -1 _rest)
endwhile()
if(_count EQUAL 0)
  message(FATAL_ERROR "${SOURCE}: no '// expect-error: <regex>' line")
endif()

set(_config_args "")
if(DEFINED CONFIG AND NOT CONFIG STREQUAL "")
  set(_config_args --config "${CONFIG}")
endif()

execute_process(
  COMMAND "${CMAKE_COMMAND}" --build "${BUILD_DIR}" --target "${TARGET}" ${_config_args}
  RESULT_VARIABLE _rc
  OUTPUT_VARIABLE _out
  ERROR_VARIABLE _out)
message("${_out}")

if(_rc EQUAL 0)
  message(FATAL_ERROR
    "compile-fail test ${TARGET}: the build SUCCEEDED but ${SOURCE} must not compile")
endif()

# Keep only compiler diagnostics: drop build-tool chatter (progress lines, make
# and ninja messages, echoed compiler command lines), which names the source
# file and target and could otherwise satisfy a careless regex.
set(_diag "\n${_out}")
foreach(_noise IN ITEMS
    "\\[ *[0-9]+%\\]"          # make progress
    "\\[[0-9]+/[0-9]+\\]"      # ninja progress
    "g?make(\\[[0-9]+\\])?: "  # make messages
    "FAILED: "
    "ninja: ")
  string(REGEX REPLACE "\n${_noise}[^\n]*" "" _diag "${_diag}")
endforeach()
if(DEFINED COMPILER AND NOT COMPILER STREQUAL "")
  string(REGEX REPLACE "([][+.*()^$?|\\])" "\\\\\\1" _cxx_re "${COMPILER}")
  string(REGEX REPLACE "\n[^\n]*${_cxx_re} [^\n]*" "" _diag "${_diag}")
endif()

set(_missing "")
foreach(_i RANGE 1 ${_count})
  if(NOT _diag MATCHES "${_regex_${_i}}")
    string(APPEND _missing "  ${_regex_${_i}}\n")
  endif()
endforeach()
if(NOT _missing STREQUAL "")
  message(FATAL_ERROR
    "compile-fail test ${TARGET}: the build failed, but NOT for the expected reason; "
    "no diagnostic matched:\n${_missing}")
endif()
message(STATUS "compile-fail test ${TARGET}: failed to compile as expected")

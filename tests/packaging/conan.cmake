# Conan 2: installs Conan from PyPI into a virtual environment (kept in WORK_DIR between runs),
# then `conan create` on a copy of the recipe with a fresh CONAN_HOME and no remote: the
# recipe packages the headers and test_package/ builds and runs its all_reduce against them.
# Skipped, with the reason, where python3 -m venv is missing or PyPI cannot be reached.
cmake_minimum_required(VERSION 3.25)
include("${CMAKE_CURRENT_LIST_DIR}/common.cmake")

set(_venv "${WORK_DIR}/venv")
set(_conan "${_venv}/bin/conan")
if(NOT EXISTS "${_conan}")
  find_program(PYTHON3 NAMES python3)
  if(NOT PYTHON3)
    skip("python3 is not installed")
    return()
  endif()
  file(REMOVE_RECURSE "${_venv}")
  execute_process(COMMAND "${PYTHON3}" -m venv "${_venv}"
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
  if(NOT _rc EQUAL 0)
    skip("python3 -m venv failed (Debian: apt install python3-venv): ${_out}")
    return()
  endif()
  execute_process(
    COMMAND "${_venv}/bin/python" -m pip install --disable-pip-version-check --no-input
            --timeout 15 --retries 1 "conan>=2,<3"
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out TIMEOUT 240)
  if(NOT _rc EQUAL 0 OR NOT EXISTS "${_conan}")
    string(REGEX REPLACE "^.*(.{1,600})$" "\\1" _out "${_out}")
    skip("could not install Conan from PyPI (offline?): ${_rc}: ...${_out}")
    file(REMOVE_RECURSE "${_venv}")
    return()
  endif()
endif()

# A copy of what the recipe exports plus test_package/, so Conan's test_package build folders
# land here and not in the checkout.
set(_recipe "${WORK_DIR}/recipe")
file(REMOVE_RECURSE "${_recipe}" "${WORK_DIR}/conan_home")
file(COPY "${SOURCE_DIR}/conanfile.py" "${SOURCE_DIR}/include" "${SOURCE_DIR}/LICENSE"
     DESTINATION "${_recipe}")
file(COPY "${SOURCE_DIR}/test_package" DESTINATION "${_recipe}"
     PATTERN build EXCLUDE PATTERN CMakeUserPresets.json EXCLUDE)

set(_env "${CMAKE_COMMAND}" -E env "CONAN_HOME=${WORK_DIR}/conan_home" "CXX=${CXX}")
step(${_env} "${_conan}" profile detect --force)
step(${_env} "${_conan}" remote disable "*")
execute_process(
  COMMAND ${_env} "${_conan}" create "${_recipe}" -s compiler.cppstd=20 -s build_type=Release
          --build=missing -c "tools.cmake.cmaketoolchain:generator=${GENERATOR}"
          -c tools.build:jobs=2
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
if(NOT _rc EQUAL 0 OR NOT _out MATCHES "all_reduce over tutti::inproc, 4 ranks: ok")
  message(FATAL_ERROR "conan create failed (${_rc}):\n${_out}")
endif()
# The package declares its license and carries the text (ConanCenter's rule: licenses/).
file(GLOB _licenses "${WORK_DIR}/conan_home/p/b/*/p/licenses/LICENSE")
if(NOT _licenses)
  message(FATAL_ERROR "the Conan package has no licenses/LICENSE")
endif()
execute_process(
  COMMAND ${_env} "${_conan}" inspect "${_recipe}" --format=json
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _inspect ERROR_VARIABLE _inspect_err)
if(NOT _rc EQUAL 0 OR NOT _inspect MATCHES "\"license\": \"Apache-2.0\"")
  message(FATAL_ERROR "conan inspect does not report license Apache-2.0 (${_rc}):\n${_inspect}${_inspect_err}")
endif()

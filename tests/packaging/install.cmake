# Fixture for the find_package and pkg-config tests: installs the build tree BUILD_DIR into
# PREFIX, and checks the layout of an architecture-independent header-only package.
cmake_minimum_required(VERSION 3.25)
set(TUTTI_PACKAGING_NEEDS BUILD_DIR PREFIX)
include("${CMAKE_CURRENT_LIST_DIR}/common.cmake")

file(REMOVE_RECURSE "${PREFIX}")
step("${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}")

foreach(_file IN ITEMS
    include/tutti/tutti.hpp
    share/cmake/tutti/tuttiConfig.cmake
    share/cmake/tutti/tuttiConfigVersion.cmake
    share/cmake/tutti/tuttiTargets.cmake
    share/cmake/tutti/FindNCCL.cmake
    share/pkgconfig/tutti.pc
    share/doc/tutti/LICENSE)
  if(NOT EXISTS "${PREFIX}/${_file}")
    message(FATAL_ERROR "not installed: ${_file}")
  endif()
endforeach()
if(EXISTS "${PREFIX}/lib" OR EXISTS "${PREFIX}/lib64")
  message(FATAL_ERROR "a header-only package installs nothing under lib/")
endif()
file(READ "${PREFIX}/share/cmake/tutti/tuttiConfigVersion.cmake" _version_file)
string(FIND "${_version_file}" "requested no architecture check, don't perform the check\nif(\"TRUE\")" _at)
if(_at LESS 0)
  message(FATAL_ERROR "tuttiConfigVersion.cmake checks the pointer size: not ARCH_INDEPENDENT")
endif()
# Components: each export file and .pc file is installed exactly when tutti was built with it.
foreach(_comp IN ITEMS Gloo Nccl)
  string(TOLOWER "${_comp}" _name)
  set(_export "${PREFIX}/share/cmake/tutti/tutti${_comp}Targets.cmake")
  set(_pc "${PREFIX}/share/pkgconfig/tutti-${_name}.pc")
  if((EXISTS "${_export}" AND NOT EXISTS "${_pc}") OR (EXISTS "${_pc}" AND NOT EXISTS "${_export}"))
    message(FATAL_ERROR "component ${_name}: one of ${_export} and ${_pc} is missing")
  endif()
endforeach()

# The vcpkg overlay port (packaging/vcpkg/ports/tutti) without vcpkg, which cannot be downloaded
# here: checks vcpkg.json, then runs portfile.cmake itself with stand-ins for the vcpkg
# functions it calls. vcpkg_cmake_configure and vcpkg_cmake_install run CMake as vcpkg would
# (release only, the portfile's options, FEATURES -> vcpkg_check_features), and
# vcpkg_cmake_config_fixup moves share/cmake/tutti to share/tutti the way vcpkg does. Then the
# port's usage snippet (vcpkg/) is built against the result.
#   FEATURES: the port features to build (a list; gloo needs Gloo installed here).
cmake_minimum_required(VERSION 3.25)
include("${CMAKE_CURRENT_LIST_DIR}/common.cmake")

set(PORT tutti)
set(_port_dir "${SOURCE_DIR}/packaging/vcpkg/ports/${PORT}")

# --- vcpkg.json ---------------------------------------------------------------------------
file(READ "${_port_dir}/vcpkg.json" _manifest)
string(JSON _name ERROR_VARIABLE _err GET "${_manifest}" name)
if(_err)
  message(FATAL_ERROR "vcpkg.json does not parse: ${_err}")
endif()
string(JSON VERSION GET "${_manifest}" version)
string(JSON _description GET "${_manifest}" description)
if(NOT _name STREQUAL PORT OR _description STREQUAL "")
  message(FATAL_ERROR "vcpkg.json: name '${_name}' (want ${PORT}) and a description are required")
endif()
file(STRINGS "${SOURCE_DIR}/CMakeLists.txt" _project REGEX "^  VERSION [0-9.]+$")
if(NOT _project MATCHES "VERSION ${VERSION}$")
  message(FATAL_ERROR "vcpkg.json version ${VERSION} differs from CMakeLists.txt's (${_project})")
endif()
set(_host_deps)
string(JSON _count LENGTH "${_manifest}" dependencies)
math(EXPR _last "${_count} - 1")
foreach(_i RANGE ${_last})
  string(JSON _dep_name ERROR_VARIABLE _err GET "${_manifest}" dependencies ${_i} name)
  string(JSON _dep_host ERROR_VARIABLE _err GET "${_manifest}" dependencies ${_i} host)
  if(_dep_host)
    list(APPEND _host_deps ${_dep_name})
  endif()
endforeach()
if(NOT "vcpkg-cmake" IN_LIST _host_deps OR NOT "vcpkg-cmake-config" IN_LIST _host_deps)
  message(FATAL_ERROR "vcpkg.json: vcpkg-cmake and vcpkg-cmake-config must be host dependencies")
endif()
foreach(_feature IN ITEMS gloo nccl)
  string(JSON _feature_description ERROR_VARIABLE _err GET "${_manifest}" features ${_feature} description)
  string(JSON _feature_deps ERROR_VARIABLE _err2 GET "${_manifest}" features ${_feature} dependencies)
  if(_err OR _err2)
    message(FATAL_ERROR "vcpkg.json: feature '${_feature}' needs a description and dependencies")
  endif()
endforeach()

# --- stand-ins for the vcpkg functions portfile.cmake calls ------------------------------
set(CURRENT_PACKAGES_DIR "${WORK_DIR}/packages/${PORT}_x64-linux")
set(CURRENT_BUILDTREES_DIR "${WORK_DIR}/buildtrees/${PORT}")
file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}" "${CURRENT_BUILDTREES_DIR}")

function(vcpkg_check_features)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "OUT_FEATURE_OPTIONS" "FEATURES")
  set(_options)
  while(arg_FEATURES)
    list(POP_FRONT arg_FEATURES _feature _option)
    if(_feature IN_LIST FEATURES)
      list(APPEND _options "-D${_option}=ON")
    else()
      list(APPEND _options "-D${_option}=OFF")
    endif()
  endwhile()
  set(${arg_OUT_FEATURE_OPTIONS} "${_options}" PARENT_SCOPE)
endfunction()

function(vcpkg_cmake_configure)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "SOURCE_PATH" "OPTIONS")
  if(NOT VCPKG_BUILD_TYPE STREQUAL "release")
    message(FATAL_ERROR "a header-only port sets VCPKG_BUILD_TYPE to release")
  endif()
  step("${CMAKE_COMMAND}" -S "${arg_SOURCE_PATH}" -B "${CURRENT_BUILDTREES_DIR}/rel"
       -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_COMPILER=${CXX}"
       "-DCMAKE_INSTALL_PREFIX=${CURRENT_PACKAGES_DIR}" ${arg_OPTIONS})
endfunction()

function(vcpkg_cmake_install)
  step("${CMAKE_COMMAND}" --build "${CURRENT_BUILDTREES_DIR}/rel" --target install -j2)
endfunction()

# vcpkg moves the package files to share/<port> and rewrites the targets files' way up to the
# prefix (here: one directory less).
function(vcpkg_cmake_config_fixup)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "CONFIG_PATH" "")
  set(_from "${CURRENT_PACKAGES_DIR}/${arg_CONFIG_PATH}")
  set(_to "${CURRENT_PACKAGES_DIR}/share/${PORT}")
  if(NOT EXISTS "${_from}/${PORT}Config.cmake")
    message(FATAL_ERROR "vcpkg_cmake_config_fixup: no ${PORT}Config.cmake in ${_from}")
  endif()
  file(RENAME "${_from}" "${_to}")
  file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/share/cmake")
  file(GLOB _targets "${_to}/*Targets.cmake")
  set(_up "get_filename_component(_IMPORT_PREFIX \"\${_IMPORT_PREFIX}\" PATH)\n")
  foreach(_file IN LISTS _targets)
    file(READ "${_file}" _text)
    string(FIND "${_text}" "${_up}" _at)
    if(_at LESS 0)
      message(FATAL_ERROR "vcpkg_cmake_config_fixup: ${_file} has no _IMPORT_PREFIX to fix")
    endif()
    string(SUBSTRING "${_text}" 0 ${_at} _head)
    string(LENGTH "${_up}" _len)
    math(EXPR _at "${_at} + ${_len}")
    string(SUBSTRING "${_text}" ${_at} -1 _tail)
    file(WRITE "${_file}" "${_head}${_tail}")
  endforeach()
endfunction()

# vcpkg rewrites absolute paths into the package in .pc files; tutti's must have none.
function(vcpkg_fixup_pkgconfig)
  file(GLOB _pcs "${CURRENT_PACKAGES_DIR}/share/pkgconfig/*.pc")
  if(NOT _pcs)
    message(FATAL_ERROR "vcpkg_fixup_pkgconfig: no .pc file in share/pkgconfig")
  endif()
  foreach(_pc IN LISTS _pcs)
    file(READ "${_pc}" _text)
    string(FIND "${_text}" "${CURRENT_PACKAGES_DIR}" _at)
    if(_at GREATER_EQUAL 0)
      message(FATAL_ERROR "${_pc} names the package directory: not relocatable")
    endif()
  endforeach()
endfunction()

function(vcpkg_install_copyright)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "" "FILE_LIST")
  file(INSTALL ${arg_FILE_LIST} DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
  file(RENAME "${CURRENT_PACKAGES_DIR}/share/${PORT}/LICENSE"
       "${CURRENT_PACKAGES_DIR}/share/${PORT}/copyright")
endfunction()

include("${_port_dir}/portfile.cmake")

# --- what vcpkg's post-build checks look at, then the usage snippet ----------------------
foreach(_file IN ITEMS include/tutti/tutti.hpp share/${PORT}/${PORT}Config.cmake
                       share/${PORT}/${PORT}ConfigVersion.cmake share/${PORT}/copyright
                       share/${PORT}/usage share/pkgconfig/tutti.pc)
  if(NOT EXISTS "${CURRENT_PACKAGES_DIR}/${_file}")
    message(FATAL_ERROR "the port did not install ${_file}")
  endif()
endforeach()
foreach(_dir IN ITEMS lib debug share/cmake)
  if(EXISTS "${CURRENT_PACKAGES_DIR}/${_dir}")
    message(FATAL_ERROR "a header-only port leaves no ${_dir}/")
  endif()
endforeach()
consumer(all_reduce "${PACKAGING_DIR}/vcpkg" "-DCMAKE_PREFIX_PATH=${CURRENT_PACKAGES_DIR}")

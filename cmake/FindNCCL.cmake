# FindNCCL
# --------
# Finds NVIDIA's NCCL (nccl.h and libnccl). Shipped with tutti, used by the tutti::nccl
# component at build time and by the installed tuttiConfig.cmake.
#
# Hints (CMake variables, or environment variables of the same name):
#   NCCL_ROOT          prefix holding include/nccl.h and lib/libnccl.so (also NCCL_HOME)
#   NCCL_INCLUDE_DIR   directory holding nccl.h (cache variable; set it to skip the search)
#   NCCL_LIBRARY       full path of libnccl (cache variable; set it to skip the search)
# Without hints it also looks in the CUDA toolkit (CUDAToolkit_ROOT, CUDA_HOME, CUDA_PATH,
# /usr/local/cuda), where pip-style and NVIDIA's own installs put NCCL, and in system paths.
#
# Result variables:
#   NCCL_FOUND, NCCL_INCLUDE_DIRS, NCCL_LIBRARIES, NCCL_VERSION (from nccl.h: MAJOR.MINOR.PATCH),
#   NCCL_VERSION_MAJOR, NCCL_VERSION_MINOR, NCCL_VERSION_PATCH
# Imported target:
#   NCCL::nccl         the library and its include directory. nccl.h includes
#                      <cuda_runtime.h>: link CUDA::cudart (find_package(CUDAToolkit)) too.

set(_nccl_hints)
foreach(_nccl_var IN ITEMS NCCL_ROOT NCCL_HOME CUDAToolkit_ROOT CUDA_HOME CUDA_PATH)
  if(DEFINED ${_nccl_var})
    list(APPEND _nccl_hints "${${_nccl_var}}")
  endif()
  if(DEFINED ENV{${_nccl_var}})
    list(APPEND _nccl_hints "$ENV{${_nccl_var}}")
  endif()
endforeach()
if(CUDAToolkit_LIBRARY_ROOT)
  list(APPEND _nccl_hints "${CUDAToolkit_LIBRARY_ROOT}")
endif()
list(APPEND _nccl_hints /usr/local/cuda)

find_path(NCCL_INCLUDE_DIR
  NAMES nccl.h
  HINTS ${_nccl_hints}
  PATH_SUFFIXES include targets/${CMAKE_SYSTEM_PROCESSOR}-linux/include
  DOC "Directory holding nccl.h")

find_library(NCCL_LIBRARY
  NAMES nccl
  HINTS ${_nccl_hints}
  PATH_SUFFIXES lib lib64 targets/${CMAKE_SYSTEM_PROCESSOR}-linux/lib
  DOC "The NCCL library")

unset(NCCL_VERSION)
if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_defines
    REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
  foreach(_nccl_part IN ITEMS MAJOR MINOR PATCH)
    if(_nccl_defines MATCHES "#define NCCL_${_nccl_part} +([0-9]+)")
      set(NCCL_VERSION_${_nccl_part} "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  if(DEFINED NCCL_VERSION_MAJOR AND DEFINED NCCL_VERSION_MINOR AND DEFINED NCCL_VERSION_PATCH)
    set(NCCL_VERSION "${NCCL_VERSION_MAJOR}.${NCCL_VERSION_MINOR}.${NCCL_VERSION_PATCH}")
  endif()
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL
  REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
  VERSION_VAR NCCL_VERSION
  REASON_FAILURE_MESSAGE
    "set NCCL_ROOT to the prefix holding include/nccl.h and lib/libnccl.so, or NCCL_INCLUDE_DIR and NCCL_LIBRARY")

if(NCCL_FOUND)
  set(NCCL_INCLUDE_DIRS "${NCCL_INCLUDE_DIR}")
  set(NCCL_LIBRARIES "${NCCL_LIBRARY}")
  if(NOT TARGET NCCL::nccl)
    add_library(NCCL::nccl UNKNOWN IMPORTED)
    set_target_properties(NCCL::nccl PROPERTIES
      IMPORTED_LOCATION "${NCCL_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
  endif()
endif()

mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)
unset(_nccl_hints)
unset(_nccl_var)
unset(_nccl_part)
unset(_nccl_defines)

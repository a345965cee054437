# find_package(tutti) against the installed tree: CASE=core builds the README's programs
# (find_package/), CASE=gloo the Gloo all_reduce (find_package_gloo/: COMPONENTS gloo,
# OPTIONAL_COMPONENTS nccl).
cmake_minimum_required(VERSION 3.25)
set(TUTTI_PACKAGING_NEEDS PREFIX CASE)
include("${CMAKE_CURRENT_LIST_DIR}/common.cmake")

if(CASE STREQUAL "core")
  consumer(readme_programs "${PACKAGING_DIR}/find_package" "-DCMAKE_PREFIX_PATH=${PREFIX}")
elseif(CASE STREQUAL "gloo")
  consumer(gloo_all_reduce "${PACKAGING_DIR}/find_package_gloo" "-DCMAKE_PREFIX_PATH=${PREFIX}")
else()
  message(FATAL_ERROR "CASE must be core or gloo")
endif()

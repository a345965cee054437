# add_subdirectory(tutti) from a user's project: builds and runs its program, then checks that
# tutti added no install rules of its own to that project.
cmake_minimum_required(VERSION 3.25)
include("${CMAKE_CURRENT_LIST_DIR}/common.cmake")

consumer(all_reduce "${PACKAGING_DIR}/add_subdirectory" "-DTUTTI_SOURCE_DIR=${SOURCE_DIR}")
step("${CMAKE_COMMAND}" --install "${WORK_DIR}/all_reduce" --prefix "${WORK_DIR}/prefix")
if(EXISTS "${WORK_DIR}/prefix/include/tutti")
  message(FATAL_ERROR "add_subdirectory(tutti) installed tutti's headers with the user's project")
endif()

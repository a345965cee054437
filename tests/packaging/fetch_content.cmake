# FetchContent from a URL: packs the checkout's CMakeLists.txt, cmake/ and include/ into an
# archive, as a release archive would hold them, and lets a user's project download it (from a
# file:// URL: no network) and build against it.
cmake_minimum_required(VERSION 3.25)
include("${CMAKE_CURRENT_LIST_DIR}/common.cmake")

set(_archive "${WORK_DIR}/tutti-src.tar.gz")
file(REMOVE "${_archive}")
step("${CMAKE_COMMAND}" -E chdir "${SOURCE_DIR}"
     "${CMAKE_COMMAND}" -E tar czf "${_archive}" CMakeLists.txt cmake include)
consumer(all_reduce "${PACKAGING_DIR}/fetch_content" "-DTUTTI_URL=file://${_archive}")

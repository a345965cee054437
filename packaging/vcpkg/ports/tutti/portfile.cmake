# tutti is header-only: one (release) configuration, nothing under lib/.
set(VCPKG_BUILD_TYPE release)

# Source: the tutti checkout that holds this overlay port (packaging/vcpkg/ports/tutti, four
# levels down), so `vcpkg install tutti --overlay-ports=<checkout>/packaging/vcpkg/ports`
# builds exactly that checkout. A registry copy of this port, which has no checkout around it,
# replaces these lines with
#   vcpkg_from_github(OUT_SOURCE_PATH SOURCE_PATH REPO <owner>/tutti REF "v${VERSION}" SHA512 <hash>)
cmake_path(SET SOURCE_PATH NORMALIZE "${CMAKE_CURRENT_LIST_DIR}/../../../..")
if(NOT EXISTS "${SOURCE_PATH}/include/tutti/tutti.hpp")
  message(FATAL_ERROR "tutti's overlay port builds the checkout it lives in, but "
    "${SOURCE_PATH} is not a tutti checkout; use the port from packaging/vcpkg/ports of one")
endif()

vcpkg_check_features(OUT_FEATURE_OPTIONS FEATURE_OPTIONS
  FEATURES
    gloo TUTTI_WITH_GLOO
    nccl TUTTI_WITH_NCCL)

vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    -DTUTTI_INSTALL=ON
    -DTUTTI_BUILD_TESTS=OFF
    -DTUTTI_BUILD_EXAMPLES=OFF
    -DTUTTI_BUILD_BENCHMARKS=OFF
    ${FEATURE_OPTIONS})
vcpkg_cmake_install()
vcpkg_cmake_config_fixup(CONFIG_PATH share/cmake/tutti)
vcpkg_fixup_pkgconfig()

file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")

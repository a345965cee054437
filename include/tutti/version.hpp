#pragma once
/// \file
/// tutti's version.

#define TUTTI_VERSION_MAJOR 0
#define TUTTI_VERSION_MINOR 1
#define TUTTI_VERSION_PATCH 0

namespace tutti {
inline constexpr int version_major = TUTTI_VERSION_MAJOR;
inline constexpr int version_minor = TUTTI_VERSION_MINOR;
inline constexpr int version_patch = TUTTI_VERSION_PATCH;
}  // namespace tutti

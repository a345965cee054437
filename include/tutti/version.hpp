#pragma once
/// \file
/// tutti's version. Everything tutti declares lives in the inline namespace tutti::v0 (written
/// tutti:: as usual): a release that changes the ABI changes it, so two versions linked into one
/// program cannot be mixed up silently (an ODR violation) but fail to link instead.

#define TUTTI_VERSION_MAJOR 0
#define TUTTI_VERSION_MINOR 1
#define TUTTI_VERSION_PATCH 0

namespace tutti::inline v0 {
inline constexpr int version_major = TUTTI_VERSION_MAJOR;
inline constexpr int version_minor = TUTTI_VERSION_MINOR;
inline constexpr int version_patch = TUTTI_VERSION_PATCH;
}  // namespace tutti::inline v0

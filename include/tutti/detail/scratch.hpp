#pragma once
/// \file
/// Scratch buffers kept between calls, so steady-state calls do not allocate: a communicator's
/// (detail/context.hpp), and each level's of a layered world (transport/layered.hpp).

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tutti::inline v0::detail {

struct scratch_space {
  std::vector<std::byte> algo;
  std::vector<std::byte> staging;
  std::uint64_t segment_rounds = 0;  // alternates the shared segment's halves between rounds

  static std::byte* grow(std::vector<std::byte>& v, std::size_t bytes) {
    if (v.size() < bytes) v.resize(bytes);
    return v.data();
  }
};

}  // namespace tutti::inline v0::detail

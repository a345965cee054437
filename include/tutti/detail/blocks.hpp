#pragma once
/// \file
/// Byte arithmetic every schedule shares: splitting a count into near-equal blocks, and copying
/// host bytes.

#include <cstddef>
#include <cstring>

namespace tutti::inline v0::detail {

/// memmove of host memory; nothing when n is 0 or the ranges are the same.
inline void copy_bytes(void* d, const void* s, std::size_t n) noexcept {
  if (n != 0 && d != s) std::memmove(d, s, n);
}

/// Splits `count` elements into `parts` blocks as evenly as possible; block i starts at
/// `offset(i)` and holds `length(i)` elements.
struct blocks {
  std::size_t count;
  std::size_t parts;
  [[nodiscard]] std::size_t offset(std::size_t i) const noexcept {
    const std::size_t q = count / parts, r = count % parts;
    return i * q + (i < r ? i : r);
  }
  [[nodiscard]] std::size_t length(std::size_t i) const noexcept {
    return count / parts + (i < count % parts ? 1 : 0);
  }
};

}  // namespace tutti::inline v0::detail

#pragma once
/// \file
/// tutti::bucketer's machinery without a communicator: DDP's assignment of gradients to
/// buckets, dispatch from a dtype to its C++ type, and the 16-bit conversions of compressed
/// buckets.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tutti/core/bfloat16.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/half.hpp"
#include "tutti/core/types.hpp"

namespace tutti::inline v0::detail {

/// DDP's compute_bucket_assignment_by_size: walks `order` (gradient indices), keeping one open
/// bucket per element type; appends each gradient to its type's bucket and closes the bucket
/// once it holds >= its limit (the type's first bucket `limits[0]`, later ones the next limit,
/// the last repeating). Open buckets are flushed at the end, in order of their types' first
/// appearance. With `sort`, buckets are ordered by the position of their first gradient in
/// `order` (DDP's construction); without, they stay in closing order (DDP's rebuild).
[[nodiscard]] inline std::vector<std::vector<std::size_t>> assign_buckets(
    std::span<const std::size_t> order, std::span<const dtype> types,
    std::span<const std::size_t> bytes, std::span<const std::size_t> limits, bool sort) {
  struct open_bucket {
    dtype type;
    std::vector<std::size_t> members;
    std::size_t size = 0;
    std::size_t limit = 0;  // index into limits
  };
  std::vector<open_bucket> open;  // one per type, in order of first appearance
  std::vector<std::vector<std::size_t>> out;
  for (const std::size_t g : order) {
    auto it = std::find_if(open.begin(), open.end(),
                           [&](const open_bucket& b) { return b.type == types[g]; });
    if (it == open.end()) it = open.insert(open.end(), open_bucket{types[g], {}, 0, 0});
    it->members.push_back(g);
    it->size += bytes[g];
    if (it->size >= limits[std::min(it->limit, limits.size() - 1)]) {
      out.push_back(std::move(it->members));
      it->members.clear();
      it->size = 0;
      ++it->limit;
    }
  }
  for (open_bucket& b : open)
    if (!b.members.empty()) out.push_back(std::move(b.members));
  if (sort) {
    std::vector<std::size_t> position(types.size());
    for (std::size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
    std::stable_sort(out.begin(), out.end(), [&](const auto& a, const auto& b) {
      return position[a.front()] < position[b.front()];
    });
  }
  return out;
}

/// Calls f.template operator()<T>() with the C++ type of a reducible-by-sum dtype.
template <class F>
decltype(auto) visit_sum_type(dtype t, F&& f) {
  switch (t) {
    case dtype::int8:
      return f.template operator()<std::int8_t>();
    case dtype::uint8:
      return f.template operator()<std::uint8_t>();
    case dtype::int16:
      return f.template operator()<std::int16_t>();
    case dtype::uint16:
      return f.template operator()<std::uint16_t>();
    case dtype::int32:
      return f.template operator()<std::int32_t>();
    case dtype::uint32:
      return f.template operator()<std::uint32_t>();
    case dtype::int64:
      return f.template operator()<std::int64_t>();
    case dtype::uint64:
      return f.template operator()<std::uint64_t>();
    case dtype::float16:
      return f.template operator()<half>();
    case dtype::bfloat16:
      return f.template operator()<bfloat16>();
    case dtype::float32:
      return f.template operator()<float>();
    case dtype::float64:
      return f.template operator()<double>();
    case dtype::float128:
      return f.template operator()<long double>();
    case dtype::boolean:
    case dtype::character:
      break;
  }
  throw error(errc::invalid_argument, "", 0, -1, -1,
              "bucketer: element type " + std::string(name(t)) + " cannot be summed");
}

// float/double/long double <-> 16-bit, nearest-even (doubles convert directly, not via float).
template <class W, class T>
void compress_into(W* dst, const T* src, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) dst[i] = W(static_cast<double>(src[i]));
}
template <class T, class W>
void decompress_into(T* dst, const W* src, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(static_cast<double>(src[i]));
}

}  // namespace tutti::inline v0::detail

#pragma once
/// \file
/// tutti::bucketer's machinery without a communicator: DDP's assignment of gradients to
/// buckets and its rebuild order, dispatch from a dtype to its C++ type, the 16-bit
/// conversions of compressed buckets, and the layout's log line.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "tutti/core/bfloat16.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/half.hpp"
#include "tutti/core/options.hpp"
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

/// DDP's rebuild order: the gradients in the order they became ready (`ready`), then those
/// never marked, in reverse registration order; `n` gradients in all.
[[nodiscard]] inline std::vector<std::uint64_t> ready_order_then_rest(
    std::span<const std::size_t> ready, std::size_t n) {
  std::vector<std::uint64_t> order;
  std::vector<char> seen(n, 0);
  for (const std::size_t g : ready) {
    order.push_back(g);
    seen[g] = 1;
  }
  for (std::size_t i = n; i-- > 0;)
    if (seen[i] == 0) order.push_back(i);
  return order;
}

/// Whether `order` holds each of 0, ..., n - 1 exactly once.
[[nodiscard]] inline bool is_order_of(std::span<const std::size_t> order, std::size_t n) {
  std::vector<char> seen(n, 0);
  for (const std::size_t g : order) {
    if (g >= n || seen[g] != 0) return false;
    seen[g] = 1;
  }
  return order.size() == n;
}

/// The bucket layout's log line (TUTTI_DEBUG=INFO) on stderr: each bucket's element type,
/// bytes and gradients (a descending run as a..b). One line, built with appends only (GCC 12's
/// -Wrestrict misfires on "lit" + string&&).
template <class Bucket>
void log_bucket_layout(int rank, std::size_t gradients, std::span<const Bucket> buckets,
                       bool rebuilding) {
  if (!debug_info()) return;
  std::size_t total = 0;
  for (const Bucket& b : buckets) total += b.bytes;
  std::string line = "tutti[bucketer] rank ";
  line.append(std::to_string(rank)).append(": ");
  line.append(std::to_string(gradients)).append(" gradients, ");
  line.append(std::to_string(total)).append(" bytes in ");
  line.append(std::to_string(buckets.size())).append(" buckets");
  if (rebuilding) line.append(" (rebuilt from the ready order)");
  line.append(":");
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    const Bucket& b = buckets[k];
    line.append(" [").append(std::to_string(k)).append("] ").append(name(b.type));
    line.append(" ").append(std::to_string(b.bytes)).append(" B {");
    for (std::size_t j = 0; j < b.grads.size();) {
      std::size_t e = j;
      while (e + 1 < b.grads.size() && b.grads[e + 1] + 1 == b.grads[e]) ++e;
      if (j != 0) line.append(",");
      line.append(std::to_string(b.grads[j]));
      if (e != j) line.append("..").append(std::to_string(b.grads[e]));
      j = e + 1;
    }
    line.append("}");
  }
  std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace tutti::inline v0::detail

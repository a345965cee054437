#pragma once
/// \file
/// Which collectives an algorithm policy implements for a transport: one concept per
/// capability, so the communicator can say in plain words what is missing.

#include <cstddef>
#include <span>
#include <vector>

#include "tutti/detail/context.hpp"

namespace tutti::inline v0::detail {

template <class A, class T>
concept has_all_reduce = requires(context<T>& c, const std::byte* i, std::byte* o, std::size_t n) {
  A::all_reduce(c, i, o, n);
};
template <class A, class T>
concept has_reduce = requires(context<T>& c, const std::byte* i, std::byte* o, std::size_t n) {
  A::reduce(c, i, o, n, 0);
};
template <class A, class T>
concept has_broadcast =
    requires(context<T>& c, std::byte* b, std::size_t n) { A::broadcast(c, b, n, 0); };
template <class A, class T>
concept has_all_gather = requires(context<T>& c, const std::byte* i, std::byte* o, std::size_t n) {
  A::all_gather(c, i, o, n);
};
template <class A, class T>
concept has_gather = requires(context<T>& c, const std::byte* i, std::byte* o, std::size_t n) {
  A::gather(c, i, o, n, 0);
};
template <class A, class T>
concept has_scatter = requires(context<T>& c, const std::byte* i, std::byte* o, std::size_t n) {
  A::scatter(c, i, o, n, 0);
};
template <class A, class T>
concept has_reduce_scatter = requires(context<T>& c, const std::byte* i, std::byte* o,
                                      std::size_t n) { A::reduce_scatter(c, i, o, n); };
template <class A, class T>
concept has_all_to_all = requires(context<T>& c, const std::byte* i, std::byte* o, std::size_t n) {
  A::all_to_all(c, i, o, n);
};
template <class A, class T>
concept has_all_gatherv = requires(context<T>& c, const std::byte* i, std::byte* o,
                                   std::span<const std::size_t> n) { A::all_gatherv(c, i, o, n); };
template <class A, class T>
concept has_gatherv = requires(context<T>& c, const std::byte* i, std::byte* o,
                               std::span<const std::size_t> n) { A::gatherv(c, i, o, n, 0); };
template <class A, class T>
concept has_scatterv = requires(context<T>& c, const std::byte* i, std::byte* o,
                                std::span<const std::size_t> n) { A::scatterv(c, i, o, n, 0); };
template <class A, class T>
concept has_all_to_allv =
    requires(context<T>& c, const std::byte* i, std::byte* o, std::span<const std::size_t> n) {
      A::all_to_allv(c, i, n, o, n);
    };
template <class A, class T>
concept has_barrier = requires(context<T>& c) { A::barrier(c); };

/// Prefix sums of per-rank counts: block r of a v-variant's buffer starts at `offsets[r]`.
[[nodiscard]] inline std::vector<std::size_t> prefix_offsets(std::span<const std::size_t> counts) {
  std::vector<std::size_t> off(counts.size() + 1, 0);
  for (std::size_t i = 0; i < counts.size(); ++i) off[i + 1] = off[i] + counts[i];
  return off;
}

}  // namespace tutti::inline v0::detail

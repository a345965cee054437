#pragma once
/// \file
/// Which collectives an algorithm policy implements for a transport: one concept per
/// capability, so the communicator can say in plain words what is missing. And `policy_list`,
/// the list of policies a chooser such as tutti::automatic selects among.

#include <array>
#include <cstddef>
#include <span>
#include <string_view>
#include <type_traits>

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

/// `P`, as a type that depends on `T`: a name looked up in it waits for instantiation.
template <class P, class T>
struct dependent {
  using type = P;
};

/// A list of policies, each with a static `name`: what a chooser (tutti::automatic) iterates
/// for the cost argmin, for TUTTI_ALGO's names and for dispatch. A policy's index is its
/// position here.
template <class... P>
struct policy_list {
  static constexpr std::size_t size = sizeof...(P);
  static constexpr std::array<std::string_view, sizeof...(P)> names{std::string_view{P::name}...};

  /// The index of policy `Q` (`size` if it is not in the list).
  template <class Q>
  static constexpr std::size_t index_of = [] {
    constexpr std::array<bool, sizeof...(P)> same{std::is_same_v<Q, P>...};
    std::size_t i = 0;
    while (i < same.size() && !same[i]) ++i;
    return i;
  }();

  /// Calls `f.template operator()<P>()` for every policy, in order.
  template <class F>
  static void for_each(F&& f) {
    (f.template operator()<P>(), ...);
  }

  /// `f.template operator()<P>()` for the policy at `index`; `otherwise` if there is none.
  template <class R, class F>
  static R visit(std::size_t index, F&& f, R otherwise) {
    std::size_t i = 0;
    (void)((i++ == index ? (otherwise = f.template operator()<P>(), true) : false) || ...);
    return otherwise;
  }
};

}  // namespace tutti::inline v0::detail

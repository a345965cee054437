#pragma once
/// \file
/// tutti::tree: binomial trees. lg p rounds: the latency-optimal choice for small messages.
/// all_reduce = binomial reduce to rank 0 + binomial broadcast.

#include <cstddef>

#include "tutti/detail/schedules.hpp"
#include "tutti/transport/concepts.hpp"

namespace tutti::inline v0 {

struct tree {
  static constexpr const char* name = "tree";

  template <class Ctx>
  static void all_reduce(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    const std::size_t bytes = count * c.elem();
    c.copy(out, in, bytes);
    detail::binomial_reduce(c, out, bytes, 0);
    detail::binomial_broadcast(c, out, bytes, 0);
  }

  template <class Ctx>
  static void reduce(Ctx& c, const std::byte* in, std::byte* out, std::size_t count, int root) {
    const std::size_t bytes = count * c.elem();
    std::byte* acc = c.rank() == root ? out : c.scratch(bytes);
    c.copy(acc, in, bytes);
    detail::binomial_reduce(c, acc, bytes, root);
  }

  template <class Ctx>
  static void broadcast(Ctx& c, std::byte* buf, std::size_t count, int root) {
    detail::binomial_broadcast(c, buf, count * c.elem(), root);
  }

  template <class Ctx>
  static void gather(Ctx& c, const std::byte* in, std::byte* out, std::size_t count, int root) {
    detail::binomial_gather(c, in, out, count * c.elem(), root);
  }

  template <class Ctx>
  static void scatter(Ctx& c, const std::byte* in, std::byte* out, std::size_t count, int root) {
    detail::binomial_scatter(c, in, out, count * c.elem(), root);
  }

  template <class Ctx>
  static void barrier(Ctx& c) {
    detail::dissemination_barrier(c);
  }
};

}  // namespace tutti::inline v0

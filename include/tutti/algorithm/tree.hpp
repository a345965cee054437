#pragma once
/// \file
/// tutti::tree: binomial trees. lg p rounds: the latency-optimal choice for small messages.
/// all_reduce = binomial reduce to rank 0 + binomial broadcast.

#include <cstddef>
#include <optional>

#include "tutti/detail/call.hpp"
#include "tutti/detail/cost.hpp"
#include "tutti/detail/schedules.hpp"

namespace tutti::inline v0 {

struct tree {
  static constexpr const char* name = "tree";

  /// Predicted microseconds of collective `k` (nullopt: not implemented here).
  /// Across hosts its all_reduce prices the two levels itself (see cost).
  static constexpr bool prices_levels = true;

  /// Predicted microseconds of collective `k`. Across hosts (ranks numbered host by host, L
  /// and H powers of two), the all_reduce's binomial reduce takes log₂ L steps inside each host,
  /// then log₂ H across with one rank per host still sending, and its broadcast the same back;
  /// anything else sees the slower level (cost_inputs::flat_across_hosts).
  [[nodiscard]] static std::optional<double> cost(detail::collective k,
                                                  const detail::cost_inputs& in) noexcept {
    if (in.across_hosts()) {
      const auto lv = in.recursive_levels();
      if (k != detail::collective::all_reduce || !lv) return cost(k, in.flat_across_hosts(true));
      const double n = in.n;
      return 2 * (lv->inside * (lv->al / lv->x + n * lv->bl) +
                  lv->across * (lv->a / lv->x + n * lv->b)) +
             in.lg * n * in.g;
    }
    // A child posts its receive long before its parent sends: one α per message, not an
    // exchange's (cost_model::exchange_alphas).
    const double n = in.n, a = in.a1, b = in.b, g = in.g, lg = in.lg;
    switch (k) {
      case detail::collective::all_reduce:
        return 2 * lg * a + 2 * lg * n * b + lg * n * g;
      case detail::collective::reduce:
        return lg * (a + n * b + n * g);
      case detail::collective::broadcast:
        return lg * (a + n * b);
      case detail::collective::gather:
      case detail::collective::scatter:
        return lg * a + in.frac * n * b + n * in.cb;
      case detail::collective::barrier:
        return in.dissemination_barrier();
      default:
        return std::nullopt;
    }
  }
  /// all_reduce on a crowded host: p - 1 messages of the whole vector up, p - 1 down.
  [[nodiscard]] static double crowded_all_reduce(const detail::cost_inputs& in) noexcept {
    const double n = in.n, p = in.p, lg = in.lg;
    const double messages = 2 * (p - 1);
    return in.crowded_host(2 * lg * (in.a1 + in.msg(n)) + lg * n * in.g, messages,
                           messages * in.msg(n), (p - 1) * n);
  }

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

#pragma once
/// \file
/// tutti::recursive_doubling: lg p exchange steps of the whole vector. Latency-optimal
/// all-reduce for small messages; all-gather by recursive doubling (Bruck when p is not a
/// power of two, as Open MPI does).

#include <cstddef>
#include <optional>

#include "tutti/detail/call.hpp"
#include "tutti/detail/cost.hpp"
#include "tutti/detail/recursive.hpp"
#include "tutti/detail/schedules.hpp"

namespace tutti::inline v0 {

struct recursive_doubling {
  static constexpr const char* name = "recursive_doubling";

  /// Predicted microseconds of collective `k` (nullopt: not implemented here).
  /// Across hosts its all_reduce prices the two levels itself (see cost).
  static constexpr bool prices_levels = true;

  /// Predicted microseconds of collective `k`. Across hosts (ranks numbered host by host, L
  /// and H powers of two), the all_reduce's first log₂ L exchanges of the whole vector stay
  /// inside a host and the last log₂ H cross it, all L ranks of a host at once on its link;
  /// anything else sees the slower level (cost_inputs::flat_across_hosts).
  [[nodiscard]] static std::optional<double> cost(detail::collective k,
                                                  const detail::cost_inputs& in) noexcept {
    if (in.across_hosts()) {
      const auto lv = in.recursive_levels();
      if (k != detail::collective::all_reduce || !lv) return cost(k, in.flat_across_hosts(true));
      const double n = in.n;
      return lv->inside * (lv->al + n * lv->bl) + lv->across * (lv->a + n * lv->b * lv->l) +
             in.lg * n * in.g;
    }
    const double n = in.n, a = in.a, b = in.b, g = in.g, lg = in.lg;
    switch (k) {
      case detail::collective::all_reduce:
        return lg * (a + n * b + n * g) + in.fold;
      case detail::collective::all_gather:  // Bruck's extra copy when p is not a power of two
        return lg * a + in.frac * n * b + (in.pow2 ? 0.0 : n * in.cb);
      case detail::collective::barrier:
        return in.dissemination_barrier();
      default:
        return std::nullopt;
    }
  }
  /// all_reduce on a crowded host: lg p messages of the whole vector from every rank.
  [[nodiscard]] static double crowded_all_reduce(const detail::cost_inputs& in) noexcept {
    const double n = in.n, p = in.p, lg = in.lg;
    const double messages = lg * p;
    return in.crowded_host(lg * (in.a + in.msg(n) + n * in.g) + in.fold, messages,
                           messages * in.msg(n), lg * p * n);
  }

  template <class Ctx>
  static void all_reduce(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    c.copy(out, in, count * c.elem());
    detail::doubling_all_reduce(c, out, count * c.elem());
  }

  template <class Ctx>
  static void all_gather(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    detail::recursive_all_gather(c, in, out, count * c.elem());
  }

  template <class Ctx>
  static void barrier(Ctx& c) {
    detail::dissemination_barrier(c);
  }
};

}  // namespace tutti::inline v0

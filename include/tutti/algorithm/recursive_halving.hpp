#pragma once
/// \file
/// tutti::recursive_halving: Rabenseifner's all-reduce, a recursive-halving reduce-scatter
/// followed by the all-gather that mirrors it (2 lg p steps, 2(p-1)/p of the data each way),
/// nearest partner first: the largest exchanges stay between neighbouring ranks, which
/// launchers place on one host. Ranks beyond the largest power of two fold into a neighbour
/// first and get the result back.

#include <cmath>
#include <cstddef>
#include <optional>
#include <vector>

#include "tutti/detail/call.hpp"
#include "tutti/detail/cost.hpp"
#include "tutti/detail/recursive.hpp"
#include "tutti/detail/schedules.hpp"

namespace tutti::inline v0 {

struct recursive_halving {
  static constexpr const char* name = "recursive_halving";

  /// Across hosts its all_reduce prices the two levels itself (see cost).
  static constexpr bool prices_levels = true;

  /// Predicted microseconds of collective `k` (nullopt: not implemented here, or all_gather,
  /// whose schedule is recursive_doubling's: automatic weighs it there, not twice).
  /// Across hosts (L ranks on each of H hosts, numbered host by host, both powers of two), the
  /// all_reduce's first lg L steps each way stay inside a host and carry n(1 - 1/L); the last
  /// lg H cross, every rank of a host at once over the host's link, carrying n(1 - 1/H) per
  /// host; anything else sees the slower level (cost_inputs::flat_across_hosts).
  [[nodiscard]] static std::optional<double> cost(detail::collective k,
                                                  const detail::cost_inputs& in) noexcept {
    if (in.across_hosts()) {
      const auto lv = in.recursive_levels();
      if (k != detail::collective::all_reduce || !lv) return cost(k, in.flat_across_hosts(true));
      const double n = in.n;
      // The reduce-scatter's steps are exchanges; the all-gather's receives were posted
      // during the reduce-scatter, so its steps cost one α (lv->x fewer). Over Gloo's TCP a
      // step of several parts runs as an exchange instead (context::post_ahead), which was
      // faster than the early post: one α stays the closer price.
      const double exchanges = lv->inside * lv->al + lv->across * lv->a;
      const double bytes = (1 - 1 / lv->l) * n * lv->bl + (1 - std::exp2(-lv->across)) * n * lv->b;
      return exchanges * (1 + 1 / lv->x) + 2 * bytes + in.frac * n * in.g;
    }
    const double n = in.n, a = in.a, b = in.b, g = in.g, lg = in.lg;
    switch (k) {
      case detail::collective::all_reduce:  // the all-gather's receives are posted early
        return lg * (a + in.a1) + 2 * in.frac * n * b + in.frac * n * g + in.fold;
      case detail::collective::reduce_scatter:
        return lg * a + in.frac * n * (b + g) + 2 * n * in.cb + in.fold;
      case detail::collective::barrier:
        return in.dissemination_barrier();
      default:
        return std::nullopt;
    }
  }
  /// all_reduce on a crowded host: 2 lg p messages from every rank, halving in size.
  [[nodiscard]] static double crowded_all_reduce(const detail::cost_inputs& in) noexcept {
    const double n = in.n, p = in.p, lg = in.lg;
    double halves = 0;  // one rank's β-time, reduce-scatter and all-gather
    for (double part = n / 2, i = 0; i < lg; part /= 2, ++i) halves += 2 * in.msg(part);
    return in.crowded_host(lg * (in.a + in.a1) + halves + (p - 1) / p * n * in.g + in.fold,
                           2 * lg * p, halves * p, (p - 1) * n);
  }

  template <class Ctx>
  static void all_reduce(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    const std::size_t bytes = count * c.elem();
    c.copy(out, in, bytes);
    const detail::fold f(c.size(), c.rank());
    detail::fold_in(c, out, bytes, f);
    if (f.newrank >= 0) {
      const auto goff = detail::even_offsets(c, count, f.pof2);
      // The all-gather's receives are posted as the reduce-scatter goes, where the context
      // says it pays (context::post_ahead: not on a device transport, nor for a message of
      // several parts over Gloo's TCP).
      std::vector<std::optional<typename Ctx::request>> gathers;
      const auto steps = detail::halving_reduce_scatter(
          c, out, goff, f, detail::halving_order::nearest_first, &gathers);
      detail::mirror_all_gather(c, out, goff, steps, gathers);
    }
    detail::fold_out(c, out, bytes, f);
  }

  /// Groups of new rank g are the blocks of the old ranks it stands for (2g and 2g + 1 when
  /// folded), so the halving leaves each old rank's block on it or on its fold partner.
  template <class Ctx>
  static void reduce_scatter(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    const int p = c.size(), r = c.rank();
    const std::size_t b = count * c.elem();
    const std::size_t total = b * static_cast<std::size_t>(p);
    std::byte* buf = c.scratch(total);
    c.copy(buf, in, total);
    const detail::fold f(p, r);
    detail::fold_in(c, buf, total, f);
    if (f.newrank >= 0) {
      std::vector<std::size_t> goff(static_cast<std::size_t>(f.pof2) + 1);
      for (int g = 0; g <= f.pof2; ++g) {
        const int first_old = g < f.rem ? 2 * g : g + f.rem;
        goff[static_cast<std::size_t>(g)] = static_cast<std::size_t>(first_old) * b;
      }
      (void)detail::halving_reduce_scatter(c, buf, goff, f, detail::halving_order::farthest_first);
    }
    if (r < 2 * f.rem) {  // the odd rank holds both blocks of its pair
      if (r % 2 == 1)
        c.send(r - 1, buf + static_cast<std::size_t>(r - 1) * b, b);
      else
        c.recv(r + 1, buf + static_cast<std::size_t>(r) * b, b);
    }
    c.copy(out, buf + static_cast<std::size_t>(r) * b, b);
  }

  /// Recursive doubling (Bruck when p is not a power of two), as recursive_doubling's.
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

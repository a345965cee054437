#pragma once
/// \file
/// tutti::ring: bandwidth-optimal ring schedules. all_reduce = ring reduce-scatter + ring
/// all-gather (2(p-1) steps, 2(p-1)/p of the data each way); broadcast is a pipelined chain.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "tutti/detail/call.hpp"
#include "tutti/detail/cost.hpp"
#include "tutti/detail/schedules.hpp"

namespace tutti::inline v0 {

struct ring {
  static constexpr const char* name = "ring";
  /// Chain broadcast segment: small enough to pipeline, large enough to amortise α.
  static constexpr std::size_t broadcast_segment = std::size_t{256} << 10;
  /// Across hosts whose ranks are numbered host by host, the ring crosses each host boundary
  /// once each way: its steps do not split a host's link (automatic.hpp, predicted_cost).
  static constexpr bool one_flow_per_link = true;

  /// Predicted microseconds of collective `k` (nullopt: not implemented here).
  [[nodiscard]] static std::optional<double> cost(detail::collective k,
                                                  const detail::cost_inputs& in) noexcept {
    const double n = in.n, p = in.p, a = in.a, b = in.b, g = in.g;
    switch (k) {
      case detail::collective::all_reduce:
        return 2 * (p - 1) * a + 2 * in.frac * n * b + in.frac * n * g;
      case detail::collective::broadcast: {
        const double segs = std::max(1.0, std::ceil(n / double(broadcast_segment)));
        return (p - 2 + segs) * (a + n / segs * b);
      }
      case detail::collective::all_gather:
      case detail::collective::all_gatherv:
        return (p - 1) * a + in.frac * n * b;
      case detail::collective::reduce_scatter:
        return (p - 1) * a + in.frac * n * (b + g) + 2 * n * in.cb;
      case detail::collective::barrier:
        return in.dissemination_barrier();
      default:
        return std::nullopt;
    }
  }
  /// all_reduce on a crowded host: 2(p - 1) messages of n/p from every rank.
  [[nodiscard]] static double crowded_all_reduce(const detail::cost_inputs& in) noexcept {
    const double n = in.n, p = in.p;
    const double messages = 2 * (p - 1) * p;
    return in.crowded_host(2 * (p - 1) * (in.a + in.msg(n / p)) + (p - 1) / p * n * in.g, messages,
                           messages * in.msg(n / p), (p - 1) * n);
  }

  template <class Ctx>
  static void all_reduce(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    c.copy(out, in, count * c.elem());
    const auto off = detail::even_offsets(c, count, c.size());
    detail::ring_all_reduce(c, out, off);
  }

  template <class Ctx>
  static void reduce_scatter(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    const std::size_t bytes = count * c.elem();
    const auto total = bytes * static_cast<std::size_t>(c.size());
    std::byte* tmp = c.scratch(total);
    c.copy(tmp, in, total);
    detail::ring_reduce_scatter(c, tmp, detail::equal_offsets(bytes, c.size()));
    c.copy(out, tmp + static_cast<std::size_t>(c.rank()) * bytes, bytes);
  }

  template <class Ctx>
  static void all_gather(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    const std::size_t bytes = count * c.elem();
    c.copy(out + static_cast<std::size_t>(c.rank()) * bytes, in, bytes);
    detail::ring_all_gatherv(c, out, detail::equal_offsets(bytes, c.size()));
  }

  template <class Ctx>
  static void all_gatherv(Ctx& c, const std::byte* in, std::byte* out,
                          std::span<const std::size_t> counts) {
    const auto off = detail::count_offsets(c, counts);
    const auto me = static_cast<std::size_t>(c.rank());
    c.copy(out + off[me], in, off[me + 1] - off[me]);
    detail::ring_all_gatherv(c, out, off);
  }

  /// Pipelined chain root -> root+1 -> ...: segment k moves on while k+1 arrives.
  template <class Ctx>
  static void broadcast(Ctx& c, std::byte* buf, std::size_t count, int root) {
    const int p = c.size();
    if (p == 1) return;
    const int v = detail::mod(c.rank() - root, p);
    const int next = detail::mod(c.rank() + 1, p), prev = detail::mod(c.rank() - 1, p);
    const std::size_t bytes = count * c.elem();
    const std::size_t seg =
        std::max<std::size_t>(c.elem(), broadcast_segment / c.elem() * c.elem());
    std::vector<typename Ctx::request> sends;
    std::size_t at = 0;
    do {
      const std::size_t n = std::min(seg, bytes - at);
      if (v != 0) c.recv(prev, buf + at, n);
      if (v != p - 1) sends.push_back(c.isend(next, buf + at, n));
      at += n;
    } while (at < bytes);
    for (auto& s : sends) c.wait(s);
  }

  template <class Ctx>
  static void barrier(Ctx& c) {
    detail::dissemination_barrier(c);
  }
};

}  // namespace tutti::inline v0

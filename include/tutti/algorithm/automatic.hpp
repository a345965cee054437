#pragma once
/// \file
/// tutti::automatic (the default): picks a policy per collective, message size and world size
/// from the α-β-γ costs (Thakur, Rabenseifner & Gropp 2005) with the transport's α, β, γ.
/// TUTTI_ALGO (or options::algo) overrides the choice per collective and size range; its
/// syntax is in detail/algo_table.hpp and the README.

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <limits>
#include <optional>
#include <span>

#include "tutti/algorithm/bruck.hpp"
#include "tutti/algorithm/direct.hpp"
#include "tutti/algorithm/native.hpp"
#include "tutti/algorithm/recursive_doubling.hpp"
#include "tutti/algorithm/recursive_halving.hpp"
#include "tutti/algorithm/ring.hpp"
#include "tutti/algorithm/tree.hpp"
#include "tutti/core/error.hpp"
#include "tutti/detail/algo_table.hpp"
#include "tutti/detail/cost.hpp"
#include "tutti/detail/policy_traits.hpp"

namespace tutti::inline v0 {

namespace detail {

template <class T>
[[nodiscard]] constexpr cost_model costs_of() noexcept {
  if constexpr (requires { T::costs; })
    return T::costs;
  else
    return cost_model{};
}

/// The costs of transport `t`'s world: `t.world_costs()` where the transport knows more at run
/// time (tutti::gloo: single copies, ranks per CPU; the same on every rank, so every rank
/// chooses alike), else its type's.
template <class T>
[[nodiscard]] cost_model costs_of(const T& t) noexcept {
  if constexpr (requires {
                  { t.world_costs() } -> std::same_as<cost_model>;
                })
    return t.world_costs();
  else
    return costs_of<T>();
}

/// all_reduce on a host whose ranks outnumber its CPUs (m.ranks_per_cpu > 1): ranks queue for
/// CPUs, so a call takes at least the work of all its ranks spread over the CPUs — every
/// message's α (stretched by the ranks per CPU: a rank woken by a message waits for a CPU),
/// bytes and reduction — as well as the slowest rank's path. Counts the world's ranks as if
/// they all shared the most crowded host. On 4 ranks sharing 2 CPUs this picks tree up to
/// 256 KiB, then recursive halving, where the path alone picks recursive doubling to 16 KiB
/// (bench/RESULTS.md). Nothing for other policies.
[[nodiscard]] inline std::optional<double> crowded_all_reduce(policy_id pol, double n, int ranks,
                                                              const cost_model& m) noexcept {
  const double p = ranks, a = m.alpha_us, g = m.gamma_us_per_byte, r = m.ranks_per_cpu;
  const auto msg = [&](double bytes) { return bytes * m.beta_us_per_byte; };  // β-time of one
  const double lg = std::ceil(std::log2(p));
  const bool pow2 = (ranks & (ranks - 1)) == 0;
  const double fold = pow2 ? 0.0 : 2 * (a + msg(n)) + n * g;
  double slowest = 0, messages = 0, bytes = 0, reduced = 0;  // bytes: β-time, all ranks
  switch (pol) {
    case policy_id::ring:
      slowest = 2 * (p - 1) * (a + msg(n / p)) + (p - 1) / p * n * g;
      messages = 2 * (p - 1) * p;
      bytes = messages * msg(n / p);
      reduced = (p - 1) * n;
      break;
    case policy_id::recursive_halving: {
      double halves = 0;  // one rank's β-time, reduce-scatter and all-gather
      for (double part = n / 2, i = 0; i < lg; part /= 2, ++i) halves += 2 * msg(part);
      slowest = 2 * lg * a + halves + (p - 1) / p * n * g + fold;
      messages = 2 * lg * p;
      bytes = halves * p;
      reduced = (p - 1) * n;
      break;
    }
    case policy_id::recursive_doubling:
      slowest = lg * (a + msg(n) + n * g) + fold;
      messages = lg * p;
      bytes = messages * msg(n);
      reduced = lg * p * n;
      break;
    case policy_id::tree:
      slowest = 2 * lg * (a + msg(n)) + lg * n * g;
      messages = 2 * (p - 1);
      bytes = messages * msg(n);
      reduced = (p - 1) * n;
      break;
    default:
      return std::nullopt;
  }
  const double host = (messages * a * r + bytes + reduced * g) * r / p;
  return std::max(slowest, host);
}

/// Predicted microseconds of policy `p` for collective `k` moving `n` bytes over `ranks`.
/// `n` is the per-rank vector for all_reduce, reduce, broadcast; the total gathered or
/// scattered vector for the gathers, scatters, reduce_scatter and all_to_all.
/// `segment`: the transport has a shared segment, so direct's gather, scatter and all_to_all
/// copy through it instead of sending point to point.
[[nodiscard]] inline double predicted_cost(collective k, policy_id pol, double n, int ranks,
                                           const cost_model& m, bool segment = false) noexcept {
  const double p = ranks, a = m.alpha_us, b = m.beta_us_per_byte, g = m.gamma_us_per_byte;
  const double bs = m.segment_beta_us_per_byte > 0 ? m.segment_beta_us_per_byte : b;
  const double lg = std::ceil(std::log2(p));
  const bool pow2 = (ranks & (ranks - 1)) == 0;
  const double fold = pow2 ? 0.0 : 2 * (a + n * b) + n * g;  // non-power-of-two extra steps
  const double frac = (p - 1) / p;
  // direct: one segment barrier (about α: each rank arrives once and waits once) per round of
  // half a slot, two when the round is large enough to split the reduction into slices.
  const double rounds = std::max(1.0, std::ceil(n / double(512 << 10)));
  const bool small = n <= double(direct::small_round);
  constexpr double never = std::numeric_limits<double>::infinity();
  switch (k) {
    case collective::all_reduce:
      if (m.ranks_per_cpu > 1 && ranks > 1) {  // crowded; other policies: their path, stretched
        if (const auto cost = crowded_all_reduce(pol, n, ranks, m)) return *cost;
        cost_model uncrowded = m;
        uncrowded.ranks_per_cpu = 0;
        return m.ranks_per_cpu * predicted_cost(k, pol, n, ranks, uncrowded, segment);
      }
      switch (pol) {
        case policy_id::ring:
          return 2 * (p - 1) * a + 2 * frac * n * b + frac * n * g;
        case policy_id::recursive_halving:
          return 2 * lg * a + 2 * frac * n * b + frac * n * g + fold;
        case policy_id::recursive_doubling:
          return lg * (a + n * b + n * g) + fold;
        case policy_id::tree:
          return 2 * lg * a + 2 * lg * n * b + lg * n * g;
        case policy_id::direct:
          return rounds * (small ? 1 : 2) * a + 2 * n * bs + (small ? p - 1 : frac) * n * g;
        default:
          return never;
      }
    case collective::reduce:
      if (pol == policy_id::tree) return lg * (a + n * b + n * g);
      if (pol == policy_id::direct)
        return rounds * (small ? 1 : 2) * a + 2 * n * bs + (small ? p - 1 : frac) * n * g;
      return never;
    case collective::broadcast:
      if (pol == policy_id::tree) return lg * (a + n * b);
      if (pol == policy_id::ring) {
        const double segs = std::max(1.0, std::ceil(n / double(ring::broadcast_segment)));
        return (p - 2 + segs) * (a + n / segs * b);
      }
      if (pol == policy_id::direct) return rounds * a + 2 * n * bs;
      return never;
    case collective::all_gather:
      if (pol == policy_id::ring) return (p - 1) * a + frac * n * b;
      if (pol == policy_id::recursive_doubling) return lg * a + frac * n * b + (pow2 ? 0.0 : n * b);
      if (pol == policy_id::bruck) return lg * a + frac * n * b + n * b;
      if (pol == policy_id::direct) return rounds * a + n * bs;
      return never;
    case collective::gather:
    case collective::scatter:
      if (pol == policy_id::tree) return lg * a + frac * n * b + n * b;
      if (pol == policy_id::direct)
        return segment ? rounds * a + n * bs : (p - 1) * a / 2 + frac * n * b;
      return never;
    case collective::reduce_scatter:
      if (pol == policy_id::ring) return (p - 1) * a + frac * n * (b + g) + 2 * n * b;
      if (pol == policy_id::recursive_halving)
        return lg * a + frac * n * (b + g) + 2 * n * b + fold;
      if (pol == policy_id::direct) return rounds * a + n * bs + n * g;
      return never;
    case collective::all_to_all:
      if (pol == policy_id::direct)
        return segment ? std::max(1.0, std::ceil(n / double(512 << 10) * p)) * a + 2 * n * bs
                       : (p - 1) * a + n * b;
      if (pol == policy_id::bruck) return lg * a + n / 2 * lg * b + 2 * n * b;
      return never;
    case collective::all_gatherv:
      if (pol == policy_id::ring) return (p - 1) * a + frac * n * b;
      if (pol == policy_id::direct) return (p - 1) * a + frac * n * b * 1.1;
      return never;
    case collective::barrier:
      if (pol == policy_id::direct) return a;  // a shared-segment barrier, where there is one
      return lg * a;
    default:
      return pol == policy_id::direct ? 0.0 : never;
  }
}

/// Calls `f.template operator()<Policy>()` for the policy `id` names; false if it cannot run.
template <class F>
bool with_policy(policy_id id, F&& f) {
  switch (id) {
    case policy_id::ring:
      return f.template operator()<ring>();
    case policy_id::tree:
      return f.template operator()<tree>();
    case policy_id::recursive_halving:
      return f.template operator()<recursive_halving>();
    case policy_id::recursive_doubling:
      return f.template operator()<recursive_doubling>();
    case policy_id::direct:
      return f.template operator()<direct>();
    case policy_id::bruck:
      return f.template operator()<bruck>();
    default:
      return false;
  }
}

}  // namespace detail

// nvcc's front end warns (#445) that the policy lambdas' template parameter P appears in no
// parameter type: they are called as f.template operator()<P>() on purpose.
#ifdef __NVCC__
#pragma nv_diagnostic push
#pragma nv_diag_suppress 445
#endif

namespace detail {
/// `P`, as a type that depends on `T`: a name looked up in it waits for instantiation.
template <class P, class T>
struct dependent {
  using type = P;
};
}  // namespace detail

struct automatic {
  static constexpr const char* name = "automatic";

  /// The policy automatic uses for collective `k` on `ranks` ranks moving `bytes`, given the
  /// transport's costs and `overrides`; `runs(id)` says whether a policy implements `k` here.
  template <class Runs>
  [[nodiscard]] static detail::policy_id choose(detail::collective k, std::size_t bytes, int ranks,
                                                const cost_model& m,
                                                const detail::algo_table& overrides, Runs&& runs,
                                                bool segment = false) {
    for (const auto& rule : overrides.rules())
      if ((rule.coll == detail::collective::none || rule.coll == k) && bytes >= rule.lo &&
          bytes < rule.hi && runs(rule.policy))
        return rule.policy;
    auto best = detail::policy_id::count_;
    double best_cost = std::numeric_limits<double>::infinity();
    for (int i = 0; i < static_cast<int>(detail::policy_id::count_); ++i) {
      const auto id = static_cast<detail::policy_id>(i);
      if (!runs(id)) continue;
      const double cost =
          detail::predicted_cost(k, id, static_cast<double>(bytes), ranks, m, segment);
      if (best == detail::policy_id::count_ || cost < best_cost) {
        best = id;
        best_cost = cost;
      }
    }
    return best;
  }

  /// `pick(bytes)`, remembered per thread for the last (bytes, ranks, costs) of this
  /// collective on this transport when no overrides apply: a loop of equal calls decides once
  /// (without overrides the choice is a pure function of those three).
  template <class T, detail::collective K, class Ctx, class Pick>
  static detail::policy_id memo(const Ctx& c, std::size_t bytes, const cost_model& costs,
                                Pick&& pick) {
    if (!c.overrides().empty()) return pick(bytes);
    struct last_choice {
      std::size_t bytes = 0;
      int ranks = 0;
      cost_model costs;
      detail::policy_id id = detail::policy_id::count_;
    };
    thread_local last_choice last;
    if (last.id == detail::policy_id::count_ || last.bytes != bytes || last.ranks != c.size() ||
        last.costs != costs)
      last = {bytes, c.size(), costs, pick(bytes)};
    return last.id;
  }

  /// No policy can run this collective on this transport: say so instead of doing nothing.
  template <class Ctx>
  [[noreturn]] static void no_policy(const Ctx& c) {
    throw error(errc::transport_failure, c.info().name_str(), c.info().seq, c.rank(), -1,
                "no algorithm policy implements this collective on this transport");
  }

#define TUTTI_AUTOMATIC_DISPATCH(coll, bytes, ...)                                        \
  using T = typename Ctx::transport_type;                                                 \
  if constexpr (device_transport<T> && detail::has_##coll<native, T>) {                   \
    detail::dependent<native, T>::type::coll(c __VA_OPT__(, ) __VA_ARGS__);               \
    return;                                                                               \
  }                                                                                       \
  auto runs = [](detail::policy_id id) {                                                  \
    return detail::with_policy(id, []<class P>() { return detail::has_##coll<P, T>; });   \
  };                                                                                      \
  const cost_model costs = detail::costs_of(c.transport());                               \
  const auto id = memo<T, detail::collective::coll>(c, bytes, costs, [&](std::size_t b) { \
    return choose(detail::collective::coll, b, c.size(), costs, c.overrides(), runs,      \
                  shared_segment<T>);                                                     \
  });                                                                                     \
  const bool ran = detail::with_policy(id, [&]<class P>() {                               \
    if constexpr (detail::has_##coll<P, T>) {                                             \
      P::coll(c __VA_OPT__(, ) __VA_ARGS__);                                              \
      return true;                                                                        \
    } else {                                                                              \
      return false;                                                                       \
    }                                                                                     \
  });                                                                                     \
  if (!ran) no_policy(c)

  template <class Ctx>
  static void all_reduce(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    TUTTI_AUTOMATIC_DISPATCH(all_reduce, count * c.elem(), in, out, count);
  }
  template <class Ctx>
  static void reduce(Ctx& c, const std::byte* in, std::byte* out, std::size_t count, int root) {
    TUTTI_AUTOMATIC_DISPATCH(reduce, count * c.elem(), in, out, count, root);
  }
  template <class Ctx>
  static void broadcast(Ctx& c, std::byte* buf, std::size_t count, int root) {
    TUTTI_AUTOMATIC_DISPATCH(broadcast, count * c.elem(), buf, count, root);
  }
  template <class Ctx>
  static void all_gather(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    TUTTI_AUTOMATIC_DISPATCH(all_gather, count * c.elem() * static_cast<std::size_t>(c.size()), in,
                             out, count);
  }
  template <class Ctx>
  static void gather(Ctx& c, const std::byte* in, std::byte* out, std::size_t count, int root) {
    TUTTI_AUTOMATIC_DISPATCH(gather, count * c.elem() * static_cast<std::size_t>(c.size()), in, out,
                             count, root);
  }
  template <class Ctx>
  static void scatter(Ctx& c, const std::byte* in, std::byte* out, std::size_t count, int root) {
    TUTTI_AUTOMATIC_DISPATCH(scatter, count * c.elem() * static_cast<std::size_t>(c.size()), in,
                             out, count, root);
  }
  template <class Ctx>
  static void reduce_scatter(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    TUTTI_AUTOMATIC_DISPATCH(reduce_scatter, count * c.elem() * static_cast<std::size_t>(c.size()),
                             in, out, count);
  }
  template <class Ctx>
  static void all_to_all(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    TUTTI_AUTOMATIC_DISPATCH(all_to_all, count * c.elem() * static_cast<std::size_t>(c.size()), in,
                             out, count);
  }
  template <class Ctx>
  static void all_gatherv(Ctx& c, const std::byte* in, std::byte* out,
                          std::span<const std::size_t> counts) {
    std::size_t total = 0;
    for (auto n : counts) total += n;
    TUTTI_AUTOMATIC_DISPATCH(all_gatherv, total * c.elem(), in, out, counts);
  }
  template <class Ctx>
  static void gatherv(Ctx& c, const std::byte* in, std::byte* out,
                      std::span<const std::size_t> counts, int root) {
    direct::gatherv(c, in, out, counts, root);
  }
  template <class Ctx>
  static void scatterv(Ctx& c, const std::byte* in, std::byte* out,
                       std::span<const std::size_t> counts, int root) {
    direct::scatterv(c, in, out, counts, root);
  }
  template <class Ctx>
  static void all_to_allv(Ctx& c, const std::byte* in, std::span<const std::size_t> sc,
                          std::byte* out, std::span<const std::size_t> rc) {
    if constexpr (detail::has_all_to_allv<native, typename Ctx::transport_type>)
      native::all_to_allv(c, in, sc, out, rc);
    else
      direct::all_to_allv(c, in, sc, out, rc);
  }
  template <class Ctx>
  static void barrier(Ctx& c) {
    TUTTI_AUTOMATIC_DISPATCH(barrier, 0);
  }

#undef TUTTI_AUTOMATIC_DISPATCH
};

#ifdef __NVCC__
#pragma nv_diagnostic pop
#endif

}  // namespace tutti::inline v0

#pragma once
/// \file
/// tutti::automatic (the default): picks a policy per collective, message size and world size
/// from the α-β-γ costs (Thakur, Rabenseifner & Gropp 2005) with the transport's α, β, γ.
/// TUTTI_ALGO (or options::algo) overrides the choice per collective and size range; its
/// syntax is in detail/algo_table.hpp and the README.

#include <concepts>
#include <cstddef>
#include <limits>
#include <span>

#include "tutti/algorithm/bruck.hpp"
#include "tutti/algorithm/direct.hpp"
#include "tutti/algorithm/hierarchical.hpp"
#include "tutti/algorithm/native.hpp"
#include "tutti/algorithm/recursive_doubling.hpp"
#include "tutti/algorithm/recursive_halving.hpp"
#include "tutti/algorithm/ring.hpp"
#include "tutti/algorithm/tree.hpp"
#include "tutti/core/error.hpp"
#include "tutti/detail/algo_table.hpp"
#include "tutti/detail/cost.hpp"
#include "tutti/detail/policy_traits.hpp"
#include "tutti/transport/concepts.hpp"

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

/// Bytes of one rank's slot in transport `t`'s shared segment, where it has one.
template <class T>
[[nodiscard]] std::size_t slot_bytes_of(T& t) noexcept {
  if constexpr (shared_segment<T>)
    return t.segment_bytes();
  else
    return default_slot_bytes;
}

/// What the policies' cost formulas read for a call of `bytes` over transport `t`.
template <class T>
[[nodiscard]] cost_inputs cost_inputs_of(T& t, std::size_t bytes, int ranks) noexcept {
  return {static_cast<double>(bytes), ranks, costs_of(t), shared_segment<T>, slot_bytes_of(t)};
}

/// Predicted microseconds of policy `P` for collective `k`: the policy's own `cost`; for
/// all_reduce on a crowded host its `crowded_all_reduce`, or, for a policy without one, its
/// path stretched by the ranks per CPU. Infinite where P predicts nothing.
/// On a world across hosts (cost_inputs::across_hosts), a flat policy sees the slower of the
/// two levels, and a host's link split among its ranks unless its schedule crosses each host
/// boundary once each way (`one_flow_per_link`: ring, with ranks numbered host by host), and,
/// on a crowded machine, its all_reduce stretched as cost_inputs::crowded_across_hosts says; a
/// policy that prices the levels itself (`prices_levels`: hierarchical, and the nearest-first
/// recursive schedules) sees them as they are.
template <class P>
[[nodiscard]] double predicted_cost(collective k, const cost_inputs& in) noexcept {
  if (in.across_hosts()) {
    // On a crowded machine (simulated hosts) what waits for a CPU is stretched, a host link's
    // bytes and α not, flat or levels-priced alike (cost_inputs::crowded_across_hosts; a flat
    // policy's crowded_all_reduce would count every rank's bytes over its own link as work for
    // one host's CPUs, and overprice ring on 4 x 1: bench/RESULTS.md, "Crowded simulated
    // hosts"). A flat policy
    // then sees the slower level of that. A ring that crosses each host boundary once each way
    // has one rank of a host in a step cross it, whose exchange alone waits on loop threads.
    constexpr bool one_flow = requires { P::one_flow_per_link; };
    const cost_inputs levels =
        k == collective::all_reduce && in.crowded()
            ? in.crowded_across_hosts(one_flow ? 1.0 / in.m.ranks_per_host : 1.0)
            : in;
    const cost_inputs seen = [&] {
      if constexpr (requires { P::prices_levels; })
        return levels;
      else
        return levels.flat_across_hosts(!one_flow);
    }();
    return P::cost(k, seen).value_or(std::numeric_limits<double>::infinity());
  }
  if (k == collective::all_reduce && in.crowded()) {
    if constexpr (requires { P::crowded_all_reduce(in); })
      return P::crowded_all_reduce(in);
    else
      return in.m.ranks_per_cpu * predicted_cost<P>(k, in.uncrowded());
  }
  return P::cost(k, in).value_or(std::numeric_limits<double>::infinity());
}

}  // namespace detail

// nvcc's front end warns (#445) that the policy lambdas' template parameter P appears in no
// parameter type: they are called as f.template operator()<P>() on purpose.
#ifdef __NVCC__
#pragma nv_diagnostic push
#pragma nv_diag_suppress 445
#endif

/// Picks, per call, the cheapest of the policies in `Candidates` (a detail::policy_list) by
/// their own `cost`, unless TUTTI_ALGO names one. tutti::automatic is the built-in list; a
/// chooser over a list of your own is `basic_automatic<detail::policy_list<ring, yours>>`
/// (docs/extending.md).
template <class Candidates>
struct basic_automatic {
  static constexpr const char* name = "automatic";

  /// The policies selected among, in order (the first wins a tie), by the name TUTTI_ALGO
  /// gives them. Each needs a static `name` and a static `cost` (and may have a
  /// `crowded_all_reduce`).
  using candidates = Candidates;
  /// "No policy": an index past the list.
  static constexpr std::size_t none = candidates::size;

  /// The index in `candidates` of the policy automatic uses for collective `k` on `in` (its
  /// `n` is the call's byte count), given `overrides` (parsed against candidates::names);
  /// `runs.template operator()<P>()` says whether policy P implements `k` here.
  template <class Runs>
  [[nodiscard]] static std::size_t choose(detail::collective k, const detail::cost_inputs& in,
                                          const detail::algo_table& overrides, Runs&& runs) {
    const auto bytes = static_cast<std::size_t>(in.n);
    const auto can_run = [&](std::size_t i) {
      return candidates::visit(
          i, [&]<class P>() { return runs.template operator()<P>(); }, false);
    };
    for (const auto& rule : overrides.rules())
      if ((rule.coll == detail::collective::none || rule.coll == k) && bytes >= rule.lo &&
          bytes < rule.hi && can_run(rule.policy))
        return rule.policy;
    std::size_t best = none, i = 0;
    double best_cost = std::numeric_limits<double>::infinity();
    candidates::for_each([&]<class P>() {
      if (runs.template operator()<P>()) {
        const double cost = detail::predicted_cost<P>(k, in);
        if (best == none || cost < best_cost) {
          best = i;
          best_cost = cost;
        }
      }
      ++i;
    });
    return best;
  }

  /// `pick(bytes)`, remembered per thread for the last (bytes, ranks, costs, slot size) of
  /// this collective on this transport when no overrides apply: a loop of equal calls decides
  /// once (without overrides the choice is a pure function of those four).
  template <class T, detail::collective K, class Ctx, class Pick>
  static std::size_t memo(Ctx& c, std::size_t bytes, Pick&& pick) {
    if (!c.overrides().empty()) return pick(bytes);
    struct last_choice {
      std::size_t bytes = 0;
      int ranks = 0;
      cost_model costs;
      std::size_t slot = 0;
      std::size_t index = none;
    };
    thread_local last_choice last;
    const cost_model costs = detail::costs_of(c.transport());
    const std::size_t slot = detail::slot_bytes_of(c.transport());
    if (last.index == none || last.bytes != bytes || last.ranks != c.size() ||
        last.costs != costs || last.slot != slot)
      last = {bytes, c.size(), costs, slot, pick(bytes)};
    return last.index;
  }

  /// No policy can run this collective on this transport: say so instead of doing nothing.
  template <class Ctx>
  [[noreturn]] static void no_policy(const Ctx& c) {
    throw error(errc::transport_failure, c.info().name_str(), c.info().seq, c.rank(), -1,
                "no algorithm policy implements this collective on this transport");
  }

#define TUTTI_AUTOMATIC_DISPATCH(coll, bytes, ...)                                              \
  using T = typename Ctx::transport_type;                                                       \
  if constexpr (device_transport<T> && detail::has_##coll<native, T>) {                         \
    detail::dependent<native, T>::type::coll(c __VA_OPT__(, ) __VA_ARGS__);                     \
    return;                                                                                     \
  }                                                                                             \
  auto runs = []<class P>() { return detail::has_##coll<P, T>; };                               \
  const auto id = memo<T, detail::collective::coll>(c, bytes, [&](std::size_t b) {              \
    return choose(detail::collective::coll, detail::cost_inputs_of(c.transport(), b, c.size()), \
                  c.overrides(), runs);                                                         \
  });                                                                                           \
  const bool ran = candidates::visit(                                                           \
      id,                                                                                       \
      [&]<class P>() {                                                                          \
        if constexpr (detail::has_##coll<P, T>) {                                               \
          P::coll(c __VA_OPT__(, ) __VA_ARGS__);                                                \
          return true;                                                                          \
        } else {                                                                                \
          return false;                                                                         \
        }                                                                                       \
      },                                                                                        \
      false);                                                                                   \
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

/// The default policy: chooses among every built-in policy. A new built-in policy is added
/// to this list (and nowhere else; a flat one also to detail::flat_policies).
using automatic =
    basic_automatic<detail::policy_list<ring, tree, recursive_halving, recursive_doubling, direct,
                                        bruck, hierarchical>>;

#ifdef __NVCC__
#pragma nv_diagnostic pop
#endif

}  // namespace tutti::inline v0

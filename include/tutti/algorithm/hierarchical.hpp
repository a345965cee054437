#pragma once
/// \file
/// tutti::hierarchical: schedules that keep the heavy traffic inside each host, on a world in
/// two levels (tutti::layered: shared memory inside a host, TCP between hosts). all_reduce is a
/// ring reduce-scatter inside each host, an all-reduce of each rank's block across hosts among
/// the ranks with its local rank (the flat policy automatic picks there), and a ring all-gather
/// inside each host: each host link carries 2(H-1)/H of the vector, against 2(p-1)/p through
/// the busiest link of a flat ring. broadcast and reduce go through the root's local rank on
/// every host (across hosts, then inside each; inside, then across). all_gather gathers each
/// rank's block across hosts among the ranks with its local rank, then inside each host what
/// each local rank gathered; reduce_scatter is the mirror (inside, then across): a host link
/// carries each of the other hosts' blocks once, (H-1)/H of the gathered vector, against
/// (p-1)/p through a flat ring's. The other collectives, and every collective on a world whose
/// hosts hold different numbers of ranks, run flat.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tutti/algorithm/bruck.hpp"
#include "tutti/algorithm/direct.hpp"
#include "tutti/algorithm/recursive_doubling.hpp"
#include "tutti/algorithm/recursive_halving.hpp"
#include "tutti/algorithm/ring.hpp"
#include "tutti/algorithm/tree.hpp"
#include "tutti/core/error.hpp"
#include "tutti/detail/algo_table.hpp"
#include "tutti/detail/call.hpp"
#include "tutti/detail/context.hpp"
#include "tutti/detail/cost.hpp"
#include "tutti/detail/host.hpp"
#include "tutti/detail/policy_traits.hpp"
#include "tutti/detail/schedules.hpp"
#include "tutti/transport/layered.hpp"

namespace tutti::inline v0 {

template <class Candidates>
struct basic_automatic;  // algorithm/automatic.hpp

namespace detail {
/// The flat chooser each level runs (and a world without two levels): every built-in flat
/// policy. Complete where it is used: hierarchical's bodies are instantiated after
/// automatic.hpp defined basic_automatic.
using flat_policies = policy_list<ring, tree, recursive_halving, recursive_doubling, direct, bruck>;

inline const algo_table& no_level_rules() noexcept {
  static const algo_table none;
  return none;
}

/// How a level's rank numbers (index) read as the world's (`members`), for its messages:
/// "its ranks 0, 1 are ranks 2, 3" up to 8 members, "its rank k is rank 4k + 1" for more in
/// steps (ranks numbered host by host), else the first 8 and "...".
[[nodiscard]] inline std::string level_ranks(const std::vector<int>& members) {
  const auto list = [&](std::size_t n) {
    std::string level, world;
    for (std::size_t k = 0; k < n; ++k) {
      level += (k ? ", " : "") + std::to_string(k);
      world += (k ? ", " : "") + std::to_string(members[k]);
    }
    return std::pair{level, world};
  };
  if (members.size() == 1) return "its rank 0 is rank " + std::to_string(members[0]);
  if (members.size() <= 8) {
    const auto [level, world] = list(members.size());
    return "its ranks " + level + " are ranks " + world;
  }
  const long long step = members[1] - members[0];
  bool even = step > 0;
  for (std::size_t k = 2; k < members.size() && even; ++k)
    even = members[k] - members[k - 1] == step;
  if (even) {
    std::string rule = step == 1 ? "k" : std::to_string(step) + "k";
    if (members[0] != 0) rule += " + " + std::to_string(members[0]);
    return "its rank k is rank " + rule;
  }
  const auto [level, world] = list(8);
  return "its ranks " + level + ", ... are ranks " + world + ", ...";
}

/// Each host's first rank, where every host's ranks are consecutive (launchers number them host
/// by host), so that a host's blocks of a rank-ordered vector lie together; else empty.
[[nodiscard]] inline std::vector<std::size_t> host_firsts(const host_map& h) {
  std::vector<std::size_t> first(static_cast<std::size_t>(h.hosts), h.host_of.size());
  for (std::size_t r = 0; r < h.host_of.size(); ++r) {
    auto& f = first[static_cast<std::size_t>(h.host_of[r])];
    if (f == h.host_of.size()) f = r;
    if (r != f + static_cast<std::size_t>(h.local_of[r])) return {};
  }
  return first;
}

/// Where each rank's block sits when blocks are ordered local rank first, then host (local rank
/// k's blocks of hosts 0 .. H-1 together: what an all-gather inside a host of blocks gathered
/// across hosts leaves), by rank; empty where that is rank order already.
[[nodiscard]] inline std::vector<std::size_t> level_major(const host_map& h) {
  const std::size_t p = h.host_of.size(), hosts = static_cast<std::size_t>(h.hosts);
  std::vector<std::size_t> slot(p);
  bool same = true;
  for (std::size_t r = 0; r < p; ++r) {
    slot[r] =
        static_cast<std::size_t>(h.local_of[r]) * hosts + static_cast<std::size_t>(h.host_of[r]);
    same = same && slot[r] == r;
  }
  if (same) slot.clear();
  return slot;
}

/// Where hierarchical's all_gather and reduce_scatter of `count` elements per rank keep their
/// blocks on a two-level world: `mine`, one block per host (this local rank's), then, where
/// ranks are neither numbered host by host (`first`) nor in local rank-major order already,
/// `staged`: every block in that order (`slot`).
struct block_plan {
  std::size_t hosts, bytes;
  std::vector<std::size_t> first, slot;
  std::byte* mine;
  std::byte* staged;
};
template <class Ctx>
[[nodiscard]] block_plan plan_blocks(Ctx& c, std::size_t count) {
  const host_map& h = c.transport().hosts();
  block_plan b{
      static_cast<std::size_t>(h.hosts), count * c.elem(), host_firsts(h), {}, nullptr, nullptr};
  if (b.first.empty()) b.slot = level_major(h);
  const std::size_t staged = b.slot.empty() ? 0 : b.bytes * h.host_of.size();
  b.mine = c.scratch(b.hosts * b.bytes + staged);
  b.staged = b.mine + b.hosts * b.bytes;
  return b;
}

/// Runs `f(level_ctx)` on one level (the host's ranks, or the ranks with this local rank
/// across hosts) for the world's call in `c`: a call of its own number on that level, published
/// there first, with the world's deadline, the level's scratch and no TUTTI_ALGO rules (they
/// name the world's choices). An error there aborts every level of the world (a rank that stops
/// on one level must not leave the ranks of its other levels waiting for it until their
/// deadline) and comes out naming world ranks.
template <bool Local, class Ctx, class F>
void on_level(Ctx& c, F&& f) {
  auto& t = c.transport();
  using world_t = typename Ctx::transport_type;
  using level_t =
      std::conditional_t<Local, typename world_t::local_type, typename world_t::remote_type>;
  level_t* level = nullptr;
  if constexpr (Local)
    level = &t.local();
  else
    level = &t.cross();
  const call info = t.level_call(Local, c.info());
  try {
    level->publish(info);
    context<level_t> ctx(*level, info, c.deadline(), t.level_scratch(Local), no_level_rules());
    f(ctx);
  } catch (const error& e) {
    const host_map& h = t.hosts();
    const std::vector<int> members = Local ? h.ranks_on(h.host) : h.ranks_with_local(h.local_rank);
    const int peer = e.peer() >= 0 && static_cast<std::size_t>(e.peer()) < members.size()
                         ? members[static_cast<std::size_t>(e.peer())]
                         : -1;
    // In the world's terms: which level, how its rank numbers read, its call, the peer it
    // names (by both numbers: the reason uses the level's), its reason.
    std::string what = (Local ? std::string("among this host's ranks")
                              : "among the ranks with local rank " + std::to_string(h.local_rank) +
                                    ", one per host") +
                       " (" + level_ranks(members) + ")" +
                       (e.collective().empty() ? std::string()
                                               : ", " + e.collective() + " #" +
                                                     std::to_string(e.sequence()) + " there") +
                       (peer >= 0 ? ", with its rank " + std::to_string(e.peer()) +
                                        ", which is rank " + std::to_string(peer)
                                  : std::string()) +
                       ": " + e.reason();
    t.abort(e.kind(), what);
    throw error(e.kind(), c.info().name_str(), c.info().seq, c.rank(), peer, what);
  } catch (const std::exception& e) {
    t.abort(errc::aborted, e.what());
    throw;
  }
}
}  // namespace detail

struct hierarchical {
  static constexpr const char* name = "hierarchical";
  /// Its cost prices each level, and the sharing of a host's link, itself (automatic.hpp,
  /// predicted_cost).
  static constexpr bool prices_levels = true;

  /// Predicted microseconds of collective `k` on a two-level world (in.m.hosts > 0; nothing
  /// on a flat one). Each host's ranks share its link: the L flows of the step across hosts
  /// each get 1/L of it.
  [[nodiscard]] static std::optional<double> cost(detail::collective k,
                                                  const detail::cost_inputs& in) noexcept {
    if (in.m.hosts < 1 || in.m.ranks_per_host < 1) return std::nullopt;  // a flat world
    const double h = in.m.hosts, l = in.m.ranks_per_host, n = in.n, g = in.g;
    const double al = in.m.local_alpha_us, bl = in.m.local_beta_us_per_byte, a = in.a, b = in.b;
    const double lg_h = std::ceil(std::log2(h)), lg_l = std::ceil(std::log2(l));
    switch (k) {
      case detail::collective::all_reduce: {
        const double inside = 2 * (l - 1) * al + 2 * (l - 1) / l * n * bl + (l - 1) / l * n * g;
        const double block = n / l;
        const double ring_across =
            2 * (h - 1) * a + 2 * (h - 1) / h * block * b * l + (h - 1) / h * block * g;
        const double doubling_across = lg_h * (a + block * b * l + block * g);
        return inside + std::min(ring_across, doubling_across);
      }
      // n: the gathered vector, n / p per rank. Across hosts each rank's H blocks (ring or
      // doubling, the same bytes), its host's L flows sharing the link; inside, a call per host
      // (ranks numbered host by host).
      case detail::collective::all_gather:
      case detail::collective::reduce_scatter: {
        const double gr = k == detail::collective::reduce_scatter ? g : 0.0;  // reducing
        const double inside = h * (l - 1) * al + (l - 1) / l * n * (bl + gr);
        const double across = std::min(h - 1, lg_h) * a + (h - 1) * n / (h * l) * (b * l + gr);
        return inside + across;
      }
      // Across hosts through binomial trees: one α per message (tree's).
      case detail::collective::broadcast:
        return lg_h * (in.a1 + n * b) + lg_l * (al + n * bl);
      case detail::collective::reduce:
        return lg_l * (al + n * bl + n * g) + lg_h * (in.a1 + n * b + n * g);
      default:
        return std::nullopt;
    }
  }

  template <class Ctx>
    requires two_level_transport<typename Ctx::transport_type>
  static void all_reduce(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    auto& t = c.transport();
    if (!t.two_level()) return flat<Ctx>::all_reduce(c, in, out, count);
    c.copy(out, in, count * c.elem());
    const auto& h = t.hosts();
    const auto off = detail::even_offsets(c, count, h.local_size);
    const auto me = static_cast<std::size_t>(h.local_rank);
    detail::on_level<true>(c, [&](auto& local) { detail::ring_reduce_scatter(local, out, off); });
    // Every rank of this local rank has a block of the same size: all skip an empty one.
    if (h.hosts > 1 && off[me + 1] > off[me])
      detail::on_level<false>(c, [&](auto& across) {
        flat<Ctx>::all_reduce(across, out + off[me], out + off[me],
                              (off[me + 1] - off[me]) / c.elem());
      });
    detail::on_level<true>(c, [&](auto& local) { detail::ring_all_gatherv(local, out, off); });
  }

  template <class Ctx>
    requires two_level_transport<typename Ctx::transport_type>
  static void broadcast(Ctx& c, std::byte* buf, std::size_t count, int root) {
    auto& t = c.transport();
    if (!t.two_level()) return flat<Ctx>::broadcast(c, buf, count, root);
    const auto& h = t.hosts();
    const int lr = h.local_of[static_cast<std::size_t>(root)];
    if (h.local_rank == lr && h.hosts > 1)
      detail::on_level<false>(c, [&](auto& across) {
        flat<Ctx>::broadcast(across, buf, count, h.host_of[static_cast<std::size_t>(root)]);
      });
    detail::on_level<true>(c, [&](auto& local) { flat<Ctx>::broadcast(local, buf, count, lr); });
  }

  template <class Ctx>
    requires two_level_transport<typename Ctx::transport_type>
  static void reduce(Ctx& c, const std::byte* in, std::byte* out, std::size_t count, int root) {
    auto& t = c.transport();
    if (!t.two_level()) return flat<Ctx>::reduce(c, in, out, count, root);
    const auto& h = t.hosts();
    const int lr = h.local_of[static_cast<std::size_t>(root)];
    const std::size_t bytes = count * c.elem();
    // This host's sum lands on its rank with the root's local rank, then goes across hosts.
    std::byte* partial = c.scratch(2 * bytes);
    detail::on_level<true>(c,
                           [&](auto& local) { flat<Ctx>::reduce(local, in, partial, count, lr); });
    if (h.local_rank != lr) return;
    if (h.hosts == 1) {
      c.copy(out, partial, bytes);
      return;
    }
    std::byte* result = c.rank() == root ? out : partial + bytes;
    detail::on_level<false>(c, [&](auto& across) {
      flat<Ctx>::reduce(across, partial, result, count, h.host_of[static_cast<std::size_t>(root)]);
    });
  }

  /// Each rank's block across hosts among the ranks with its local rank (`mine`: block j is
  /// host j's), then inside each host the local ranks' blocks of each host: straight into
  /// place where each host's ranks are consecutive (one call per host), else all at once
  /// (local rank-major) and then each block to its rank's place.
  template <class Ctx>
    requires two_level_transport<typename Ctx::transport_type>
  static void all_gather(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    if (!c.transport().two_level() || count == 0) return flat<Ctx>::all_gather(c, in, out, count);
    const auto b = detail::plan_blocks(c, count);
    if (b.hosts > 1)
      detail::on_level<false>(
          c, [&](auto& across) { flat<Ctx>::all_gather(across, in, b.mine, count); });
    else
      c.copy(b.mine, in, b.bytes);
    for (std::size_t j = 0; j < b.first.size(); ++j)
      detail::on_level<true>(c, [&](auto& local) {
        flat<Ctx>::all_gather(local, b.mine + j * b.bytes, out + b.first[j] * b.bytes, count);
      });
    if (!b.first.empty()) return;
    std::byte* all = b.slot.empty() ? out : b.staged;
    detail::on_level<true>(
        c, [&](auto& local) { flat<Ctx>::all_gather(local, b.mine, all, count * b.hosts); });
    for (std::size_t r = 0; r < b.slot.size(); ++r)
      c.copy(out + r * b.bytes, all + b.slot[r] * b.bytes, b.bytes);
  }
  template <class Ctx>
    requires two_level_transport<typename Ctx::transport_type>
  static void gather(Ctx& c, const std::byte* in, std::byte* out, std::size_t count, int root) {
    flat<Ctx>::gather(c, in, out, count, root);
  }
  template <class Ctx>
    requires two_level_transport<typename Ctx::transport_type>
  static void scatter(Ctx& c, const std::byte* in, std::byte* out, std::size_t count, int root) {
    flat<Ctx>::scatter(c, in, out, count, root);
  }
  /// all_gather's mirror: inside each host, each host's blocks reduced onto the local ranks
  /// (local rank k gets this host's sum of host j's block k, for every j; one call per host
  /// where each host's ranks are consecutive, else once over the blocks put in local
  /// rank-major order), then across hosts among the ranks with its local rank.
  template <class Ctx>
    requires two_level_transport<typename Ctx::transport_type>
  static void reduce_scatter(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    if (!c.transport().two_level() || count == 0)
      return flat<Ctx>::reduce_scatter(c, in, out, count);
    const auto b = detail::plan_blocks(c, count);
    std::byte* sums = b.hosts > 1 ? b.mine : out;  // this host's sums of its local rank's blocks
    for (std::size_t j = 0; j < b.first.size(); ++j)
      detail::on_level<true>(c, [&](auto& local) {
        flat<Ctx>::reduce_scatter(local, in + b.first[j] * b.bytes, sums + j * b.bytes, count);
      });
    if (b.first.empty()) {
      for (std::size_t r = 0; r < b.slot.size(); ++r)
        c.copy(b.staged + b.slot[r] * b.bytes, in + r * b.bytes, b.bytes);
      const std::byte* blocks = b.slot.empty() ? in : b.staged;
      detail::on_level<true>(
          c, [&](auto& local) { flat<Ctx>::reduce_scatter(local, blocks, sums, count * b.hosts); });
    }
    if (b.hosts > 1)
      detail::on_level<false>(
          c, [&](auto& across) { flat<Ctx>::reduce_scatter(across, b.mine, out, count); });
  }
  template <class Ctx>
    requires two_level_transport<typename Ctx::transport_type>
  static void all_to_all(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    flat<Ctx>::all_to_all(c, in, out, count);
  }
  template <class Ctx>
    requires two_level_transport<typename Ctx::transport_type>
  static void all_gatherv(Ctx& c, const std::byte* in, std::byte* out,
                          std::span<const std::size_t> counts) {
    flat<Ctx>::all_gatherv(c, in, out, counts);
  }
  template <class Ctx>
    requires two_level_transport<typename Ctx::transport_type>
  static void gatherv(Ctx& c, const std::byte* in, std::byte* out,
                      std::span<const std::size_t> counts, int root) {
    flat<Ctx>::gatherv(c, in, out, counts, root);
  }
  template <class Ctx>
    requires two_level_transport<typename Ctx::transport_type>
  static void scatterv(Ctx& c, const std::byte* in, std::byte* out,
                       std::span<const std::size_t> counts, int root) {
    flat<Ctx>::scatterv(c, in, out, counts, root);
  }
  template <class Ctx>
    requires two_level_transport<typename Ctx::transport_type>
  static void all_to_allv(Ctx& c, const std::byte* in, std::span<const std::size_t> sc,
                          std::byte* out, std::span<const std::size_t> rc) {
    flat<Ctx>::all_to_allv(c, in, sc, out, rc);
  }
  template <class Ctx>
    requires two_level_transport<typename Ctx::transport_type>
  static void barrier(Ctx& c) {
    flat<Ctx>::barrier(c);
  }

 private:
  template <class Ctx>
  using flat = typename detail::dependent<basic_automatic<detail::flat_policies>, Ctx>::type;
};

}  // namespace tutti::inline v0

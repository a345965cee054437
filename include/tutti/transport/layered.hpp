#pragma once
/// \file
/// tutti::layered<Local, Remote>: a world across hosts in two levels. It is a `Remote` world of
/// every rank (tutti::gloo: point-to-point messages, Gloo's own algorithms, and every flat
/// policy run over it unchanged), plus two worlds beside it:
///
/// - `local()`: the ranks on this rank's host, over `Local` (tutti::shm: one shared segment per
///   host), meeting through the Remote world's store;
/// - `cross()`: the ranks with this rank's local rank, one per host, over `Remote`, split from
///   the world (only where every host has the same number of ranks: `two_level()`).
///
/// The hosts come from the Remote world's bootstrap (every rank's host name, boot id and
/// network namespace, or TUTTI_HOST). tutti::hierarchical runs its schedules over the two
/// levels (all_reduce: reduce-scatter inside each host, all-reduce across hosts among equal
/// local ranks, all-gather inside each host), and tutti::automatic weighs it against the flat
/// policies with each level's α and β (world_costs()). `tutti::cluster` is layered<shm, gloo>.

#include <chrono>
#include <concepts>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "tutti/core/error.hpp"
#include "tutti/core/options.hpp"
#include "tutti/detail/call.hpp"
#include "tutti/detail/cost.hpp"
#include "tutti/detail/host.hpp"
#include "tutti/detail/scratch.hpp"
#include "tutti/detail/split.hpp"
#include "tutti/transport/concepts.hpp"

namespace tutti::inline v0 {

template <class Local, class Remote>
class layered : public Remote {
 public:
  using local_type = Local;
  using remote_type = Remote;

  /// Over `world` (every rank of every host): maps its hosts, joins this host's ranks over
  /// Local and, where every host has as many ranks, this local rank's ranks over Remote. Every
  /// rank of `world` constructs one (it is collective), bounded by opts.timeout.
  layered(Remote world, const options& opts)
      : Remote(std::move(world)), lv_(std::make_shared<levels>()) {
    Remote& w = *this;
    lv_->link = detail::link_settings::from_env(w.rank());
    lv_->hosts = detail::map_identities(w.host_ids(), w.rank());
    const host_map& h = lv_->hosts;
    detail::split_plan local;
    local.id = split_id;
    local.color = h.host;
    local.key = w.rank();
    local.members = h.ranks_on(h.host);
    local.rank = h.local_rank;
    local.size = h.local_size;
    lv_->local.emplace(std::move(
        *Local::join_split(local, w.store_exchange("layered/local", opts.timeout), opts)));
    share_machine(*lv_->local);
    if (!h.uniform()) return;
    detail::split_plan cross;
    cross.id = split_id;
    cross.color = h.local_rank;
    cross.key = h.host;
    cross.members = h.ranks_with_local(h.local_rank);
    cross.rank = h.host;
    cross.size = h.hosts;
    lv_->cross.emplace(std::move(*w.split(cross, {}, opts)));
    share_machine(*lv_->cross);
  }

  /// This rank's endpoint of the world its launcher started (as Remote::from_env).
  [[nodiscard]] static layered from_env(const options& opts = {})
    requires requires { Remote::from_env(opts); }
  {
    return layered(Remote::from_env(opts), opts);
  }
  /// This rank's endpoint, meeting the others through the store an init URL names.
  [[nodiscard]] static layered from_url(std::string_view url, int rank, int size,
                                        const options& opts = {})
    requires requires { Remote::from_url(url, rank, size, opts); }
  {
    return layered(Remote::from_url(url, rank, size, opts), opts);
  }

  /// Where the ranks run.
  [[nodiscard]] const host_map& hosts() const noexcept { return lv_->hosts; }
  /// Whether both levels exist: every host has the same number of ranks. Otherwise only
  /// local() does, and hierarchical schedules run flat.
  [[nodiscard]] bool two_level() const noexcept { return lv_->cross.has_value(); }
  /// The ranks on this host (local rank = rank there).
  [[nodiscard]] Local& local() noexcept { return *lv_->local; }
  /// The ranks with this local rank, one per host (host = rank there); two_level() only.
  [[nodiscard]] Remote& cross() noexcept { return *lv_->cross; }

  /// A call on one level for the world's call `outer`: its own sequence number on that level
  /// (every rank of a level makes the same level calls in the same order), the same
  /// fingerprint and reduction.
  [[nodiscard]] detail::call level_call(bool local_level, const detail::call& outer) noexcept {
    detail::call c = outer;
    c.seq = ++(local_level ? lv_->local_seq : lv_->cross_seq);
    return c;
  }
  /// Scratch kept between calls, per level.
  [[nodiscard]] detail::scratch_space& level_scratch(bool local_level) noexcept {
    return local_level ? lv_->local_scratch : lv_->cross_scratch;
  }

  /// Fails every rank's waits on every level: a rank that raises on one level would otherwise
  /// leave the ranks of its other levels waiting for it until their deadline.
  void abort(errc code, const std::string& what) {
    Remote::abort(code, what);
    if (lv_->local) lv_->local->abort(code, what);
    if (lv_->cross) lv_->cross->abort(code, what);
  }

  /// The world's costs for tutti::automatic: Remote's (a message between hosts; where the
  /// world spans hosts, TUTTI_LINK_GBPS and TUTTI_LINK_ALPHA_US give a host link's speed and
  /// latency instead, and tutti::gloo measures what they leave unset when it joins), with the
  /// hosts, ranks per host and Local's α and β where both levels exist.
  [[nodiscard]] cost_model world_costs() const noexcept {
    const cost_model remote = costs_of_remote();
    cost_model m =
        lv_->link.apply(remote, lv_->hosts, Remote::costs.alpha_us, Remote::costs.beta_us_per_byte);
    if (two_level()) {
      m.hosts = lv_->hosts.hosts;
      m.ranks_per_host = lv_->hosts.local_size;
      m.local_alpha_us = Local::costs.alpha_us;
      m.local_beta_us_per_byte = Local::costs.beta_us_per_byte;
      // A flat policy's messages inside a host ride Remote, as on a flat Remote world: at
      // what Remote's world found there (tutti::gloo: single copies), else Remote's costs.
      const bool found = remote.hosts > 1 && remote.local_alpha_us > 0;
      m.flat_local_alpha_us = found ? remote.local_alpha_us : Remote::costs.alpha_us;
      m.flat_local_beta_us_per_byte =
          found ? remote.local_beta_us_per_byte : Remote::costs.beta_us_per_byte;
    }
    return m;
  }

  /// This rank's endpoint in the child `p` plans (communicator::split): the Remote world's
  /// child, with levels of its own.
  [[nodiscard]] std::optional<layered> split(const detail::split_plan& p,
                                             const detail::split_exchange& exchange,
                                             const options& opts) {
    auto child = Remote::split(p, exchange, opts);
    if (!child) return std::nullopt;
    return layered(std::move(*child), opts);
  }

 private:
  // The levels' splits under the world's store: an id communicator::split never reaches.
  static constexpr std::uint64_t split_id = std::numeric_limits<std::uint64_t>::max();

  struct levels {
    host_map hosts;
    detail::link_settings link;  // TUTTI_LINK_GBPS, TUTTI_LINK_ALPHA_US; 0: Remote's
    std::optional<Local> local;
    std::optional<Remote> cross;
    std::uint64_t local_seq = 0;
    std::uint64_t cross_seq = 0;
    detail::scratch_space local_scratch;
    detail::scratch_space cross_scratch;
  };

  /// Tells a level how many of the world's ranks share this machine (simulated hosts, as
  /// tests/netns makes, share one), so that its waits spin as little as the world's do.
  template <class Level>
  void share_machine(Level& level) const noexcept {
    if constexpr (requires(const Remote& r) { level.share_machine(r.host_ranks()); })
      level.share_machine(Remote::host_ranks());
  }
  [[nodiscard]] cost_model costs_of_remote() const noexcept {
    if constexpr (requires(const Remote& r) {
                    { r.world_costs() } -> std::same_as<cost_model>;
                  })
      return Remote::world_costs();
    else
      return Remote::costs;
  }

  std::shared_ptr<levels> lv_;  // shared, so the levels stay put when the endpoint moves
};

/// Transports whose worlds have a level inside each host and one across hosts
/// (tutti::layered): what tutti::hierarchical needs.
template <class T>
concept two_level_transport = point_to_point<T> && requires(T& t, const detail::call& c) {
  typename T::local_type;
  typename T::remote_type;
  { t.two_level() } -> std::same_as<bool>;
  { t.hosts() } -> std::same_as<const host_map&>;
  { t.local() } -> std::same_as<typename T::local_type&>;
  { t.cross() } -> std::same_as<typename T::remote_type&>;
  { t.level_call(true, c) } -> std::same_as<detail::call>;
};

}  // namespace tutti::inline v0

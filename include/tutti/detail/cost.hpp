#pragma once
/// \file
/// The α-β-γ cost model (Thakur, Rabenseifner & Gropp 2005): a message of n bytes costs
/// α + nβ, reducing n bytes costs nγ. `cost_model` holds a transport's parameters;
/// `detail::cost_inputs` is what a policy's `cost` reads for one call.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>

namespace tutti::inline v0 {

/// Per-transport defaults, in microseconds and microseconds per byte.
struct cost_model {
  double alpha_us = 1.0;
  double beta_us_per_byte = 1e-4;
  double gamma_us_per_byte = 1e-4;
  /// Copying a byte into or out of the shared segment (direct's schedules); 0: same as β.
  double segment_beta_us_per_byte = 0.0;
  /// Copying a byte within a rank's own memory: a schedule's packing, unpacking and final
  /// rotation (ring's and recursive halving's reduce_scatter, Bruck's all_gather, ...); 0: same
  /// as β. Set where β becomes a host link's (link_settings::apply): the world's β on one host,
  /// so that a copy is not priced as bytes over the link.
  double copy_beta_us_per_byte = 0.0;
  /// Ranks per CPU on the world's most crowded host; above 1, ranks wait for CPUs as well as
  /// for messages, and tutti::automatic weighs the work of every rank of that host, not only
  /// the slowest rank's path (a policy's `crowded_all_reduce`). 0: not known (not crowded).
  double ranks_per_cpu = 0.0;
  /// A world across hosts with shared memory inside each (tutti::layered): its hosts and ranks
  /// per host (every host alike; 0: a flat world), and α and β of a message inside a host
  /// (alpha_us and beta_us_per_byte above are then those of a message between hosts, through
  /// one host's link, which all its ranks share).
  int hosts = 0;
  int ranks_per_host = 0;
  double local_alpha_us = 0.0;
  double local_beta_us_per_byte = 0.0;
  /// α and β of a flat schedule's message between two ranks of one host, where it takes
  /// another path than the local level's (tutti::layered: a flat policy's messages all ride
  /// the Remote transport, shared memory is hierarchical's); 0: local_alpha_us and
  /// local_beta_us_per_byte.
  double flat_local_alpha_us = 0.0;
  double flat_local_beta_us_per_byte = 0.0;
  /// What a step in which ranks send and receive at once (an exchange: every step of ring,
  /// recursive halving and doubling, Bruck, direct) costs in α, against a message whose receive
  /// was posted in time (tree's). 1 where a send goes as soon as it is posted; 2 over Gloo's TCP
  /// pairs, whose send waits for the receiver's recv-ready notification, which in an exchange
  /// crosses at the same time as the partner's own (bench/RESULTS.md, "Why an exchange over
  /// Gloo's TCP costs twice a message"). Applies to `alpha_us` and to a flat schedule's
  /// messages inside a host (flat_local_alpha_us, or local_alpha_us where that is 0);
  /// hierarchical's steps inside a host take local_alpha_us as it is.
  double exchange_alphas = 1.0;

  friend bool operator==(const cost_model&, const cost_model&) = default;
};

namespace detail {

/// Slot bytes assumed for a transport without a shared segment (shm's and inproc's default).
inline constexpr std::size_t default_slot_bytes = std::size_t{1} << 20;

/// One call as a policy's cost formula sees it, with the terms the formulas share. `n` is the
/// per-rank vector for all_reduce, reduce, broadcast; the total gathered or scattered vector
/// for the gathers, scatters, reduce_scatter and all_to_all.
struct cost_inputs {
  cost_inputs(double bytes, int world, const cost_model& costs, bool has_segment = false,
              std::size_t slot = default_slot_bytes) noexcept
      : m(costs),
        ranks(world),
        segment(has_segment),
        slot_bytes(slot),
        n(bytes),
        p(world),
        a(costs.alpha_us * costs.exchange_alphas),
        a1(costs.alpha_us),
        b(costs.beta_us_per_byte),
        g(costs.gamma_us_per_byte),
        bs(costs.segment_beta_us_per_byte > 0 ? costs.segment_beta_us_per_byte : b),
        cb(copy_beta(costs)),
        lg(std::ceil(std::log2(p))),
        pow2((world & (world - 1)) == 0),
        frac((p - 1) / p),
        fold(pow2 ? 0.0 : 2 * (a + n * b) + n * g) {}

  cost_model m;
  int ranks;
  /// The transport has a shared segment: direct's gather, scatter and all_to_all copy through
  /// it instead of sending point to point.
  bool segment;
  /// Bytes of one rank's slot in the shared segment (the transport's `segment_bytes()`).
  std::size_t slot_bytes;

  double n, p;
  double a;   // α of an exchange (cost_model::exchange_alphas)
  double a1;  // α of a message whose receive was posted in time (tree's)
  double b, g;
  double bs;    // β of a copy into or out of the shared segment
  double cb;    // β of a copy within a rank's memory (cost_model::copy_beta_us_per_byte)
  double lg;    // ceil(lg p): steps of the recursive and binomial schedules
  bool pow2;    // p is a power of two
  double frac;  // (p - 1) / p
  double fold;  // the extra steps of recursive schedules when p is not a power of two

  /// β of a copy within a rank's memory: β, or less where the model knows a cheaper byte (a
  /// copy costs no more than a message's byte on one host: across hosts, β is the link's).
  [[nodiscard]] static double copy_beta(const cost_model& m) noexcept {
    double c = m.beta_us_per_byte;
    if (m.copy_beta_us_per_byte > 0) c = std::min(c, m.copy_beta_us_per_byte);
    if (m.hosts > 1)
      for (const double x : {m.local_beta_us_per_byte, m.flat_local_beta_us_per_byte})
        if (x > 0) c = std::min(c, x);
    return c;
  }

  /// Ranks outnumber the CPUs of the most crowded host (see cost_model::ranks_per_cpu).
  [[nodiscard]] bool crowded() const noexcept { return m.ranks_per_cpu > 1 && ranks > 1; }
  /// The same call as if every rank had a CPU of its own.
  [[nodiscard]] cost_inputs uncrowded() const noexcept {
    cost_model u = m;
    u.ranks_per_cpu = 0;
    return {n, ranks, u, segment, slot_bytes};
  }
  /// The same call across hosts on a crowded machine (simulated hosts): what waits for a CPU
  /// stretched by the ranks per CPU, a host link's bytes not — the α and β of a message inside
  /// a host, the reduction, a copy, and an exchange's α, since an exchange's crossings need
  /// both partners (and, over Gloo, their loop threads) running at once, where a tree's message
  /// needs its receiver only. The link's own α is not stretched: it is what a message between
  /// hosts costs as seen from these ranks' machine (tutti::gloo's probe times it there, with
  /// their threads woken as a collective's are). Stretched as well, it overpriced a tree
  /// message across hosts on 4 × 1 at two ranks per CPU, where a message took about one probed
  /// α (bench/RESULTS.md, "The link's α on a crowded machine"). Policies that price the levels
  /// read this; a flat policy reads its flat_across_hosts().
  /// `crossing_share`: the share of a host's ranks that cross hosts in a step (and whose loop
  /// threads wait for the CPUs); an exchange's α is stretched by the ranks per CPU times that
  /// share, at least 1. 1, the default, for schedules whose every rank crosses (the recursive
  /// ones' steps between hosts); 1 / ranks per host for a flat ring numbered host by host
  /// (one_flow_per_link), whose other messages are single copies. On 2 × 2 at two ranks per
  /// CPU ring's steps took about an exchange's α unstretched, on 4 × 1 more (bench/RESULTS.md,
  /// "A link that charges every frame").
  [[nodiscard]] cost_inputs crowded_across_hosts(double crossing_share = 1.0) const noexcept {
    cost_model s = m;
    const double r = m.ranks_per_cpu;
    s.exchange_alphas *= std::max(1.0, r * crossing_share);
    s.gamma_us_per_byte *= r;
    s.local_alpha_us *= r;
    s.local_beta_us_per_byte *= r;
    s.flat_local_alpha_us *= r;
    s.flat_local_beta_us_per_byte *= r;
    s.copy_beta_us_per_byte *= r;
    return {n, ranks, s, segment, slot_bytes};
  }
  /// Whether the world spans hosts in two levels (tutti::layered): m's α and β are then a
  /// host link's, and local_alpha_us, local_beta_us_per_byte a message's inside a host.
  [[nodiscard]] bool across_hosts() const noexcept { return m.hosts > 1 && m.ranks_per_host > 0; }
  /// α and β of a flat schedule's message inside a host (cost_model::flat_local_alpha_us).
  [[nodiscard]] double flat_local_alpha_us() const noexcept {
    return m.flat_local_alpha_us > 0 ? m.flat_local_alpha_us : m.local_alpha_us;
  }
  [[nodiscard]] double flat_local_beta_us_per_byte() const noexcept {
    return m.flat_local_beta_us_per_byte > 0 ? m.flat_local_beta_us_per_byte
                                             : m.local_beta_us_per_byte;
  }
  /// The steps of a nearest-first recursive schedule (recursive halving, recursive doubling, a
  /// binomial tree) on a world across hosts, ranks numbered host by host: the first log₂ L go
  /// between ranks of one host (`inside`, at a flat message's α_host and β_host), the last
  /// log₂ H between hosts (`across`, at the link's α and β). Only where L and H are powers of
  /// two (otherwise the folds and partners mix the levels: flat_across_hosts).
  struct level_steps {
    double inside, across;  // steps at each level
    double al, bl;          // an exchange inside a host
    double a, b;            // an exchange between hosts, with the link to itself
    double l;               // ranks per host: the flows on a host's link when all cross at once
    double x;               // α's per exchange (cost_model::exchange_alphas): al / x, a / x
                            // are a message's whose receive was posted in time
  };
  [[nodiscard]] std::optional<level_steps> recursive_levels() const noexcept {
    const int h = m.hosts, l = m.ranks_per_host;
    if (!across_hosts() || (h & (h - 1)) != 0 || (l & (l - 1)) != 0) return std::nullopt;
    return level_steps{std::log2(static_cast<double>(l)),
                       std::log2(static_cast<double>(h)),
                       flat_local_alpha_us() * m.exchange_alphas,
                       flat_local_beta_us_per_byte(),
                       a,
                       b,
                       static_cast<double>(l),
                       m.exchange_alphas};
  }
  /// The same call as a flat schedule over every rank sees it: each step waits for its
  /// slowest message, so α and β are the larger of the link's and a host's (the link's alone
  /// where hosts have one rank each: no message stays inside a host); and where the step has
  /// every rank of a host send to other hosts at once (`shares_links`), they split the host's
  /// link: β × ranks per host.
  [[nodiscard]] cost_inputs flat_across_hosts(bool shares_links) const noexcept {
    cost_model s = m;
    s.beta_us_per_byte = m.beta_us_per_byte * (shares_links ? m.ranks_per_host : 1);
    if (m.ranks_per_host > 1) {
      s.alpha_us = std::max(s.alpha_us, flat_local_alpha_us());
      s.beta_us_per_byte = std::max(s.beta_us_per_byte, flat_local_beta_us_per_byte());
    }
    s.hosts = 0;
    s.copy_beta_us_per_byte = cb;  // a copy stays inside the rank
    return {n, ranks, s, segment, slot_bytes};
  }
  /// β-time of one message of `bytes`.
  [[nodiscard]] double msg(double bytes) const noexcept { return bytes * m.beta_us_per_byte; }
  /// Direct's round: half a slot (rounds alternate the slot's halves).
  [[nodiscard]] double half_slot() const noexcept { return static_cast<double>(slot_bytes) / 2; }
  /// Direct's rounds for `bytes` (at least one).
  [[nodiscard]] double rounds(double bytes) const noexcept {
    return std::max(1.0, std::ceil(bytes / half_slot()));
  }
  /// A dissemination barrier: ceil(lg p) rounds of one message.
  [[nodiscard]] double dissemination_barrier() const noexcept { return lg * a; }

  /// A crowded host's all_reduce: ranks queue for CPUs, so a call takes at least the work of
  /// all its ranks spread over the CPUs (every message's α, stretched by the ranks per CPU
  /// since a rank woken by a message waits for a CPU; the bytes; the reduction) as well as
  /// `slowest`, the slowest rank's path. Counts the world's ranks as if they all shared the
  /// most crowded host. `bytes`: β-time summed over all ranks; `reduced`: bytes reduced, all
  /// ranks.
  [[nodiscard]] double crowded_host(double slowest, double messages, double bytes,
                                    double reduced) const noexcept {
    const double r = m.ranks_per_cpu;
    const double host = (messages * a * r + bytes + reduced * g) * r / p;
    return std::max(slowest, host);
  }
};

}  // namespace detail

}  // namespace tutti::inline v0

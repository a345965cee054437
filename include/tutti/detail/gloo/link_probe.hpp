#pragma once
/// \file
/// tutti::gloo's measurement of the network between hosts, when a world that spans hosts
/// joins and TUTTI_LINK_GBPS / TUTTI_LINK_ALPHA_US do not say it: rank 0 and the first rank on
/// another host time a small message's round trip (α) and large messages (β) over their Gloo
/// TCP pair, and every rank reads the result from the store.
/// Without it, tutti::automatic would price the link at Gloo's loopback fit, as fast as memory,
/// and choose ring where recursive halving is faster (bench/RESULTS.md, "The link measured when
/// the world joins").

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tutti/core/error.hpp"
#include "tutti/core/options.hpp"
#include "tutti/detail/gloo/objects.hpp"
#include "tutti/detail/gloo/requests.hpp"
#include "tutti/detail/gloo/single_copy.hpp"
#include "tutti/detail/gloo/state.hpp"
#include "tutti/detail/gloo_support.hpp"
#include "tutti/detail/host.hpp"

namespace tutti::inline v0::detail {

/// The probe's slots (top byte 0x77): headers and the timed messages, each direction its own.
inline constexpr std::uint64_t gloo_probe_slot = std::uint64_t{0x77} << 56;

/// The probe's sizes: a small message's round trip `round_trips` times (α: half the median);
/// then a message doubling from `first` until one takes `long_enough_us` (and at least 20 small
/// round trips), up to `largest`, and `large_messages` of twice the last size (β). `first` is
/// well above what a switch or a token bucket lets through at once (tc tbf's burst, 256 KiB in
/// bench/netns): a message that fits in one would look as fast as the wire behind it. About
/// 60 ms at 1 Gbit/s.
struct gloo_probe_plan {
  static constexpr std::size_t small = 8;
  static constexpr int round_trips = 7;
  static constexpr std::size_t first = std::size_t{1} << 20;
  static constexpr std::size_t largest = std::size_t{8} << 20;
  static constexpr double long_enough_us = 2000;
  static constexpr int large_messages = 3;
};

/// Waits for one of the probe's messages with `peer` until `deadline`; raises naming the peer.
inline void gloo_probe_wait(const gloo_state& st, int peer, ::gloo::transport::UnboundBuffer& b,
                            bool is_send, clock::time_point deadline) {
  const auto left = gloo_left(deadline);
  try {
    if (is_send ? b.waitSend(nullptr, left) : b.waitRecv(nullptr, left)) return;
  } catch (const std::exception& e) {
    throw error(clock::now() >= deadline ? errc::timeout : errc::peer_lost, "", 0, st.rank, peer,
                "tutti::gloo: measuring the link between hosts with rank " + std::to_string(peer) +
                    ": " + e.what());
  }
  throw error(errc::timeout, "", 0, st.rank, peer,
              "tutti::gloo: measuring the link between hosts with rank " + std::to_string(peer) +
                  " took past the world's timeout");
}

/// One side of the probe's conversation on the Gloo pair with `peer`. The driver sends a
/// header (the size of the next timed message, 0: done), which the other side acknowledges
/// once it has posted the timed message's receive; then the timed message goes and comes back
/// as an 8-byte acknowledgement, each receive posted before its message leaves (a message that
/// finds its receive posted costs one crossing: the α the cost model means).
class gloo_probe_pair {
 public:
  gloo_probe_pair(gloo_state& st, int peer, clock::time_point deadline)
      : st_(st), peer_(peer), deadline_(deadline) {}

  /// The driver: the time of a round trip of an `n`-byte message and its acknowledgement, µs.
  double timed(std::size_t n) {
    hold(n);
    send(&header_, sizeof header_, n, 1);
    recv(&word_, sizeof word_, 3);
    const auto t0 = clock::now();
    buffer ack = post_recv(&word_, sizeof word_, 4);
    send(data_.get(), n, n, 2);
    wait(std::move(ack), false);
    return std::chrono::duration<double, std::micro>(clock::now() - t0).count();
  }
  /// The driver: tells the other side that the probe is over.
  void finish() { send(&header_, sizeof header_, 0, 1); }

  /// The other side: answers the driver until it says the probe is over.
  void serve() {
    for (;;) {
      recv(&header_, sizeof header_, 1);
      const std::size_t n = header_;
      if (n == 0) return;
      if (n > 2 * gloo_probe_plan::largest)
        throw error(errc::transport_failure, "", 0, st_.rank, peer_,
                    "tutti::gloo: rank " + std::to_string(peer_) + " asked to time " +
                        std::to_string(n) + " bytes, more than the link probe sends");
      hold(n);
      buffer data = post_recv(data_.get(), n, 2);
      send(&word_, sizeof word_, 0, 3);
      wait(std::move(data), false);
      send(&word_, sizeof word_, 0, 4);
    }
  }

 private:
  using buffer = std::unique_ptr<::gloo::transport::UnboundBuffer>;

  void hold(std::size_t n) {
    if (n <= capacity_) return;
    data_ = std::make_unique_for_overwrite<std::byte[]>(n);
    capacity_ = n;
  }
  buffer post_recv(void* p, std::size_t n, std::uint64_t slot) {
    buffer b = st_.ctx->createUnboundBuffer(p, n);
    b->recv(peer_, gloo_probe_slot | slot, 0, n);
    return b;
  }
  void recv(void* p, std::size_t n, std::uint64_t slot) { wait(post_recv(p, n, slot), false); }
  /// Sends `n` bytes at `p` (a header: `value` written there first) and waits until they left.
  void send(void* p, std::size_t n, std::size_t value, std::uint64_t slot) {
    if (p == &header_) header_ = value;
    buffer b = st_.ctx->createUnboundBuffer(p, n);
    b->send(peer_, gloo_probe_slot | slot, 0, n);
    wait(std::move(b), true);
  }
  /// Waits for `b`'s message, then retires the buffer (destroying it at once would spin while
  /// Gloo's loop thread still holds it: gloo_state::retired).
  void wait(buffer b, bool is_send) {
    gloo_probe_wait(st_, peer_, *b, is_send, deadline_);
    gloo_retire(st_, std::move(b));
  }

  gloo_state& st_;
  int peer_;
  clock::time_point deadline_;
  std::uint64_t header_ = 0;
  std::uint64_t word_ = 0;
  std::unique_ptr<std::byte[]> data_;
  std::size_t capacity_ = 0;
};

/// What rank 0 measures against `peer`: a small message's one-way time (half the median round
/// trip) and the link's speed (large messages' time, less a round trip, over their size).
[[nodiscard]] inline link_settings gloo_measure_link(gloo_probe_pair& pair) {
  using plan = gloo_probe_plan;
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  (void)pair.timed(plan::small);  // the first one may find its receive not yet posted
  std::vector<double> rtt;
  rtt.reserve(plan::round_trips);
  for (int i = 0; i < plan::round_trips; ++i) rtt.push_back(pair.timed(plan::small));
  const double round_trip = median(rtt);
  std::size_t n = plan::first;
  while (n < plan::largest && pair.timed(n) < std::max(plan::long_enough_us, 20 * round_trip))
    n *= 2;
  // β: three messages of twice that size, the median less the acknowledgement's round trip.
  // The messages before have emptied any token bucket's burst, and a pause that refills it
  // (a busy machine) gains a message at most an eighth; otherwise a busy machine only ever
  // makes the link look slower.
  std::vector<double> big;
  big.reserve(plan::large_messages);
  for (int i = 0; i < plan::large_messages; ++i) big.push_back(pair.timed(2 * n));
  const double t = median(big);
  const double beta = std::max(t - round_trip, t / 2) / static_cast<double>(2 * n);
  link_settings measured;
  measured.alpha_us = std::max(round_trip / 2, 0.1);
  measured.gbps = std::min(8e-3 / beta, 1e6);
  return measured;
}

/// Fills what TUTTI_LINK_GBPS / TUTTI_LINK_ALPHA_US left unset in `st.link` by measuring, where
/// the world spans hosts, rank 0 has not turned the probe off (TUTTI_LINK_PROBE=0) and its pair
/// across hosts is not a single copy (gloo_setup_single_copy comes first): rank 0
/// times its pair with the first rank on another host and publishes the numbers (or that it did
/// not measure, or why it failed) in the store, where every rank reads them. Collective: every
/// rank of the world calls it, once, when the world joins. Split children inherit their
/// parent's link instead (the same network).
inline void gloo_probe_link(gloo_state& st, clock::time_point deadline) {
  const host_map& h = st.hosts;
  if (h.hosts <= 1) return;
  int other = 0;
  while (h.host_of[static_cast<std::size_t>(other)] == h.host_of[0]) ++other;
  const std::string key = st.prefix + "link";
  if (st.rank == 0) {
    std::string published = "-";
    gloo_probe_pair pair(st, other, deadline);
    try {
      // Hosts that one machine simulates (TUTTI_HOST) may pass their messages as single copies:
      // then that is their link, and the single copies' fit already prices it.
      if ((st.link.gbps == 0 || st.link.alpha_us == 0) && env_switch_on("TUTTI_LINK_PROBE") &&
          !gloo_single_copy(st, other)) {
        const link_settings m = gloo_measure_link(pair);
        char text[64];
        std::snprintf(text, sizeof text, "%.17g %.17g", m.gbps, m.alpha_us);
        published = text;
      }
      pair.finish();
    } catch (const error& e) {
      st.store->set_string(key, std::string("! ") + e.what());
      throw;
    }
    st.store->set_string(key, published);
  } else if (st.rank == other) {
    gloo_probe_pair(st, 0, deadline).serve();
  }
  const std::string got = gloo_peer_value(*st.store, key, st.rank, 0, deadline, "link measurement");
  if (got.starts_with("!"))
    throw error(errc::transport_failure, "", 0, st.rank, 0,
                "tutti::gloo: rank 0 could not measure the link between hosts (with rank " +
                    std::to_string(other) + "): " + got.substr(2));
  if (got == "-") return;
  char* end = nullptr;
  const double gbps = std::strtod(got.c_str(), &end);
  const double alpha_us = std::strtod(end, &end);
  if (!(gbps > 0) || !(alpha_us > 0))
    throw error(errc::transport_failure, "", 0, st.rank, 0,
                "tutti::gloo: rank 0 published an unreadable link measurement: " + got);
  if (st.link.gbps == 0) st.link.gbps = gbps;
  if (st.link.alpha_us == 0) st.link.alpha_us = alpha_us;
  if (debug_info() && st.rank == 0)
    std::fprintf(stderr,
                 "tutti[gloo] rank 0/%d: the link between hosts, measured with rank %d: %.4g "
                 "Gbit/s, %.4g us one way (tutti::automatic uses %.4g Gbit/s, %.4g us; "
                 "TUTTI_LINK_GBPS / TUTTI_LINK_ALPHA_US override)\n",
                 st.size, other, gbps, alpha_us, st.link.gbps, st.link.alpha_us);
}

}  // namespace tutti::inline v0::detail

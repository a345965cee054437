#pragma once
/// \file
/// tutti::gloo: ranks anywhere on a TCP network, through Gloo's TCP transport (libgloo). Every
/// tutti policy runs over its point-to-point messages (Gloo's unbound buffers on one connection
/// per pair); tutti::native runs Gloo's own collectives. Needs the tutti::gloo CMake component
/// (option TUTTI_WITH_GLOO; Debian: libgloo-dev).
///
/// Failure handling, on top of what Gloo offers:
/// - every wait has the call's deadline, and wakes every 100-200 ms to look for an abort record
///   or a mismatched call left in the store by another rank;
/// - a peer whose connection closes (its process died) is reported at once by the ranks
///   waiting on it, as errc::peer_lost naming it;
/// - a rank that raises any error records why in the store and closes all its connections, so
///   every other rank raises too, promptly, with the original cause;
/// - messages of disagreeing calls travel on different slots and never match (see gloo_slot);
/// - the world forms within one timeout (Gloo alone waits up to a timeout per pair), and an
///   abort fails every Gloo buffer of the world, so no wait inside Gloo outlives it.
///
/// Its parts, in detail/gloo/: costs (without Gloo), objects (Gloo's store, device, context and
/// buffers, wrapped), waker (and SIGPIPE), state, failure (abort records, closed connections),
/// liveness (beats, stopped peers, a slow wait's poll), message, single_copy, requests (posting
/// and waiting), native (Gloo's collectives), connect (joining a world).

#if !__has_include(<gloo/config.h>)
#error \
    "tutti/transport/gloo.hpp needs Gloo (Debian: libgloo-dev): link the tutti::gloo CMake component (configure tutti with -DTUTTI_WITH_GLOO=ON)"
#else

#include <gloo/config.h>
#if !GLOO_HAVE_TRANSPORT_TCP
#error "tutti::gloo needs a Gloo built with its TCP transport"
#endif

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gloo/rendezvous/context.h>

#include "tutti/bootstrap/env.hpp"
#include "tutti/bootstrap/rendezvous.hpp"
#include "tutti/bootstrap/store.hpp"
#include "tutti/core/options.hpp"
#include "tutti/detail/call.hpp"
#include "tutti/detail/cost.hpp"
#include "tutti/detail/gloo/connect.hpp"
#include "tutti/detail/gloo/costs.hpp"
#include "tutti/detail/gloo/message.hpp"
#include "tutti/detail/gloo/native.hpp"
#include "tutti/detail/gloo/requests.hpp"
#include "tutti/detail/gloo/single_copy.hpp"
#include "tutti/detail/gloo/state.hpp"
#include "tutti/detail/split.hpp"
#include "tutti/detail/wait.hpp"
#include "tutti/transport/concepts.hpp"

namespace tutti::inline v0 {

class gloo {
 public:
  using memory_space = host_memory;
  /// Defaults for tutti::automatic, fitted on loopback (bench/RESULTS.md): every message is a
  /// rendezvous over a TCP connection (tens of microseconds), bytes cross the kernel twice.
  static constexpr cost_model costs = detail::gloo_costs::tcp;

  /// A posted send or receive; waited on with `gloo::wait`. Destroyed unwaited (only while an
  /// exception unwinds an algorithm), it aborts the world: Gloo cannot withdraw a posted
  /// message, and a message arriving for a destroyed buffer would jam its connection.
  /// A large collective message travels as several parts (`gloo::part_size`); a receive that
  /// reduces (`irecv_reduce`) reduces each part as it lands, while the next ones are in flight.
  class request {
   public:
    request() = default;

   private:
    friend class gloo;
    explicit request(detail::gloo_message m) noexcept : m_(std::move(m)) {}
    detail::gloo_message m_;  // move-only: so is the request
  };

  /// How a collective message of `bytes` is cut into parts, each a Gloo message on its own
  /// slot: up to `max_parts` of at least `part_min` bytes, more once parts would pass
  /// `part_max`; a whole number of elements each (detail/gloo/requests.hpp says why).
  static constexpr std::size_t part_min = detail::gloo_part_min;
  static constexpr std::size_t part_max = detail::gloo_part_max;
  static constexpr std::size_t max_parts = detail::gloo_max_parts;
  [[nodiscard]] static std::size_t part_size(std::size_t bytes, std::size_t elem) noexcept {
    return detail::gloo_part_size(bytes, elem);
  }

  /// Collective messages between ranks on one host travel as single copies (detail/cma.hpp)
  /// where the probe at bootstrap found it possible and TUTTI_GLOO_CMA is not 0: the sender
  /// writes a descriptor into the receiver's mailbox (detail::cma_inbox), the receiver reads
  /// the bytes straight out of the sender's memory (reducing them, in cache-sized chunks, as it
  /// reads) and acknowledges in a word of the sender's. Through loopback TCP the bytes would be
  /// copied twice, into the kernel and out, and every message would wake Gloo's loop threads
  /// on both sides: a small all-reduce takes a fraction of the time it takes through TCP
  /// (bench/RESULTS.md, "tutti over Gloo with single copies"). Everything between hosts, and
  /// point-to-point messages, stay on Gloo's TCP pairs.
  /// α and β of a single copy (detail/gloo/costs.hpp).
  static constexpr double single_copy_alpha_us = detail::gloo_costs::single_copy_alpha_us;
  static constexpr double single_copy_beta_us_per_byte =
      detail::gloo_costs::single_copy_beta_us_per_byte;
  /// The chunk a reducing single-copy receive reads and reduces at a time.
  static constexpr std::size_t single_copy_chunk = detail::gloo_single_copy_chunk;

  explicit gloo(std::shared_ptr<detail::gloo_state> s) : s_(std::move(s)) {}

  [[nodiscard]] int rank() const noexcept { return s_->rank; }
  [[nodiscard]] int size() const noexcept { return s_->size; }
  /// The address this rank's TCP device listens on.
  [[nodiscard]] const std::string& address() const noexcept { return s_->address; }
  /// Whether collective messages to and from `peer` travel as single copies: it runs on this host,
  /// in this PID and network namespace, and each of the two can read the other's memory.
  [[nodiscard]] bool single_copy(int peer) const noexcept {
    return detail::gloo_single_copy(*s_, peer);
  }
  /// Ranks of this world on this rank's machine, this one included (same kernel boot).
  [[nodiscard]] int host_ranks() const noexcept { return s_->host_ranks; }
  /// Waits as for `ranks` processes on this machine (never fewer than this world has there):
  /// a world that is one level of a larger one (tutti::layered's ranks across hosts) shares
  /// the CPUs with ranks it does not know of. Call before the first collective.
  void share_machine(int ranks) noexcept {
    s_->host_ranks = std::max(ranks, s_->host_ranks);
    s_->oversubscribed = detail::oversubscribed(s_->host_ranks);
  }
  /// Every rank's host (detail/host.hpp: host name, boot id, network namespace, or
  /// TUTTI_HOST), exchanged when the world connected; index = rank.
  [[nodiscard]] const std::vector<std::string>& host_ids() const noexcept { return s_->host_ids; }
  /// An all-gather of one string per rank through this world's store, under keys named by
  /// `tag` (each tag once per world), the whole exchange bounded by `timeout` (errc::timeout
  /// naming a rank that never published): for joining another transport's world beside this
  /// one (tutti::layered) before any collective runs.
  [[nodiscard]] detail::split_exchange store_exchange(const std::string& tag,
                                                      std::chrono::milliseconds timeout) const {
    return [s = s_, tag, timeout](const std::string& mine) {
      const auto key = [&](int q) { return s->prefix + "x/" + tag + "/" + std::to_string(q); };
      const auto deadline = detail::clock::now() + timeout;
      s->store->set_string(key(s->rank), mine);
      std::vector<std::string> all(static_cast<std::size_t>(s->size));
      for (int q = 0; q < s->size; ++q)
        all[static_cast<std::size_t>(q)] =
            q == s->rank ? mine
                         : detail::gloo_peer_value(*s->store, key(q), s->rank, q, deadline,
                                                   "part of the exchange '" + tag + "'");
      return all;
    };
  }
  /// `costs` with what this world found at run time, for tutti::automatic: single copies' α
  /// and β where every pair has them (a world on one host), and the ranks per CPU of its most
  /// crowded machine. Across hosts, the link's α and β where TUTTI_LINK_GBPS /
  /// TUTTI_LINK_ALPHA_US say them, else as measured when the world joined
  /// (detail/gloo/link_probe.hpp), and, with ranks in equal blocks host by host, the hosts and
  /// ranks per host and a message's α and β inside a host: a single copy's where every pair on
  /// one host has them, else `costs`' (loopback TCP), so that automatic prices which steps
  /// cross hosts. (An exchange inside a host is then priced at cost_model::exchange_alphas
  /// single-copy α's, two where one would do: 5 µs against the link's tens.) The same on
  /// every rank.
  [[nodiscard]] cost_model world_costs() const noexcept {
    cost_model m = s_->single_copy_world ? detail::gloo_costs::single_copy(costs) : costs;
    m.ranks_per_cpu = s_->ranks_per_cpu;
    const cost_model inside =
        s_->single_copy_hosts ? detail::gloo_costs::single_copy(costs) : costs;
    return s_->link.apply(m, s_->hosts, inside.alpha_us, inside.beta_us_per_byte);
  }
  /// Gloo's context, for running Gloo's own algorithms on tutti's connections. Gloo's legacy
  /// algorithm classes (AllreduceRing and friends) set SO_SNDBUF on the connections they use
  /// (which turns off the kernel's autotuning for every later message): prefer the free
  /// functions (gloo::allreduce, ...), as tutti::native does.
  [[nodiscard]] const std::shared_ptr<::gloo::rendezvous::Context>& context() const noexcept {
    return s_->ctx;
  }

  [[nodiscard]] request isend(int peer, std::span<const std::byte> data, const detail::call& c,
                              detail::space sp, std::uint64_t tag) {
    return request(detail::gloo_post(s_, peer, const_cast<std::byte*>(data.data()), data.size(), c,
                                     sp, tag, true));
  }
  [[nodiscard]] request irecv(int peer, std::span<std::byte> data, const detail::call& c,
                              detail::space sp, std::uint64_t tag) {
    return request(detail::gloo_post(s_, peer, data.data(), data.size(), c, sp, tag, false));
  }
  /// Whether a collective receive of `bytes` (elements of `elem` bytes) from `peer` is worth
  /// posting a step early (detail::context::post_ahead): a single copy or a message of one
  /// part, not one of several (detail::gloo_post_ahead says why).
  [[nodiscard]] bool post_ahead(int peer, std::size_t bytes, std::size_t elem) const noexcept {
    return detail::gloo_post_ahead(*s_, peer, bytes, elem);
  }
  /// Whether ring's receive of `bytes` from `peer` is worth posting a step early
  /// (detail::context::ring_post_ahead): as post_ahead, below part_min
  /// (detail::gloo_ring_post_ahead says why).
  [[nodiscard]] bool ring_post_ahead(int peer, std::size_t bytes, std::size_t elem) const noexcept {
    return detail::gloo_ring_post_ahead(*s_, peer, bytes, elem);
  }
  /// Receives a collective message from `peer` and reduces it into `inout` (`inout = inout op
  /// message`) part by part as the parts arrive, at `wait`.
  [[nodiscard]] request irecv_reduce(int peer, std::span<std::byte> inout, const detail::call& c) {
    return request(detail::gloo_post_reduce(s_, peer, inout, c));
  }

  /// Waits for `r` until `deadline`. Wakes every 100-200 ms to look for other ranks' aborts
  /// and mismatched calls; a closed connection raises errc::peer_lost naming the peer.
  void wait(request& r, const detail::call& c, detail::clock::time_point deadline) {
    detail::gloo_wait(*s_, r.m_, c, deadline);
  }

  /// Whether `r` is done (as after `wait`), looking at each of its parts without waiting for
  /// it. Past `deadline` it waits instead, which raises at once.
  bool test(request& r, const detail::call& c, detail::clock::time_point deadline) {
    if (detail::gloo_test(*s_, r.m_, c)) return true;
    if (detail::clock::now() < deadline) return false;
    wait(r, c, deadline);
    return true;
  }

  /// Fails every rank's current and future waits: records why in the store and closes this
  /// rank's connections (each peer raises at once, naming this rank).
  void abort(errc code, const std::string& what) {
    detail::gloo_abort_world(*s_, {code, s_->rank, -1, what});
  }

  /// Gloo's connections carry no call board; mismatches are checked on slow waits (poll).
  void publish(const detail::call&) noexcept {}

  // ---- native collectives (tutti::native), run by Gloo on the same connections -----------

  void native_all_reduce(const detail::call& c, const std::byte* in, std::byte* out,
                         std::size_t count, detail::clock::time_point deadline) {
    detail::gloo_native_all_reduce(*s_, c, in, out, count, deadline);
  }
  void native_reduce(const detail::call& c, const std::byte* in, std::byte* out, std::size_t count,
                     int root, detail::clock::time_point deadline) {
    detail::gloo_native_reduce(*s_, c, in, out, count, root, deadline);
  }
  void native_broadcast(const detail::call& c, std::byte* buf, std::size_t count, int root,
                        detail::clock::time_point deadline) {
    detail::gloo_native_broadcast(*s_, c, buf, count, root, deadline);
  }
  void native_all_gather(const detail::call& c, const std::byte* in, std::byte* out,
                         std::size_t count, detail::clock::time_point deadline) {
    detail::gloo_native_all_gather(*s_, c, in, out, count, deadline);
  }
  void native_gather(const detail::call& c, const std::byte* in, std::byte* out, std::size_t count,
                     int root, detail::clock::time_point deadline) {
    detail::gloo_native_gather(*s_, c, in, out, count, root, deadline);
  }
  void native_scatter(const detail::call& c, const std::byte* in, std::byte* out, std::size_t count,
                      int root, detail::clock::time_point deadline) {
    detail::gloo_native_scatter(*s_, c, in, out, count, root, deadline);
  }
  void native_all_to_all(const detail::call& c, const std::byte* in, std::byte* out,
                         std::size_t count, detail::clock::time_point deadline) {
    detail::gloo_native_all_to_all(*s_, c, in, out, count, deadline);
  }
  /// Count 0: a barrier on the call's tag instead, so that ranks whose calls disagree raise at
  /// the deadline (detail::gloo_empty_call). True when it ran (count 0).
  bool empty_call(const detail::call& c, std::size_t count, detail::clock::time_point deadline) {
    return detail::gloo_empty_call(*s_, c, count, deadline);
  }
  void native_barrier(const detail::call& c, detail::clock::time_point deadline) {
    detail::gloo_native_barrier(*s_, c, deadline);
  }

  // ---- joining a world ------------------------------------------------------------------

  /// This rank's endpoint, from the launcher's environment (torchrun, Open MPI, MPICH, Slurm,
  /// tutti::spawn: see bootstrap/env.hpp). Ranks meet through the store at
  /// MASTER_ADDR:MASTER_PORT (rank 0 serves it; under torchrun, its agent does, and tutti speaks
  /// torch's TCPStore protocol to it); when every rank is on this host and no such store is set
  /// (mpirun, srun), through a file private to this user (bootstrap/rendezvous.hpp), which rank
  /// 0 removes when it closes. The device binds
  /// TUTTI_SOCKET_IFNAME's address, else the one that reaches MASTER_ADDR.
  [[nodiscard]] static gloo from_env(const options& opts = {}) {
    const bootstrap::world_info w = bootstrap::world_from_env();
    const bootstrap::rendezvous r = bootstrap::rendezvous_from_env(
        w, "gloo", opts,
        "tutti::gloo across hosts needs a store: set MASTER_ADDR and MASTER_PORT (rank 0 serves "
        "it; under torchrun, its agent does), or use communicator<gloo>::from_url with tcp:// or "
        "redis://");
    gloo t = connect(r.st, r.key, r.rank, r.size, r.route_host, r.route_port, opts);
    // The store serves the world's abort and call records as long as it lives: the file goes
    // when rank 0 closes, not once every rank has joined.
    t.s_->unlink_on_close = r.file_to_remove();
    return t;
  }

  /// This rank's endpoint, meeting the others through the store an init URL names:
  /// `tcp://host:port` (rank 0 serves), `redis://host:port`, `file:///path`, `env://`.
  [[nodiscard]] static gloo from_url(std::string_view url, int rank, int size,
                                     const options& opts = {}) {
    const bootstrap::rendezvous r = bootstrap::rendezvous_from_url(url, rank, size, "gloo", opts);
    return connect(r.st, r.key, r.rank, r.size, r.route_host, r.route_port, opts);
  }

  /// Joins the world of `size` ranks whose rendezvous runs through `st` under `key`.
  /// `route_host` (may be empty) picks the local address when TUTTI_SOCKET_IFNAME is unset.
  [[nodiscard]] static gloo connect(std::shared_ptr<bootstrap::store> st, const std::string& key,
                                    int rank, int size, const std::string& route_host,
                                    int route_port, const options& opts = {}) {
    return gloo(detail::gloo_connect(std::move(st), key, rank, size, route_host, route_port, opts));
  }

  /// This rank's endpoint in the child `p` plans (communicator::split): a world of its own
  /// connections, on a device bound like this one's, meeting through this world's store under
  /// a key of its own (the child's abort and call records live there too). A rank that dies is
  /// named in the child as in any world: its connections close. The child counts this world's
  /// ranks on this host among its own (host_ranks), so it waits as crowded as this world, and
  /// takes this world's link between hosts (set or measured) without measuring it again.
  [[nodiscard]] std::optional<gloo> split(const detail::split_plan& p,
                                          const detail::split_exchange&, const options& opts) {
    if (!p.joins()) return std::nullopt;
    const std::string key =
        s_->prefix + "split/" + std::to_string(p.id) + "/" + std::to_string(p.color);
    gloo child(detail::gloo_connect(s_->store, key, p.rank, p.size,
                                    {s_->attr, "as the parent's: " + s_->address}, opts,
                                    &s_->link));
    child.share_machine(s_->host_ranks);  // the parent's other ranks on this host still run
    return child;
  }

 private:
  std::shared_ptr<detail::gloo_state> s_;
};

}  // namespace tutti::inline v0

#endif

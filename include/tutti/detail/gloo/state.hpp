#pragma once
/// \file
/// tutti::gloo's world state (gloo_state): its store, Gloo's context and device, the
/// sentinels, what liveness and single copies keep between calls, and the waker.

#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gloo/rendezvous/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/tcp/attr.h>
#include <gloo/transport/unbound_buffer.h>

#include "tutti/bootstrap/store.hpp"
#include "tutti/detail/cma.hpp"
#include "tutti/detail/gloo/objects.hpp"
#include "tutti/detail/gloo/waker.hpp"
#include "tutti/detail/host.hpp"

namespace tutti::inline v0::detail {

/// A single-copy message's descriptor and slot, and for a receive whether its descriptor has
/// arrived (in the mailbox: detail::cma_inbox). Held by its request, at a stable address.
struct cma_message {
  cma_descriptor d;
  std::uint64_t slot = 0;
  bool arrived = false;
};

/// Single copies between this rank and one peer (detail::cma_inbox).
struct cma_link {
  std::uint64_t inbox = 0;      // the address of this rank's inbox in the peer's mailbox
  std::uint64_t sent = 0;       // entries written there
  std::uint64_t room_seen = 0;  // the peer's count of entries it took, as last read
  std::uint64_t taken = 0;      // entries taken here from the peer's inbox in this rank's mailbox
  std::deque<cma_inbox::body> outbox;   // descriptors waiting for room in the peer's inbox
  std::deque<cma_message*> posted;      // receives waiting for their descriptor, in posting order
  std::deque<cma_inbox::body> arrived;  // descriptors no posted receive has claimed yet
};

struct gloo_state {
  std::shared_ptr<bootstrap::store> store;  // rendezvous, then abort and call records
  std::string prefix;                       // "tutti/gloo/<n>/"
  /// One zero-byte receive per peer, posted once the world is connected, on a slot nobody sends
  /// to: Gloo fails it when that peer's connection closes, which is how a rank learns that a
  /// peer it only sends to has died (Gloo leaves a pending send waiting). Destroyed after ctx.
  std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> sentinels;
  std::shared_ptr<detail::gloo_buffers> buffers = std::make_shared<detail::gloo_buffers>();
  std::shared_ptr<::gloo::transport::Device> device;
  std::shared_ptr<::gloo::rendezvous::Context> ctx;
  int rank = 0;
  int size = 1;
  std::string address;                // what the device bound, for messages
  ::gloo::transport::tcp::attr attr;  // how the device was chosen: a split's child binds alike
  std::string unlink_on_close;        // rank 0's rendezvous file, when one was used
  bool aborted = false;               // this rank closed its connections
  std::uint64_t published_seq = 0;    // last call record written
  /// Liveness: this rank's beat key counts its slow-wait polls; the peers' beats as seen at
  /// the first poll of the current slow wait, and when.
  std::uint64_t beats = 0;
  std::chrono::steady_clock::time_point last_poll{};
  std::chrono::steady_clock::time_point beats_since{};
  std::vector<std::string> beats_seen;
  /// The same during a Gloo collective (tutti::native), kept by the waker's watch: each peer's
  /// last beat seen and when it last changed, per call (native_call counts them).
  std::uint64_t native_call = 0;
  std::uint64_t native_watched = 0;
  std::uint64_t suspect_call = 0;
  int suspect = -1;  // a peer whose connection closed with no abort record yet, seen once
  std::chrono::steady_clock::time_point suspect_since{};  // when the watch first saw it
  std::vector<std::string> native_beats;
  std::vector<std::chrono::steady_clock::time_point> native_moved;
  std::byte dummy{};  // a valid address for zero-byte buffers
  /// Buffers whose operation completed, destroyed a few operations later: Gloo's loop
  /// thread may still hold one for a moment after the wait returns, and destroying it then
  /// spins (sched_yield) until it lets go — milliseconds when ranks outnumber cores.
  std::deque<std::unique_ptr<::gloo::transport::UnboundBuffer>> retired;
  /// Receive staging for reducing receives, kept between calls (no allocation per message).
  std::vector<std::vector<std::byte>> staging_pool;
  /// Single copies (detail/cma.hpp): each peer's pid where both can read and write the other's
  /// memory, else 0; this rank's mailbox (its first word is the probe's word); each peer's link.
  std::vector<pid_t> cma_pid;
  std::vector<pid_t> peer_pid;  // every peer's pid on this machine and PID namespace, else 0
  cma_inbox* mailbox = nullptr;
  std::vector<cma_link> cma_links;
  /// Ranks of this world on this machine (this one included), and whether they outnumber the
  /// CPUs this process may use (detail::oversubscribed; waits spin less).
  int host_ranks = 1;
  std::vector<std::string> host_ids;  // every rank's host (detail/host.hpp), learnt at connect
  host_map hosts;                     // the same, mapped (which ranks share a host)
  link_settings link;                 // TUTTI_LINK_GBPS, TUTTI_LINK_ALPHA_US, else measured
  bool oversubscribed = false;
  /// Ranks per CPU on the world's most crowded machine; the same on every rank (costs).
  double ranks_per_cpu = 0;
  /// Whether every pair of ranks has single copies, and every pair on one host (`hosts`); the
  /// same on every rank (costs).
  bool single_copy_world = false;
  bool single_copy_hosts = false;
  gloo_waker waker;

  [[nodiscard]] std::vector<std::byte> take_staging(std::size_t bytes) {
    std::vector<std::byte> v;
    if (!staging_pool.empty()) {
      v = std::move(staging_pool.back());
      staging_pool.pop_back();
    }
    if (v.size() < bytes) v.resize(bytes);
    return v;
  }
  void give_staging(std::vector<std::byte>&& v) noexcept {
    try {
      if (staging_pool.size() < 4) staging_pool.push_back(std::move(v));
    } catch (...) {
      // dropped: the next receive allocates
    }
  }

  gloo_state() = default;
  gloo_state(const gloo_state&) = delete;
  gloo_state& operator=(const gloo_state&) = delete;
  ~gloo_state() {
    if (!unlink_on_close.empty()) ::unlink(unlink_on_close.c_str());
  }
};

}  // namespace tutti::inline v0::detail

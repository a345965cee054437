#pragma once
/// \file
/// tutti::gloo's messages: posting a send or receive (as parts over Gloo's TCP pairs, or as a
/// single copy) and waiting for it within the call's deadline, in slices that look for other
/// ranks' aborts and mismatched calls.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <gloo/transport/unbound_buffer.h>

#include "tutti/core/error.hpp"
#include "tutti/detail/call.hpp"
#include "tutti/detail/cma.hpp"
#include "tutti/detail/gloo/failure.hpp"
#include "tutti/detail/gloo/liveness.hpp"
#include "tutti/detail/gloo/message.hpp"
#include "tutti/detail/gloo/single_copy.hpp"
#include "tutti/detail/gloo/state.hpp"
#include "tutti/detail/gloo/waker.hpp"
#include "tutti/detail/gloo_support.hpp"
#include "tutti/detail/wait.hpp"

namespace tutti::inline v0::detail {

/// How a collective message of `bytes` is cut: into up to `gloo_max_parts` parts of at least
/// `gloo_part_min` bytes, more once parts would pass `gloo_part_max`; a whole number of
/// elements each (the last may be shorter). Both ends compute it from the same size and element
/// size, so their parts pair up; each part is a Gloo message on its own slot. Cutting lets a
/// reducing receive overlap the reduction of part k with the transfer of part k + 1 (Gloo's
/// loop thread moves the bytes meanwhile): faster than whole messages on loopback, and as fast
/// where ranks outnumber CPUs (bench/RESULTS.md, "tutti over Gloo's TCP transport, large
/// messages in parts" and "2 × 2 unshaped at 8 MiB").
inline constexpr std::size_t gloo_part_min = std::size_t{256} << 10;
inline constexpr std::size_t gloo_part_max = std::size_t{1} << 20;
inline constexpr std::size_t gloo_max_parts = 8;
[[nodiscard]] inline std::size_t gloo_part_size(std::size_t bytes, std::size_t elem) noexcept {
  const std::size_t parts = std::max<std::size_t>(
      {1, std::min(bytes / gloo_part_min, gloo_max_parts), bytes / gloo_part_max});
  if (parts == 1 || elem == 0) return bytes;
  const std::size_t elems = (bytes / elem + parts - 1) / parts;
  return elems * elem;
}

/// Whether a collective receive of `bytes` from `peer` is worth posting before the step that
/// sends its message begins (context::post_ahead): where it travels as a single copy, or over
/// TCP as one part. A Gloo send that finds its receive posted is written by the sending rank's
/// own thread, which holds the pair's lock while it writes (Pair::send); Gloo's loop thread,
/// reading the peer's message on the same connection meanwhile, finds the lock taken and waits.
/// For one part that is short and the early post saves the receiver's recv-ready notice on the
/// way; for several, reads and writes of an exchange take turns on the connection, and
/// recursive halving across hosts fell behind ring at 2-8 MiB with every all-gather receive
/// posted early (bench/RESULTS.md, "Recursive halving's all-gather receives posted early only
/// for one TCP part").
[[nodiscard]] inline bool gloo_post_ahead(const gloo_state& st, int peer, std::size_t bytes,
                                          std::size_t elem) noexcept {
  return gloo_single_copy_to(st, peer, space::collective) || gloo_part_size(bytes, elem) >= bytes;
}

/// Whether ring's receive of `bytes` from `peer` is worth posting a step early (run_ring):
/// where gloo_post_ahead says so, for a message below gloo_part_min. Its send then finds it
/// posted and the sending rank's own thread writes it (Pair::send), where it would otherwise
/// wait for the receiver's recv-ready notice. Across hosts that notice queues behind the other
/// ring flow's data on the same link direction, so each step would cost twice its wire time.
/// A longer message written by the sender keeps it from reducing its own receive meanwhile,
/// which costs more than the notice saves on a fast link (bench/RESULTS.md, "Ring's receives
/// posted a step early across shaped hosts").
[[nodiscard]] inline bool gloo_ring_post_ahead(const gloo_state& st, int peer, std::size_t bytes,
                                               std::size_t elem) noexcept {
  return bytes < gloo_part_min && gloo_post_ahead(st, peer, bytes, elem);
}

/// Posts a Gloo send or receive of `n` bytes at `p` with `m`'s peer on `slot`, as the next
/// part of `m`.
inline void gloo_post_part(gloo_state& st, gloo_message& m, void* p, std::size_t n,
                           std::uint64_t slot, bool is_send) {
  auto b = st.ctx->createUnboundBuffer(n == 0 ? &st.dummy : p, n);
  if (is_send)
    b->send(m.peer, slot, 0, n);
  else
    b->recv(m.peer, slot, 0, n);
  m.parts.push_back(std::move(b));
}

/// Posts a send (`is_send`) or receive of `bytes` at `p` with `peer`: a single copy where
/// gloo_single_copy_to says so, else parts over Gloo's pair.
[[nodiscard]] inline gloo_message gloo_post(const std::shared_ptr<gloo_state>& s, int peer,
                                            std::byte* p, std::size_t bytes, const call& c,
                                            space sp, std::uint64_t tag, bool is_send) {
  auto& st = *s;
  if (peer < 0 || peer >= st.size || peer == st.rank)
    throw error(errc::invalid_argument, c.name_str(), c.seq, st.rank, peer,
                "peer must be another rank in [0, " + std::to_string(st.size) + ")");
  if (st.aborted) gloo_raise_aborted(st, c, peer);
  if (gloo_single_copy_to(st, peer, sp))
    return gloo_post_single_copy(s, peer, p, bytes, c, tag, is_send);
  gloo_message m;
  m.s = s;
  m.peer = peer;
  m.is_send = is_send;
  m.total = bytes;
  // send/recv messages stay whole: their ends may be posted with different element sizes.
  m.part_bytes = sp == space::collective ? gloo_part_size(bytes, c.elem_size) : bytes;
  const std::size_t parts = bytes == 0 ? 1 : (bytes + m.part_bytes - 1) / m.part_bytes;
  m.parts.reserve(parts);
  try {
    const sigpipe_guard no_sigpipe;
    for (std::size_t i = 0; i < parts; ++i) {
      const std::size_t at = i * m.part_bytes;
      const std::size_t n = std::min(m.part_bytes, bytes - at);
      gloo_post_part(st, m, p + at, n, gloo_slot(c, sp, tag, n), is_send);
    }
  } catch (const std::exception& e) {
    gloo_lost(st, m, c, e.what());
  }
  return m;
}

/// Receives a collective message from `peer` and reduces it into `inout` (`inout = inout op
/// message`) part by part as the parts arrive, at gloo_wait.
[[nodiscard]] inline gloo_message gloo_post_reduce(const std::shared_ptr<gloo_state>& s, int peer,
                                                   std::span<std::byte> inout, const call& c) {
  // A single copy reads chunk by chunk into a chunk's staging; TCP parts land in a whole one.
  const bool single = gloo_single_copy_to(*s, peer, space::collective);
  std::vector<std::byte> staging =
      s->take_staging(single ? std::min(inout.size(), gloo_single_copy_chunk) : inout.size());
  gloo_message m = gloo_post(s, peer, staging.data(), inout.size(), c, space::collective, 0, false);
  m.staging = std::move(staging);
  m.reduce_into = inout.data();
  return m;
}

/// Keeps a buffer whose operation completed for a few operations more: Gloo's loop thread may
/// still hold it for a moment after the wait returns (see gloo_state::retired).
inline void gloo_retire(gloo_state& st, std::unique_ptr<::gloo::transport::UnboundBuffer>&& b) {
  st.retired.push_back(std::move(b));
  if (st.retired.size() > 64) st.retired.pop_front();
}

/// Waits in slices for one Gloo send or receive of `m` (see gloo_wait).
inline void gloo_wait_buffer(gloo_state& st, gloo_message& m, ::gloo::transport::UnboundBuffer& b,
                             bool is_send, const call& c, clock::time_point deadline) {
  const auto wait_until = [&](clock::time_point due) {
    constexpr auto far = std::chrono::hours(24 * 365);
    try {
      st.waker.arm(&b, is_send, std::min(deadline, due));
      const bool done = is_send ? b.waitSend(nullptr, far) : b.waitRecv(nullptr, far);
      st.waker.disarm();
      return done;
    } catch (const std::exception& e) {
      st.waker.disarm();
      gloo_lost(st, m, c, e.what());
    }
  };
  for (;;) {
    if (wait_until(clock::now() + std::chrono::milliseconds(100))) return;
    // A peer that sent its last message and exited closes its connection right after: a
    // slice cut just as the message completed leaves the completion with Gloo (a cut wait
    // returns false even then), so look once more before poll calls the peer lost. A
    // finished message returns at once; one that cannot finish fails or is cut at the
    // waker's next tick.
    if (gloo_connection_closed(st, m.peer) && wait_until(clock::now())) return;
    gloo_poll(st, c, deadline, m.peer);
    gloo_cma_progress(st, m, c);  // descriptors waiting for room in a peer's inbox
  }
}

/// Finishes the part of `m` that just completed: reduces it where `m` reduces, and retires its
/// buffer; once every part is, gives the staging back.
inline void gloo_part_done(gloo_state& st, gloo_message& m, const call& c) {
  if (m.reduce_into != nullptr) {
    const std::size_t at = m.done * m.part_bytes;
    const std::size_t n = std::min(m.part_bytes, m.total - at);
    c.red(m.reduce_into + at, m.reduce_into + at, m.staging.data() + at, n / c.elem_size);
  }
  gloo_retire(st, std::move(m.parts[m.done]));
  if (++m.done < m.parts.size()) return;
  m.parts.clear();
  m.done = 0;
  if (!m.staging.empty()) st.give_staging(std::move(m.staging));
}

/// Whether every part of `m` is done (as after gloo_wait), without waiting for one that is
/// not: the waker cuts each wait at once. A part that completes just as the cut comes reads as
/// not done; the next test finds it. Single copies are only ever waited for.
[[nodiscard]] inline bool gloo_test(gloo_state& st, gloo_message& m, const call& c) {
  if (m.cma_open) return false;
  constexpr auto far = std::chrono::hours(24 * 365);
  while (m.pending()) {
    auto& b = *m.parts[m.done];
    bool done = false;
    try {
      st.waker.kick(&b, m.is_send);
      done = m.is_send ? b.waitSend(nullptr, far) : b.waitRecv(nullptr, far);
      st.waker.disarm();
    } catch (const std::exception& e) {
      st.waker.disarm();
      gloo_lost(st, m, c, e.what());
    }
    if (!done) return false;
    gloo_part_done(st, m, c);
  }
  return true;
}

/// Waits for `m` until `deadline`. Wakes every 100-200 ms to look for other ranks' aborts
/// and mismatched calls; a closed connection raises errc::peer_lost naming the peer.
inline void gloo_wait(gloo_state& st, gloo_message& m, const call& c, clock::time_point deadline) {
  if (m.cma_open) {
    if (m.is_send) {
      gloo_wait_acknowledged(st, m, c, deadline);  // the receiver has read the bytes
      cma_ack_words::instance().give(std::exchange(m.ack, nullptr));
    } else {
      gloo_wait_arrival(st, m, c, deadline);
      gloo_read_single_copy(st, m, c);
    }
    m.cma_open = false;
  }
  while (m.pending()) {
    gloo_wait_buffer(st, m, *m.parts[m.done], m.is_send, c, deadline);
    gloo_part_done(st, m, c);
  }
  if (!m.staging.empty()) st.give_staging(std::move(m.staging));  // a message of no parts
}

}  // namespace tutti::inline v0::detail

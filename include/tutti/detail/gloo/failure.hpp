#pragma once
/// \file
/// tutti::gloo's failure protocol: a rank that raises records why in the store (an abort
/// record, detail/gloo_support.hpp) and closes all its connections, so every other rank
/// raises too, promptly, with the original cause; a peer whose connection closes with no
/// record behind it died (errc::peer_lost). Here: reading and writing the records, aborting
/// the world, telling closed connections (the sentinels), and raising what they mean.

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <thread>

#include "tutti/core/error.hpp"
#include "tutti/detail/call.hpp"
#include "tutti/detail/gloo/state.hpp"
#include "tutti/detail/gloo_support.hpp"
#include "tutti/detail/proc_state.hpp"

namespace tutti::inline v0::detail {

/// "" if the store answers (a missing key is an answer), else "; the store does not answer
/// either (why)".
[[nodiscard]] inline std::string gloo_store_silence(gloo_state& st) {
  try {
    (void)st.store->get_string(st.prefix + "abort", std::chrono::milliseconds(0));
  } catch (const error& e) {
    if (e.kind() != errc::timeout)
      return "; the store does not answer either (" + std::string(e.what()) + ")";
  } catch (...) {
    // an answer of some kind: the store is up
  }
  return {};
}

/// The abort record in the store, if some rank left one.
[[nodiscard]] inline std::optional<gloo_abort_record> gloo_recorded_abort(gloo_state& st) noexcept {
  try {
    const std::string v = st.store->get_string(st.prefix + "abort", std::chrono::milliseconds(0));
    return gloo_abort_record::decode(v);
  } catch (...) {
    return std::nullopt;  // no record, or the store is gone with its rank
  }
}

/// Records why (unless `record` is false: the reason came from the store) and closes every
/// connection of this rank, so ranks waiting on it raise at once instead of at their
/// deadlines. Gloo has no call for this in this version; a receive that times out makes it
/// close the context's connections, so this posts one that cannot complete and lets it.
inline void gloo_abort_world(gloo_state& st, const gloo_abort_record& why,
                             bool record = true) noexcept {
  if (st.aborted) return;
  st.aborted = true;
  if (record) {
    try {
      st.store->set_string(st.prefix + "abort", why.encode());
    } catch (...) {
      // the store went away: closing the connections still tells the peers
    }
  }
  if (st.size == 1 || !st.ctx) return;
  for (int q = 0; q < st.size; ++q) {
    if (q == st.rank) continue;
    bool posted = false;
    try {
      auto b = st.ctx->createUnboundBuffer(&st.dummy, 0);
      b->recv(q, gloo_p2p_prefix | gloo_slot_mask, 0, 0);
      posted = true;
      b->waitRecv(nullptr, std::chrono::milliseconds(1));
    } catch (...) {
      // Posting fails at once on a pair that failed already (try the next); the wait
      // times out and closes every connection.
    }
    if (posted) break;
  }
  // Gloo leaves a send already on the wire to a dead peer waiting: fail every buffer.
  st.buffers->fail(why.what);
}

/// Whether Gloo has seen the connection to `peer` close: its sentinel receive (which never
/// completes otherwise) has failed. Does not block: the wait is aborted before it starts.
[[nodiscard]] inline bool gloo_connection_closed(gloo_state& st, int peer) noexcept {
  if (peer < 0 || static_cast<std::size_t>(peer) >= st.sentinels.size()) return false;
  auto& b = st.sentinels[static_cast<std::size_t>(peer)];
  if (!b) return true;  // failed before
  try {
    b->abortWaitRecv();
    (void)b->waitRecv(nullptr, std::chrono::hours(1));
    return false;
  } catch (...) {
    return true;
  }
}

/// A peer whose connection Gloo has seen close (its sentinel receive failed), else -1.
[[nodiscard]] inline int gloo_dead_peer(gloo_state& st) noexcept {
  for (int q = 0; q < st.size; ++q)
    if (q != st.rank && gloo_connection_closed(st, q)) return q;
  return -1;
}

/// Raises the error another rank recorded when it aborted the world (after closing this
/// rank's connections too, so the ranks waiting on it learn at once).
[[noreturn]] inline void gloo_raise_recorded(gloo_state& st, const call& c,
                                             const gloo_abort_record& rec) {
  gloo_abort_world(st, rec, false);
  // `subject` is the writer's other side; on that side it is this rank: name the writer.
  int peer = rec.subject == st.rank ? rec.writer : rec.subject;
  // A mismatch is between the writer and the subject, one of whom may have made the same call
  // as this rank: name the one whose call (its record in the store) differs from this rank's.
  if (rec.code == errc::mismatch && c.compared())
    for (const int q : {rec.subject, rec.writer}) {
      if (q < 0 || q == st.rank || q >= st.size) continue;
      try {
        const auto theirs = gloo_parse_call(st.store->get_string(
            st.prefix + "call/" + std::to_string(q), std::chrono::milliseconds(0)));
        if (theirs && theirs->first == c.seq && !(theirs->second == c.fp)) {
          peer = q;
          break;
        }
      } catch (const error&) {  // no record, or no store: keep the writer's view
      }
    }
  throw error(rec.code, c.name_str(), c.seq, st.rank, peer,
              "rank " + std::to_string(rec.writer) + " reported: " + rec.what);
}

[[noreturn]] inline void gloo_raise_aborted(gloo_state& st, const call& c, int peer) {
  if (auto rec = gloo_recorded_abort(st))
    throw error(
        errc::aborted, c.name_str(), c.seq, st.rank, rec->subject,
        "the world was aborted: rank " + std::to_string(rec->writer) + " reported: " + rec->what);
  throw error(errc::aborted, c.name_str(), c.seq, st.rank, peer,
              "this rank's connections were closed by an earlier error");
}

/// How long a closed connection with no abort record behind it waits for one. Gloo's own
/// timeout closes a rank's connections a moment before tutti records why (the record follows
/// once the exception reaches tutti, later on a busy machine): a peer that timed out is not
/// dead, and its record names the rank that stopped.
inline constexpr std::chrono::milliseconds gloo_record_grace{500};

/// Whether `peer`'s process (-1: any peer's) is known to have ended (a peer on this machine,
/// in this PID namespace: gloo_state::peer_pid); false where it is not known.
[[nodiscard]] inline bool gloo_peer_gone(const gloo_state& st, int peer) noexcept {
  if (peer < 0) {
    for (int q = 0; q < static_cast<int>(st.peer_pid.size()); ++q)
      if (gloo_peer_gone(st, q)) return true;
    return false;
  }
  return static_cast<std::size_t>(peer) < st.peer_pid.size() &&
         process_gone(st.peer_pid[static_cast<std::size_t>(peer)]);
}

/// Another rank's abort record, waiting up to gloo_record_grace for one to appear unless
/// `peer` is known gone; nullopt if none came.
[[nodiscard]] inline std::optional<gloo_abort_record> gloo_await_record(gloo_state& st, int peer) {
  const auto until = clock::now() + gloo_record_grace;
  for (;;) {
    if (auto rec = gloo_recorded_abort(st); rec && rec->writer != st.rank) return rec;
    if (clock::now() >= until || gloo_peer_gone(st, peer)) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

/// A Gloo call failed or a connection closed while talking to `peer` (-1: unknown). If some
/// rank aborted the world, raises its reason (waiting gloo_record_grace for one, unless the
/// peer is known gone); else the peer is gone: errc::peer_lost.
[[noreturn]] inline void gloo_lost(gloo_state& st, const call& c, int peer,
                                   const std::string& gloo_what) {
  const auto rec = st.aborted ? gloo_recorded_abort(st) : gloo_await_record(st, peer);
  if (rec && rec->writer != st.rank) {
    gloo_raise_recorded(st, c, *rec);
  } else if (rec && st.aborted && rec->code == errc::peer_lost) {
    // This rank's native watch saw the peer go and closed the connections.
    throw error(errc::peer_lost, c.name_str(), c.seq, st.rank, rec->subject, rec->what);
  }
  if (st.aborted) gloo_raise_aborted(st, c, peer);
  const std::string who = peer >= 0 ? "rank " + std::to_string(peer) : "a peer";
  // With the store gone too (a tcp:// store dies with its rank), no abort record can say
  // why the peer left: it may have been failing because the store's host died.
  const std::string text =
      who + " closed its connection (its process exited or was killed): " + gloo_what +
      gloo_store_silence(st);
  gloo_abort_world(st, {errc::peer_lost, st.rank, peer, text});
  throw error(errc::peer_lost, c.name_str(), c.seq, st.rank, peer, text);
}

}  // namespace tutti::inline v0::detail

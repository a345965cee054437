#pragma once
/// \file
/// tutti::gloo's liveness: every rank beats in the store while it waits, so that a timeout can
/// name the rank that stopped (a stopped process, by /proc, or a beat standing still); the
/// watch the waker runs while Gloo runs a collective of its own; and the poll before every
/// further slice of a slow wait (another rank's abort, a mismatched call, the deadline).

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "tutti/core/error.hpp"
#include "tutti/detail/board.hpp"
#include "tutti/detail/call.hpp"
#include "tutti/detail/gloo/failure.hpp"
#include "tutti/detail/gloo/state.hpp"
#include "tutti/detail/gloo_support.hpp"
#include "tutti/detail/proc_state.hpp"
#include "tutti/detail/wait.hpp"

namespace tutti::inline v0::detail {

/// How long a peer's beat must stand still before a timeout names it as the rank that
/// stopped: a few slices of a waiting rank's polls.
inline constexpr std::chrono::milliseconds gloo_stall_window{250};

/// Every peer's beat key ("" where there is none yet, or the store does not answer).
[[nodiscard]] inline std::vector<std::string> gloo_read_beats(gloo_state& st) {
  std::vector<std::string> v(static_cast<std::size_t>(st.size));
  for (int q = 0; q < st.size; ++q) {
    if (q == st.rank) continue;
    try {
      v[static_cast<std::size_t>(q)] = st.store->get_string(st.prefix + "beat/" + std::to_string(q),
                                                            std::chrono::milliseconds(0));
    } catch (...) {
      // no beat yet, or no store: reads as standing still
    }
  }
  return v;
}

/// Beats (once per poll, so at most every slice of a slow wait; never on the fast path) and,
/// at the first poll of a slow wait, notes every peer's beat.
inline void gloo_watch_beats(gloo_state& st, clock::time_point now) {
  try {
    st.store->set_string(st.prefix + "beat/" + std::to_string(st.rank), std::to_string(++st.beats));
  } catch (...) {
    // the store went away: peers will see this rank as standing still
  }
  if (now - st.last_poll > gloo_stall_window) {
    st.beats_seen = gloo_read_beats(st);
    st.beats_since = now;
  }
  st.last_poll = now;
}

/// The lowest peer, open to this rank, whose beat has not moved for at least stall_window
/// since this wait began to watch; -1 if none.
[[nodiscard]] inline int gloo_stalled(gloo_state& st, clock::time_point now) {
  if (now - st.beats_since < gloo_stall_window ||
      st.beats_seen.size() != static_cast<std::size_t>(st.size))
    return -1;
  const auto v = gloo_read_beats(st);
  for (int q = 0; q < st.size; ++q)
    if (q != st.rank &&
        v[static_cast<std::size_t>(q)] == st.beats_seen[static_cast<std::size_t>(q)] &&
        !gloo_connection_closed(st, q))
      return q;
  return -1;
}

/// A peer whose process is stopped (SIGSTOP, a debugger), by /proc: certain, where a beat
/// standing still only suggests it (on a busy machine a live rank may not run for a while
/// either). Only peers on this host whose pid the single-copy probe verified; -1 if none.
[[nodiscard]] inline int gloo_stopped_peer(const gloo_state& st) noexcept {
  const auto& pids = st.cma_pid;
  for (std::size_t q = 0; q < pids.size(); ++q)
    if (static_cast<int>(q) != st.rank && pids[q] != 0 && process_stopped(pids[q]))
      return static_cast<int>(q);
  return -1;
}

/// A tick of the watch during a Gloo collective that lasts: this rank beats (as its slow
/// waits do) and notes when each peer's beat last moved, so that a timeout inside Gloo can
/// name the rank that stopped.
inline void gloo_native_beat(gloo_state& st) noexcept {
  try {
    const auto now = std::chrono::steady_clock::now();
    st.store->set_string(st.prefix + "beat/" + std::to_string(st.rank), std::to_string(++st.beats));
    const auto n = static_cast<std::size_t>(st.size);
    const bool fresh = st.native_watched != st.native_call;
    st.native_watched = st.native_call;
    st.native_beats.resize(n);
    st.native_moved.resize(n);
    for (int q = 0; q < st.size; ++q) {
      if (q == st.rank) continue;
      std::string v;
      try {
        v = st.store->get_string(st.prefix + "beat/" + std::to_string(q),
                                 std::chrono::milliseconds(0));
      } catch (...) {
        // no beat yet: reads as standing still
      }
      const auto i = static_cast<std::size_t>(q);
      if (fresh || v != st.native_beats[i]) {
        st.native_beats[i] = std::move(v);
        st.native_moved[i] = now;
      }
    }
  } catch (...) {
    // the store went away: the timeout names no one
  }
}

/// After a Gloo collective timed out: the peer whose beat stood still longest during it,
/// for at least stall_window; -1 if none (or the call was too short to watch).
[[nodiscard]] inline int gloo_native_stalled(gloo_state& st) {
  if (st.native_watched != st.native_call ||
      st.native_moved.size() != static_cast<std::size_t>(st.size))
    return -1;
  const auto now = std::chrono::steady_clock::now();
  int who = -1;
  for (int q = 0; q < st.size; ++q) {
    // Not connection_closed: Gloo's own timeout has just closed every connection of this rank.
    if (q == st.rank) continue;
    const auto since = st.native_moved[static_cast<std::size_t>(q)];
    if (now - since >= gloo_stall_window &&
        (who < 0 || since < st.native_moved[static_cast<std::size_t>(who)]))
      who = q;
  }
  return who;
}

/// The waker's watch while Gloo runs one of its collectives (set once the world is connected):
/// a peer whose connection closed aborts the world (closing this rank's connections too), so
/// the collective fails at once. A rank that aborts records why before it closes its
/// connections: a closed connection with a record behind it is that rank's abort (its cause
/// stands), without one a death.
inline void gloo_native_watch(gloo_state& st) {
  if (st.aborted) return;
  if (auto rec = gloo_recorded_abort(st); rec && rec->writer != st.rank) {
    gloo_abort_world(st, *rec, false);  // another rank failed: so does this call, at once
    return;
  }
  gloo_native_beat(st);
  if (st.suspect_call != st.native_call) {
    st.suspect_call = st.native_call;
    st.suspect = -1;
  }
  for (int q = 0; q < st.size; ++q) {
    if (q == st.rank || !gloo_connection_closed(st, q)) continue;
    if (auto rec = gloo_recorded_abort(st)) {
      gloo_abort_world(st, *rec, false);
    } else if (st.suspect != q) {
      // Gloo's own timeout closes a rank's connections a moment before tutti records
      // why: give q gloo_record_grace to leave its record before calling it dead.
      st.suspect = q;
      st.suspect_since = clock::now();
    } else if (clock::now() - st.suspect_since < gloo_record_grace && !gloo_peer_gone(st, q)) {
      return;
    } else {
      gloo_abort_world(st, {errc::peer_lost, st.rank, q,
                            "rank " + std::to_string(q) +
                                " closed its connection (its process exited or was killed)"});
    }
    return;
  }
}

/// Before every further slice of a slow wait: another rank's abort, a mismatched call, the
/// deadline. A timeout names the peer whose beat stood still (stopped, or computing outside
/// tutti for longer than the timeout) whoever this rank waited on, in the abort record too.
inline void gloo_poll(gloo_state& st, const call& c, clock::time_point deadline, int peer,
                      bool look_at_peer = true) {
  gloo_watch_beats(st, clock::now());
  if (auto rec = gloo_recorded_abort(st); rec && rec->writer != st.rank)
    gloo_raise_recorded(st, c, *rec);
  // Gloo wakes a receive whose connection closed, not a send waiting for the peer to post
  // its receive: ask the sentinel (unless the caller does, as cma_wait).
  if (look_at_peer && peer >= 0 && gloo_connection_closed(st, peer))
    gloo_lost(st, c, peer, "its connection closed while this rank waited to send to it");
  const bool collective = c.compared();
  std::string theirs_text;
  if (collective) {
    try {
      if (st.published_seq != c.seq) {
        st.store->set_string(st.prefix + "call/" + std::to_string(st.rank), gloo_call_record(c));
        st.published_seq = c.seq;
      }
      const std::string v = st.store->get_string(st.prefix + "call/" + std::to_string(peer),
                                                 std::chrono::milliseconds(0));
      if (auto theirs = gloo_parse_call(v)) {
        if (theirs->first == c.seq && !(theirs->second == c.fp)) {
          const std::string what = mismatch_text(st.rank, c.fp, peer, theirs->second);
          gloo_abort_world(st, {errc::mismatch, st.rank, peer, what});
          throw error(errc::mismatch, c.name_str(), c.seq, st.rank, peer, what);
        }
        theirs_text = " (rank " + std::to_string(peer) + " was last seen in call #" +
                      std::to_string(theirs->first) + " " + theirs->second.describe() + ")";
      }
    } catch (const error& e) {
      if (e.code() == errc::mismatch) throw;
      // No record yet, or the store is unreachable: the deadline still holds.
    }
  }
  if (const auto now = clock::now(); now >= deadline) {
    std::string text = (peer >= 0 ? "timed out waiting for rank " + std::to_string(peer)
                                  : std::string("timed out waiting for the other ranks")) +
                       theirs_text;
    int blame = peer;
    if (const int stopped = gloo_stopped_peer(st); stopped >= 0) {
      text += ": rank " + std::to_string(stopped) + " is stopped (SIGSTOP or a debugger)";
      blame = stopped;
    } else if (const int still = gloo_stalled(st, now); still >= 0) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%.2f",
                    std::chrono::duration<double>(now - st.beats_since).count());
      text += ": rank " + std::to_string(still) + " made no progress for " + secs +
              " s (busy outside tutti?)";
      blame = still;
    }
    gloo_abort_world(
        st, {errc::timeout, st.rank, blame, "rank " + std::to_string(st.rank) + " " + text});
    throw error(errc::timeout, c.name_str(), c.seq, st.rank, blame, text);
  }
}

}  // namespace tutti::inline v0::detail

#pragma once
/// \file
/// tutti::shm's failure watch: every rank beats in its block of the segment while it waits, so
/// that a timeout can name the rank that stopped (a stopped process, by /proc, or a beat
/// standing still); raising the world's abort record, naming the cause; and the poll before
/// every sleep of a slow wait (an abort record, a mismatched call on a peer's board, a peer
/// that died or closed, the deadline).

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "tutti/core/error.hpp"
#include "tutti/detail/board.hpp"
#include "tutti/detail/call.hpp"
#include "tutti/detail/shm_layout.hpp"
#include "tutti/detail/shm_state.hpp"
#include "tutti/detail/wait.hpp"

namespace tutti::inline v0::detail {

/// Whether rank `q` closed its communicator.
[[nodiscard]] inline bool shm_closed(const shm_state& st, int q) noexcept {
  return st.view.block(q).state.load(std::memory_order_acquire) ==
         static_cast<std::uint32_t>(shm_rank_state::closed);
}

/// Whether rank `q`'s process is gone without closing its communicator. Gone first, then
/// closed: a rank closes before it exits, so once its process is seen gone its mark is final.
/// The other order races with a survivor that closes and exits between the two looks (a
/// slower survivor then named it as the dead rank instead of the one that died: seen once in
/// faults.kill_shm under ASan).
[[nodiscard]] inline bool shm_died(const shm_state& st, int q) noexcept {
  return st.watch.gone(q) && !shm_closed(st, q);
}

/// How long a peer's beat must stand still, while this rank watches it, before a failure
/// names that peer as the one that stopped: several sleep slices of a waiting rank.
inline constexpr std::chrono::milliseconds shm_stall_window{100};

/// Beats for this rank (at most every millisecond) and notes which peers' beats moved. A
/// gap since the last poll means a new wait: what was seen before says nothing about now.
inline void shm_watch_beats(shm_state& st, clock::time_point now) {
  if (now - st.last_beat >= std::chrono::milliseconds(1)) {
    st.view.block(st.rank).beat.store(++st.beats, std::memory_order_relaxed);
    st.last_beat = now;
  }
  const bool fresh = now - st.last_poll > shm_stall_window;
  st.last_poll = now;
  st.seen.resize(static_cast<std::size_t>(st.size));
  for (int q = 0; q < st.size; ++q) {
    auto& s = st.seen[static_cast<std::size_t>(q)];
    const std::uint64_t v = st.view.block(q).beat.load(std::memory_order_relaxed);
    if (fresh || v != s.value) s = {v, now};
  }
}

/// The open peer to blame at a timeout, and how long its beat stood still while this rank
/// watched: a peer whose process is stopped (SIGSTOP, a debugger: /proc says so) if there is
/// one — certain, where a beat standing still only suggests it, for on a busy machine a live
/// rank may not run for a while either —, else the peer whose beat stood still longest, at
/// least shm_stall_window (a rank computing outside tutti). The longest still beat and then the
/// lowest rank win among equals; -1 if no peer qualifies.
[[nodiscard]] inline int shm_stalled(const shm_state& st, clock::time_point now,
                                     clock::duration& still, bool& is_stopped) {
  int who = -1;
  still = shm_stall_window;
  is_stopped = false;
  for (int q = 0; q < st.size && static_cast<std::size_t>(q) < st.seen.size(); ++q) {
    if (q == st.rank || shm_closed(st, q)) continue;
    const auto d = now - st.seen[static_cast<std::size_t>(q)].since;
    const bool stopped = st.watch.stopped(q);
    if (stopped && !is_stopped) {  // the first stopped peer beats every running one
      who = q;
      still = d;
      is_stopped = true;
    } else if (stopped == is_stopped && (d > still || (who < 0 && d == still))) {
      who = q;
      still = d;
    }
  }
  return who;
}

/// Raises peer_lost: rank `q` died. Records it first, so that the others name `q` too: a
/// survivor that raises this and exits without closing its communicator would otherwise be
/// the dead rank a slower survivor finds first (the lowest gone rank).
[[noreturn]] inline void shm_raise_died(shm_state& st, const call& c, int q) {
  const std::string text = "rank " + std::to_string(q) + " (pid " +
                           std::to_string(st.view.block(q).pid.load(std::memory_order_relaxed)) +
                           ") died without closing its communicator";
  st.view.abort(errc::peer_lost, text, q);
  throw error(errc::peer_lost, c.name_str(), c.seq, st.rank, q, text);
}

/// Raises the world's abort record in call c. An abort of kind `aborted` is a consequence (a
/// rank abandoned a message while it unwound from an error, typically a peer's death): a dead
/// peer is the cause to name. For a mismatch, a rank whose call differs from this rank's if
/// one is on the board; else the rank the record blames (unless that is this rank), else
/// `peer`.
[[noreturn]] inline void shm_raise_abort(shm_state& st, const call& c, int peer) {
  auto [code, what, blame] = st.view.abort_reason();
  if (code == errc::aborted)
    for (int q = 0; q < st.size; ++q)
      if (q != st.rank && shm_died(st, q)) shm_raise_died(st, c, q);
  if (blame >= 0 && blame != st.rank) peer = blame;
  throw error(code, c.name_str(), c.seq, st.rank,
              code == errc::mismatch
                  ? disagreeing_rank(c, st.rank, st.size, peer,
                                     [&](int q) -> const auto& { return st.view.block(q).board; })
                  : peer,
              what);
}

/// Runs before every sleep: abort record, peers' boards, peers' processes, the deadline.
/// `ready` is what the caller waits for: a peer may write its last message and exit between
/// the caller's last look and this one, so a lost peer is reported only if it still is not.
/// A timeout names the peer whose beat stood still (stopped, or computing outside tutti for
/// longer than the timeout) whoever this rank waited on, and records it for the others.
template <class Ready>
void shm_poll(shm_state& st, const call& c, clock::time_point deadline, int peer, Ready&& ready) {
  const auto now = clock::now();
  shm_watch_beats(st, now);
  if (st.view.aborted()) shm_raise_abort(st, c, peer);
  for (int q = 0; q < st.size; ++q) {
    if (q == st.rank) continue;
    if (c.compared()) {
      auto theirs = st.view.block(q).board.lookup(c.seq);
      if (theirs && !(*theirs == c.fp)) {
        const std::string what = mismatch_text(st.rank, c.fp, q, *theirs);
        st.view.abort(errc::mismatch, what, q);
        throw error(errc::mismatch, c.name_str(), c.seq, st.rank, q, what);
      }
    }
    if (shm_died(st, q) && !ready()) shm_raise_died(st, c, q);
  }
  // Only then ranks that closed cleanly (say, after raising this same death themselves):
  // a death is the cause worth naming.
  for (int q = 0; q < st.size; ++q)
    if (q != st.rank && (peer < 0 || peer == q) && shm_closed(st, q) && !ready()) {
      // A rank records its cause (a timeout naming the stopped rank, say) before it closes:
      // that record may have landed between the look above and this close. The close's
      // release orders it, so a second look finds it, and its cause wins over the close.
      if (st.view.aborted()) shm_raise_abort(st, c, peer);
      throw error(
          errc::peer_lost, c.name_str(), c.seq, st.rank, q,
          "rank " + std::to_string(q) + " closed its communicator without making this call");
    }
  if (now < deadline) return;
  std::string text = peer >= 0 ? "timed out waiting for rank " + std::to_string(peer)
                               : "timed out waiting for the other ranks";
  clock::duration still{};
  bool is_stopped = false;
  const int stopped = shm_stalled(st, now, still, is_stopped);
  if (stopped < 0) throw error(errc::timeout, c.name_str(), c.seq, st.rank, peer, text);
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.2f", std::chrono::duration<double>(still).count());
  text += ": rank " + std::to_string(stopped) +
          (is_stopped ? " is stopped (SIGSTOP or a debugger); its beat stood still for "
                      : " made no progress for ") +
          secs + " s" + (is_stopped ? "" : " (busy outside tutti?)");
  // The others wait on the same stopped rank: tell them now, naming it, rather than let each
  // time out on whichever neighbour it waits on (or see this rank close first).
  st.view.abort(errc::timeout, "rank " + std::to_string(st.rank) + " " + text, stopped);
  throw error(errc::timeout, c.name_str(), c.seq, st.rank, stopped, text);
}

}  // namespace tutti::inline v0::detail

#pragma once
/// \file
/// tutti::shm's flags in each rank's block of the segment: the segment barrier (a generation
/// and the call each rank arrived from) and the line exchange (a small all_reduce's payloads in
/// flagged cache lines). Both compare the ranks' calls and raise a mismatch naming the rank
/// whose call differs.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "tutti/core/error.hpp"
#include "tutti/detail/board.hpp"
#include "tutti/detail/call.hpp"
#include "tutti/detail/shm_failure.hpp"
#include "tutti/detail/shm_layout.hpp"
#include "tutti/detail/shm_state.hpp"
#include "tutti/detail/wait.hpp"

namespace tutti::inline v0::detail {

/// Raises the mismatch between this rank's call `c` and rank q's call #`seq` with fingerprint
/// `fp`, which q `how` ("reached the barrier from", "sent from"), after aborting the world.
[[noreturn]] inline void shm_raise_mismatch(shm_state& st, const call& c, int q, std::uint64_t seq,
                                            const fingerprint& fp, const char* how) {
  const std::string what = seq == c.seq
                               ? mismatch_text(st.rank, c.fp, q, fp)
                               : "mismatched collective: rank " + std::to_string(st.rank) +
                                     " is in call #" + std::to_string(c.seq) + " " +
                                     c.fp.describe() + " but rank " + std::to_string(q) + " " +
                                     how + " call #" + std::to_string(seq) + " " + fp.describe();
  st.view.abort(errc::mismatch, what, q);
  throw error(errc::mismatch, c.name_str(), c.seq, st.rank, q, what);
}

/// Returns once every rank arrived; raises tutti::error(errc::mismatch) if any rank arrived
/// from a different call.
inline void shm_segment_barrier(shm_state& st, const call& c, clock::time_point deadline) {
  const std::uint64_t g = ++st.barrier_gen;
  auto& mine = st.view.block(st.rank).barrier;
  auto& rec = mine.rec[g % 2];
  rec.seq.store(c.seq, std::memory_order_relaxed);
  rec.head.store(c.fp.packed_head(), std::memory_order_relaxed);
  rec.count.store(c.fp.count, std::memory_order_relaxed);
  mine.gen.store(g, std::memory_order_release);
  for (int q = 0; q < st.size; ++q)
    if (q != st.rank) st.view.block(q).bell.ring(true);
  int next = 0;  // peers below `next` have arrived
  auto arrived = [&] {
    for (; next < st.size; ++next)
      if (next != st.rank && st.view.block(next).barrier.gen.load(std::memory_order_acquire) < g)
        return false;
    return true;
  };
  if (!arrived())
    wait_on(
        st.view.block(st.rank).bell, true, arrived, [&] { shm_poll(st, c, deadline, -1, arrived); },
        st.tuning);
  for (int q = 0; q < st.size; ++q) {
    if (q == st.rank) continue;
    const auto& theirs = st.view.block(q).barrier.rec[g % 2];
    const std::uint64_t seq = theirs.seq.load(std::memory_order_relaxed);
    const auto fp = fingerprint::unpack(theirs.head.load(std::memory_order_relaxed),
                                        theirs.count.load(std::memory_order_relaxed));
    if (seq != c.seq || !(fp == c.fp))
      shm_raise_mismatch(st, c, q, seq, fp, "reached the barrier from");
  }
}

/// Publishes this rank's `n` bytes (at most shm_line_capacity) for call `c` in its next half
/// of lines.
inline void shm_lines_put(shm_state& st, const call& c, const std::byte* data, std::size_t n) {
  const std::uint64_t g = ++st.line_gen;
  const std::size_t h = g % 2;
  auto* first = reinterpret_cast<shm_first_line*>(st.view.line(st.rank, h, 0));
  first->seq = c.seq;
  first->fp_head = c.fp.packed_head();
  first->fp_count = c.fp.count;
  std::size_t at = std::min(n, shm_first_line::payload);
  if (at != 0) std::memcpy(first->data, data, at);
  first->tag.store(g, std::memory_order_release);
  for (std::size_t i = 1; at < n; ++i) {
    auto* line = reinterpret_cast<shm_line*>(st.view.line(st.rank, h, i));
    const std::size_t k = std::min(n - at, shm_line::payload);
    std::memcpy(line->data, data + at, k);
    line->tag.store(g, std::memory_order_release);
    at += k;
  }
  for (int q = 0; q < st.size; ++q)
    if (q != st.rank) st.view.block(q).bell.ring(true);
}

/// Waits for rank q's `n` bytes of the call this rank last published and copies them out.
inline void shm_lines_get(shm_state& st, int q, const call& c, std::byte* out, std::size_t n,
                          clock::time_point deadline) {
  const std::uint64_t g = st.line_gen;
  const std::size_t h = g % 2;
  auto await = [&](const std::atomic<std::uint64_t>& tag) {
    auto ready = [&] { return tag.load(std::memory_order_acquire) == g; };
    if (!ready())
      wait_on(
          st.view.block(st.rank).bell, true, ready, [&] { shm_poll(st, c, deadline, q, ready); },
          st.tuning);
  };
  // The writer stores the lines in order, each tag after its payload: once the last line's
  // tag shows this round, every line before it is complete too (release/acquire). Spinning
  // on that one line keeps this rank from pulling lines away from the writer as it fills them.
  const std::size_t extra =
      n > shm_first_line::payload
          ? (n - shm_first_line::payload + shm_line::payload - 1) / shm_line::payload
          : 0;
  const auto* first = reinterpret_cast<const shm_first_line*>(st.view.line(q, h, 0));
  if (extra == 0)
    await(first->tag);
  else
    await(reinterpret_cast<const shm_line*>(st.view.line(q, h, extra))->tag);
  const auto fp = fingerprint::unpack(first->fp_head, first->fp_count);
  if (first->tag.load(std::memory_order_acquire) != g || first->seq != c.seq || !(fp == c.fp))
    shm_raise_mismatch(st, c, q, first->seq, fp, "sent from");
  std::size_t at = std::min(n, shm_first_line::payload);
  if (at != 0) std::memcpy(out, first->data, at);
  for (std::size_t i = 1; at < n; ++i) {
    const auto* line = reinterpret_cast<const shm_line*>(st.view.line(q, h, i));
    const std::size_t k = std::min(n - at, shm_line::payload);
    std::memcpy(out + at, line->data, k);
    at += k;
  }
}

}  // namespace tutti::inline v0::detail

#pragma once
/// \file
/// tutti::shm's single copies, shared by both ends. A user message of at least
/// `shm_single_copy_min` bytes travels as a frame carrying the sender's address; the receiver
/// copies it straight from the sender's memory (process_vm_readv, detail/cma.hpp) and then
/// counts it in the channel's `acked`, which completes the send.
///
/// The sender spends that time waiting for the count. From `shm_share_min` bytes it works
/// instead: the receiver offers the message in chunks of `shm_share_chunk` bytes (its number
/// and destination in the channel's `share` and `share_to`), and both ends claim the next chunk
/// from one counter — the receiver reads its chunks from the sender, the sender writes its
/// chunks into the receiver (process_vm_writev) and counts them in `helped`. The receiver
/// acknowledges once every chunk is in place. One copier is limited by what one core moves;
/// two move up to twice that (bench/RESULTS.md, "isend/irecv from 256 KiB: receiver and sender
/// share the single copy"). A sender that is
/// busy elsewhere claims nothing, and the receiver copies every chunk itself.
///
/// The kernel checks the same permission for writing another process's memory as for reading it
/// (ptrace's PTRACE_MODE_ATTACH), so a sender helps only where its own probe of the receiver
/// read back (the flag on the receiver's channel to it). Should a write fail all the same, the
/// sender says so in `help_failed` and the receiver copies the whole message again.

#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <thread>

#include "tutti/core/options.hpp"
#include "tutti/detail/cma.hpp"
#include "tutti/detail/shm_layout.hpp"
#include "tutti/detail/shm_segment.hpp"
#include "tutti/detail/wait.hpp"

namespace tutti::inline v0::detail {

/// User messages from this size up travel as single copies where the receiver can read the
/// sender's memory. Below it a system call and an acknowledgement cost more than the ring's
/// second copy (bench/compare_p2p.sh).
inline constexpr std::size_t shm_single_copy_min = std::size_t{8} << 10;
/// Single copies from this size up are shared between receiver and sender, in chunks of
/// `shm_share_chunk` bytes.
inline constexpr std::size_t shm_share_chunk = std::size_t{128} << 10;
inline constexpr std::size_t shm_share_min = 2 * shm_share_chunk;

/// Whether this rank shares its single copies (TUTTI_SHM_SHARE, default on; for comparisons).
[[nodiscard]] inline bool shm_share_enabled() { return env_switch_on("TUTTI_SHM_SHARE"); }

/// `share` and `helped` hold a message's number above these bits and a chunk index or count in
/// them.
inline constexpr unsigned shm_share_shift = 24;
inline constexpr std::uint64_t shm_share_mask = (std::uint64_t{1} << shm_share_shift) - 1;

/// One end's part in the single copies of one channel.
struct shm_share_state {
  // receiving: the `helped` value that completes the message being copied (0: none), and the
  // receiver's own outcome so far
  std::uint64_t awaiting = 0;
  std::uint64_t message = 0;
  int error = 0;
  // sending: the message this end last wrote chunks of, and how many
  std::uint64_t helping = 0;
  std::uint64_t written = 0;
};

/// Receiver: copies message number `m` (`n` bytes at `src` in process `pid`) into `dst`. With
/// `shared`, offers it to the sender and copies the chunks it claims first; returns false when
/// the sender still writes some of its own (ask `shm_share_settled` again later), true when the
/// message is in place, with the outcome (0 or an errno) in `st.error`.
[[nodiscard]] inline bool shm_share_read(shm_channel_ctl& ctl, shm_share_state& st, pid_t pid,
                                         std::uint64_t m, std::byte* dst, std::uint64_t src,
                                         std::size_t n, bool shared) noexcept {
  st.error = 0;
  st.message = m;
  if (!shared || n < shm_share_min) {
    st.error = cma_read(pid, dst, src, n);
    return true;
  }
  const std::size_t chunks = (n + shm_share_chunk - 1) / shm_share_chunk;
  ctl.share_to.store(reinterpret_cast<std::uintptr_t>(dst), std::memory_order_relaxed);
  ctl.share.store(m << shm_share_shift, std::memory_order_release);
  std::size_t mine = 0;
  for (;;) {
    const std::uint64_t i = ctl.share.fetch_add(1, std::memory_order_acq_rel) & shm_share_mask;
    if (i >= chunks) break;
    ++mine;
    const std::size_t at = i * shm_share_chunk;
    if (st.error == 0)
      st.error = cma_read(pid, dst + at, src + at, std::min(shm_share_chunk, n - at));
  }
  if (mine == chunks) return true;
  st.awaiting = (m << shm_share_shift) | (chunks - mine);
  return false;
}

/// Receiver: whether the sender has written every chunk it claimed of the message being
/// copied; if a write failed, copies the whole message again itself first.
[[nodiscard]] inline bool shm_share_settled(shm_channel_ctl& ctl, shm_share_state& st, pid_t pid,
                                            std::byte* dst, std::uint64_t src,
                                            std::size_t n) noexcept {
  if (st.awaiting == 0) return true;
  if (ctl.helped.load(std::memory_order_acquire) != st.awaiting) return false;
  st.awaiting = 0;
  if (ctl.help_failed.load(std::memory_order_relaxed) == st.message && st.error == 0)
    st.error = cma_read(pid, dst, src, n);
  return true;
}

/// Receiver: waits until the sender's claimed chunks are written or its process is gone, so that
/// nothing writes into a receive after it is withdrawn. A chunk takes microseconds.
inline void shm_share_settle(shm_channel_ctl& ctl, shm_share_state& st, pid_t pid) noexcept {
  for (int i = 0; st.awaiting != 0 && ctl.helped.load(std::memory_order_acquire) != st.awaiting;
       ++i) {
    if (i < 4096) {
      cpu_relax();
      continue;
    }
    if (!shm_process_alive(pid)) break;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  st.awaiting = 0;
}

/// Sender: while the receiver offers message `m` with chunks unclaimed, and `m` is this end's
/// send of `n` bytes at `src` (`lookup(m)` finds it: a pointer and size, or null), claims and
/// writes chunks of it into the receiver's process `pid`. True if it wrote any (the receiver
/// may be asleep waiting for them).
template <class Lookup>
bool shm_share_help(shm_channel_ctl& ctl, shm_share_state& st, pid_t pid, Lookup lookup) noexcept {
  std::uint64_t w = ctl.share.load(std::memory_order_acquire);
  bool wrote = false;
  for (;;) {
    const std::uint64_t m = w >> shm_share_shift;
    const std::uint64_t i = w & shm_share_mask;
    if (m == 0) return wrote;
    const auto [src, n] = lookup(m);
    if (src == nullptr || i >= (n + shm_share_chunk - 1) / shm_share_chunk) return wrote;
    if (!ctl.share.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel,
                                         std::memory_order_acquire))
      continue;
    // Claimed: the receiver waits for this chunk, so `share_to` stays this message's.
    if (st.helping != m) {
      st.helping = m;
      st.written = 0;
    }
    const std::size_t at = i * shm_share_chunk;
    if (cma_write(pid, src + at, ctl.share_to.load(std::memory_order_relaxed) + at,
                  std::min(shm_share_chunk, n - at)) != 0)
      ctl.help_failed.store(m, std::memory_order_relaxed);
    ctl.helped.store((m << shm_share_shift) | ++st.written, std::memory_order_release);
    wrote = true;
    w = ctl.share.load(std::memory_order_acquire);
  }
}

}  // namespace tutti::inline v0::detail

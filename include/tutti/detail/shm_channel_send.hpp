#pragma once
/// \file
/// The sending side of tutti::shm's channels (detail/shm_channels.hpp): frames written into
/// the outgoing rings (the payload inside the header, after it, or streamed as the ring frees),
/// single copies described by address and completed by the receiver's count, and the chunks
/// of them a waiting sender writes itself (detail/shm_single_copy.hpp).

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "tutti/detail/shm_channel_base.hpp"

namespace tutti::inline v0::detail {

class shm_channel_send : protected shm_channel_base {
 protected:
  using shm_channel_base::shm_channel_base;

  /// Free bytes in the outgoing ring. Signed: after a frame's padding the producer's position
  /// may run up to 63 bytes past a full ring until the consumer skips the same padding.
  [[nodiscard]] std::int64_t room(const peer_state& pr, std::uint64_t tail) const noexcept {
    return static_cast<std::int64_t>(cap_) - static_cast<std::int64_t>(pr.head - tail);
  }

  /// Writes `n` bytes at stream position `pos` of a ring, wrapping at its end.
  void ring_write(std::byte* ring, std::uint64_t pos, const void* src, std::size_t n) const {
    const std::size_t at = pos % cap_;
    const std::size_t first = std::min(n, cap_ - at);
    std::memcpy(ring + at, src, first);
    if (first < n) std::memcpy(ring, static_cast<const std::byte*>(src) + first, n - first);
  }

  /// Publishes a frame header at `pos`: every field, then its stamp (release).
  void put_header(std::byte* ring, std::uint64_t pos, const shm_frame& f) const {
    // The stamp word is only ever stored atomically: the consumer may be loading it already.
    std::memcpy(ring + pos % cap_, &f, offsetof(shm_frame, stamp));
    std::atomic_ref<std::uint64_t>(reinterpret_cast<shm_frame*>(ring + pos % cap_)->stamp)
        .store(pos ^ key_, std::memory_order_release);
  }

  /// Where a send stands after start_send.
  enum class send_step { blocked, done, streaming };

  /// Writes the frame of `op` (the first of `pr`'s sends) at the ring's head, where `fits(n)`
  /// says n bytes fit: a single copy's description (the bytes stay where they are; done once
  /// the receiver has read them, so it waits in `acking`), the payload inside the header or
  /// after it whole (done), or a header whose payload streams after it as the ring frees.
  template <class Fits>
  send_step start_send(space s, shm_channel_ctl& ctl, std::byte* ring, peer_state& pr, shm_op* op,
                       Fits& fits) {
    shm_frame f{.tag = op->tag,
                .bytes = op->bytes,
                .address = shm_frame::streamed,
                .seq = op->seq,
                .fp_head = op->fp.packed_head(),
                .fp_count = op->fp.count,
                .word = 0,
                .stamp = 0};
    const bool single = s == space::p2p && op->bytes >= shm_single_copy_min &&
                        ctl.single_copy.load(std::memory_order_relaxed) != 0;
    if (single) {  // the bytes stay where they are: done once the receiver has read them
      if (!fits(sizeof f)) return send_step::blocked;
      f.address = reinterpret_cast<std::uintptr_t>(op->send_buf);
      put_header(ring, pr.head, f);
      pr.head += sizeof f;
      op->started = true;
      op->moved = op->bytes;
      op->ack = ++pr.described;
      pr.sends.pop_front();
      pr.acking.push_back(op);
      return send_step::done;
    }
    if (op->bytes <= shm_frame::inline_max(s)) {  // in the header itself
      if (!fits(sizeof f)) return send_step::blocked;
      f.address = shm_frame::whole;
      if (op->bytes != 0)
        std::memcpy(reinterpret_cast<std::byte*>(&f) + shm_frame::inline_at(s), op->send_buf,
                    op->bytes);
      put_header(ring, pr.head, f);
      pr.head += sizeof f;
      op->started = true;
      op->moved = op->bytes;
      complete(pr.sends, op);
      return send_step::done;
    }
    const std::size_t padded = round_up(op->bytes, sizeof f);
    if (padded <= cap_ - sizeof f && fits(sizeof f + padded)) {
      // All of it fits: payload first, then the header that announces it whole.
      ring_write(ring, pr.head + sizeof f, op->send_buf, op->bytes);
      f.address = shm_frame::whole;
      put_header(ring, pr.head, f);
      pr.head += sizeof f + padded;
      op->started = true;
      op->moved = op->bytes;
      complete(pr.sends, op);
      return send_step::done;
    }
    if (!fits(sizeof f)) return send_step::blocked;
    put_header(ring, pr.head, f);  // streamed: the payload follows as the ring frees
    pr.head += sizeof f;
    op->started = true;
    return send_step::streaming;
  }

  /// Copies as much of streamed `op`'s payload as the ring has room for, publishing as it goes
  /// so the receiver can drain while it fills; true once all of it is in (the head then rounds
  /// up to the next frame).
  template <class Fits>
  bool stream_send(shm_channel_ctl& ctl, std::byte* ring, peer_state& pr, shm_op* op, Fits& fits) {
    while (op->moved < op->bytes) {
      if (!fits(1)) return false;
      const auto free = static_cast<std::size_t>(room(pr, pr.tail_seen));
      const std::size_t at = pr.head % cap_;
      const std::size_t n = std::min({op->bytes - op->moved, free, cap_ - at});
      std::memcpy(ring + at, op->send_buf + op->moved, n);
      op->moved += n;
      pr.head += n;
      if (op->moved < op->bytes) ctl.head.store(pr.head, std::memory_order_release);
    }
    pr.head = round_up(pr.head, sizeof(shm_frame));
    return true;
  }

  /// Writes `pr`'s queued sends to `q` into the ring of space `s`, as far as it has room, and
  /// rings `q`'s bell once if anything was written.
  void push_sends(space s, int q, peer_state& pr) {
    auto& ctl = v_.channel(s, rank_, q);
    std::byte* ring = v_.ring(s, rank_, q);
    const std::uint64_t start = pr.head;
    // The consumer's position as last seen: reloaded only when the ring looks too full, so a
    // message that fits costs no read of the consumer's line.
    auto fits = [&](std::size_t n) {
      if (room(pr, pr.tail_seen) >= static_cast<std::int64_t>(n)) return true;
      pr.tail_seen = ctl.tail.load(std::memory_order_acquire);
      return room(pr, pr.tail_seen) >= static_cast<std::int64_t>(n);
    };
    while (!pr.sends.empty()) {
      shm_op* op = pr.sends.front();
      if (!op->started) {
        const send_step step = start_send(s, ctl, ring, pr, op, fits);
        if (step == send_step::blocked) break;
        if (step == send_step::done) continue;
      }
      if (!stream_send(ctl, ring, pr, op, fits)) break;
      complete(pr.sends, op);
    }
    if (pr.head != start) {
      ctl.head.store(pr.head, std::memory_order_release);
      v_.block(q).bell.ring(true);
    }
  }

  /// Writes the chunks of its single copies the receiver `q` offers, then completes the ones it
  /// has read.
  void take_acks(space s, int q, peer_state& pr) {
    auto& ctl = v_.channel(s, rank_, q);
    if (share_ && v_.channel(s, q, rank_).single_copy.load(std::memory_order_relaxed) != 0 &&
        shm_share_help(ctl, pr.share, pid(q), [&](std::uint64_t m) {
          // Acknowledged in order: a message outside the queue's numbers is not this end's
          // to help with (the common case while it waits: the last one offered is done).
          if (m < pr.acking.front()->ack || m > pr.acking.back()->ack)
            return std::pair<const std::byte*, std::size_t>{nullptr, 0};
          for (const shm_op* op : pr.acking)
            if (op->ack == m) return std::pair{op->send_buf, op->bytes};
          return std::pair<const std::byte*, std::size_t>{nullptr, 0};
        }))
      v_.block(q).bell.ring(true);
    const std::uint64_t acked = ctl.acked.load(std::memory_order_acquire);
    while (!pr.acking.empty() && pr.acking.front()->ack <= acked)
      complete(pr.acking, pr.acking.front());
  }
};

}  // namespace tutti::inline v0::detail

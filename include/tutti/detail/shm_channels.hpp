#pragma once
/// \file
/// Point-to-point messaging over tutti::shm's channels. Each ordered pair of ranks has one
/// single-producer single-consumer ring per space (collective, p2p). A message is a 64-byte
/// frame header (sequence number, fingerprint, tag, size) followed by its payload; large
/// payloads stream through the ring while the receiver drains it, so any size fits.
///
/// Posted sends and receives wait in per-peer FIFO queues and advance whenever this rank
/// waits on anything (`progress`), so two ranks exchanging large messages cannot deadlock.
/// Collective receives match strictly in order and check the frame's call against their own;
/// user receives match by tag, in order, buffering frames for tags nobody asked for yet.
///
/// A user message of at least `shm_single_copy_min` bytes to a rank that can read this
/// process's memory (the probe at join set the channel's `single_copy`) travels as a frame
/// carrying its address instead of its bytes: the receiver copies it once, straight from the
/// sender's buffer, large ones with the sender's help (detail/shm_single_copy.hpp), then counts
/// it in the channel's `acked`; the send completes when its count is reached. Through the ring
/// every byte is copied twice, and a message larger than the ring costs a hand-off per ring's
/// worth.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tutti/core/reduce.hpp"
#include "tutti/detail/board.hpp"
#include "tutti/detail/call.hpp"
#include "tutti/detail/cma.hpp"
#include "tutti/detail/shm_layout.hpp"
#include "tutti/detail/shm_single_copy.hpp"

namespace tutti::inline v0::detail {

/// One posted send or receive.
struct shm_op {
  bool is_send = false;
  space sp = space::collective;
  int peer = -1;
  std::uint64_t tag = 0;
  std::uint64_t seq = 0;
  fingerprint fp;
  const std::byte* send_buf = nullptr;
  std::byte* recv_buf = nullptr;
  std::size_t bytes = 0;
  const reducer* fuse = nullptr;  // receive: recv_buf = recv_buf op payload
  std::size_t moved = 0;          // payload bytes moved so far
  std::uint64_t ack = 0;          // single-copy send: its number on the channel
  bool started = false;           // send: frame header written; receive: frame matched
  bool complete = false;
  bool failed = false;
  std::string error;
};

/// A user message that arrived before a receive with its tag was posted.
struct shm_unexpected {
  std::uint64_t tag = 0;
  std::vector<std::byte> data;
  std::size_t expected = 0;  // payload size announced by the frame
};

class shm_channels {
 public:
  shm_channels(const shm_view& v, int rank, int size)
      : v_(v),
        rank_(rank),
        size_(size),
        cap_(v.layout().channel_bytes),
        key_(v.header().stamp_key),
        share_(shm_share_enabled()),
        peers_(static_cast<std::size_t>(size) * 2) {}

  /// Queues `op` (owned by its request); it advances on the next `progress`.
  void post(shm_op* op) {
    auto& pr = peer(op->sp, op->peer);
    if (op->is_send) {
      pr.sends.push_back(op);
    } else if (op->sp == space::p2p && take_unexpected(pr, op)) {
      return;
    } else {
      pr.recvs.push_back(op);
    }
    ++pending_;
    progress();
  }

  /// Withdraws an incomplete op (its request died unwaited). Returns false when the op had
  /// already moved part of a message: the channel is then out of step and must not be reused.
  bool cancel(shm_op* op) noexcept {
    auto& pr = peer(op->sp, op->peer);
    if (pr.sharing && pr.current == op) {  // its sender may be writing into it: let it finish
      auto& ctl = v_.channel(op->sp, op->peer, rank_);
      shm_share_settle(ctl, pr.share, pid(op->peer));
      pr.sharing = false;
      pr.in_frame = false;  // read (in part): the sender's send may complete
      ctl.acked.store(++pr.read, std::memory_order_release);
    }
    if (const auto it = std::find(pr.acking.begin(), pr.acking.end(), op); it != pr.acking.end()) {
      pr.acking.erase(it);  // its receiver may be reading it: the channel cannot go on
      --pending_;
      return false;
    }
    auto& q = op->is_send ? pr.sends : pr.recvs;
    const auto it = std::find(q.begin(), q.end(), op);
    if (it == q.end()) return true;
    const bool clean = !op->started;
    q.erase(it);
    --pending_;
    if (!clean && !op->is_send) pr.current = nullptr;
    return clean;
  }

  /// Moves whatever can move now on every channel with posted work; rings peers it fed.
  void progress() {
    if (pending_ == 0) return;
    for (int s = 0; s < 2; ++s)
      for (int q = 0; q < size_; ++q) {
        auto& pr = peer(static_cast<space>(s), q);
        if (!pr.sends.empty()) push_sends(static_cast<space>(s), q, pr);
        if (!pr.recvs.empty()) pull_recvs(static_cast<space>(s), q, pr);
        if (!pr.acking.empty()) take_acks(static_cast<space>(s), q, pr);
      }
  }

  [[nodiscard]] std::size_t pending() const noexcept { return pending_; }

 private:
  struct peer_state {
    std::deque<shm_op*> sends;
    std::deque<shm_op*> recvs;
    std::deque<shm_op*> acking;   // single-copy sends whose bytes the receiver has yet to read
    std::uint64_t described = 0;  // single-copy sends written to the outgoing channel
    std::uint64_t read = 0;       // single-copy messages read from the incoming channel
    std::list<shm_unexpected> unexpected;  // stable addresses: `buffering` points in
    std::uint64_t head = 0;                // producer position of the outgoing channel (mirror)
    std::uint64_t tail_seen = 0;           // the outgoing channel's consumer position, as last read
    std::uint64_t tail = 0;                // consumer position of the incoming channel (mirror)
    std::uint64_t head_seen = 0;  // the incoming channel's producer position, as last known
    shm_frame frame{};            // incoming frame being consumed
    bool in_frame = false;
    shm_op* current = nullptr;            // receive the frame streams into (null: unexpected)
    shm_unexpected* buffering = nullptr;  // unexpected frame being buffered
    std::size_t frame_moved = 0;
    bool sharing = false;  // the frame's single copy waits for chunks its sender writes
    shm_share_state share;
  };

  [[nodiscard]] pid_t pid(int q) const noexcept {
    return static_cast<pid_t>(v_.block(q).pid.load(std::memory_order_relaxed));
  }

  peer_state& peer(space s, int q) noexcept {
    return peers_[static_cast<std::size_t>(s) * static_cast<std::size_t>(size_) +
                  static_cast<std::size_t>(q)];
  }

  void complete(std::deque<shm_op*>& q, shm_op* op) {
    op->complete = true;
    q.pop_front();
    --pending_;
  }

  // ---- sending ------------------------------------------------------------------------------

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
          if (!fits(sizeof f)) break;
          f.address = reinterpret_cast<std::uintptr_t>(op->send_buf);
          put_header(ring, pr.head, f);
          pr.head += sizeof f;
          op->started = true;
          op->moved = op->bytes;
          op->ack = ++pr.described;
          pr.sends.pop_front();
          pr.acking.push_back(op);
          continue;
        }
        if (op->bytes <= shm_frame::inline_max(s)) {  // in the header itself
          if (!fits(sizeof f)) break;
          f.address = shm_frame::whole;
          if (op->bytes != 0)
            std::memcpy(reinterpret_cast<std::byte*>(&f) + shm_frame::inline_at(s), op->send_buf,
                        op->bytes);
          put_header(ring, pr.head, f);
          pr.head += sizeof f;
          op->started = true;
          op->moved = op->bytes;
          complete(pr.sends, op);
          continue;
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
          continue;
        }
        if (!fits(sizeof f)) break;
        put_header(ring, pr.head, f);  // streamed: the payload follows as the ring frees
        pr.head += sizeof f;
        op->started = true;
      }
      while (op->moved < op->bytes) {
        if (!fits(1)) break;
        const auto free = static_cast<std::size_t>(room(pr, pr.tail_seen));
        const std::size_t at = pr.head % cap_;
        const std::size_t n = std::min({op->bytes - op->moved, free, cap_ - at});
        std::memcpy(ring + at, op->send_buf + op->moved, n);
        op->moved += n;
        pr.head += n;
        // Publish as we go so the receiver can drain while we fill.
        if (op->moved < op->bytes) ctl.head.store(pr.head, std::memory_order_release);
      }
      if (op->moved < op->bytes) break;
      pr.head = round_up(pr.head, sizeof(shm_frame));
      complete(pr.sends, op);
    }
    if (pr.head != start) {
      ctl.head.store(pr.head, std::memory_order_release);
      v_.block(q).bell.ring(true);
    }
  }

  // ---- receiving ----------------------------------------------------------------------------

  void pull_recvs(space s, int q, peer_state& pr) {
    auto& ctl = v_.channel(s, q, rank_);
    std::byte* ring = v_.ring(s, q, rank_);
    const std::uint64_t start = pr.tail;
    for (;;) {
      if (pr.sharing) {
        if (!settle_single_copy(s, q, pr)) break;
        finish_frame(pr);
        continue;
      }
      if (!pr.in_frame) {
        if (pr.recvs.empty()) break;
        auto* header = reinterpret_cast<shm_frame*>(ring + pr.tail % cap_);
        if (std::atomic_ref<std::uint64_t>(header->stamp).load(std::memory_order_acquire) !=
            (pr.tail ^ key_))
          break;
        std::memcpy(&pr.frame, header, sizeof(shm_frame));
        if (pr.frame.address == shm_frame::whole && pr.frame.bytes > shm_frame::inline_max(s)) {
          // Asks for the payload's lines (up to 1 KiB) now, so that their transfers from the
          // sender's cache overlap each other and the matching below: 128 and 256 B messages
          // 0.02-0.03 us faster (bench/compare_p2p.sh).
          const std::size_t lines = std::min<std::size_t>((pr.frame.bytes + 63) / 64, 16);
          for (std::size_t i = 1; i <= lines; ++i)
            __builtin_prefetch(ring + (pr.tail + i * sizeof(shm_frame)) % cap_);
        }
        pr.tail += sizeof(shm_frame);
        pr.in_frame = true;
        pr.frame_moved = 0;
        match(s, q, pr);
        if (pr.frame.address > shm_frame::whole) {
          if (!read_single_copy(s, q, pr)) break;  // the sender writes part of it
          finish_frame(pr);
          continue;
        }
        if (pr.frame.address == shm_frame::whole) {
          if (pr.frame.bytes <= shm_frame::inline_max(s)) {
            if (pr.frame.bytes != 0)
              deliver(pr, reinterpret_cast<const std::byte*>(&pr.frame) + shm_frame::inline_at(s),
                      pr.frame.bytes);
            pr.frame_moved = pr.frame.bytes;
            finish_frame(pr);
            continue;
          }
          pr.head_seen = std::max(pr.head_seen, pr.tail + pr.frame.bytes);  // all there
        }
      }
      // Stream the payload into the matched receive, an unexpected buffer, or nowhere.
      const std::size_t total = pr.frame.bytes;
      const std::size_t elem = pr.current && pr.current->fuse ? pr.current->fuse->elem_size : 1;
      while (pr.frame_moved < total) {
        // head_seen may lag behind the frames found by their stamps.
        std::size_t avail = pr.head_seen > pr.tail ? pr.head_seen - pr.tail : 0;
        if (avail < elem && avail < total - pr.frame_moved) {
          pr.head_seen = ctl.head.load(std::memory_order_acquire);
          avail = pr.head_seen > pr.tail ? pr.head_seen - pr.tail : 0;
          if (avail < elem && avail < total - pr.frame_moved) break;
        }
        const std::size_t at = pr.tail % cap_;
        std::size_t n = std::min({total - pr.frame_moved, avail, cap_ - at});
        if (n < total - pr.frame_moved) n -= n % elem;
        if (n == 0) break;
        deliver(pr, ring + at, n);
        pr.frame_moved += n;
        pr.tail += n;
        if (pr.frame_moved < total) ctl.tail.store(pr.tail, std::memory_order_release);
      }
      if (pr.frame_moved < total) break;
      pr.tail = round_up(pr.tail, sizeof(shm_frame));
      finish_frame(pr);
    }
    if (pr.tail != start) {
      ctl.tail.store(pr.tail, std::memory_order_release);
      v_.block(q).bell.ring(true);
    }
  }

  /// Picks the receive the new frame belongs to and checks that it is the expected message.
  void match(space s, int q, peer_state& pr) {
    const shm_frame& f = pr.frame;
    pr.current = nullptr;
    pr.buffering = nullptr;
    if (s == space::collective) {
      shm_op* op = pr.recvs.front();
      const fingerprint theirs = fingerprint::unpack(f.fp_head, f.fp_count);
      std::string problem;
      if (f.seq != op->seq || !(theirs == op->fp)) {
        problem = f.seq == op->seq
                      ? mismatch_text(rank_, op->fp, q, theirs)
                      : "mismatched collective: rank " + std::to_string(rank_) + " is in call #" +
                            std::to_string(op->seq) + " " + op->fp.describe() + " but rank " +
                            std::to_string(q) + " sent from call #" + std::to_string(f.seq) + " " +
                            theirs.describe();
      } else if (f.bytes != op->bytes) {
        problem = "message size mismatch: rank " + std::to_string(q) + " sent " +
                  std::to_string(f.bytes) + " bytes but rank " + std::to_string(rank_) +
                  " expected " + std::to_string(op->bytes);
      }
      if (!problem.empty()) {
        fail(pr.recvs, op, problem);
        v_.abort(errc::mismatch, problem, q);
        return;  // the payload is skipped
      }
      op->started = true;
      pr.current = op;
      return;
    }
    const auto it = std::find_if(pr.recvs.begin(), pr.recvs.end(),
                                 [&](const shm_op* o) { return o->tag == f.tag; });
    if (it == pr.recvs.end()) {
      pr.unexpected.push_back({f.tag, {}, f.bytes});
      pr.buffering = &pr.unexpected.back();
      pr.buffering->data.reserve(f.bytes);
      return;
    }
    shm_op* op = *it;
    if (f.bytes != op->bytes) {
      std::string problem = "message size mismatch: rank " + std::to_string(q) + " sent " +
                            std::to_string(f.bytes) + " bytes with tag " + std::to_string(f.tag) +
                            " but rank " + std::to_string(rank_) + " expected " +
                            std::to_string(op->bytes);
      pr.recvs.erase(it);
      op->failed = true;
      op->error = std::move(problem);
      op->complete = true;
      --pending_;
      return;
    }
    // Move the matched receive to the front: the frame streams into it until it is done.
    pr.recvs.erase(it);
    pr.recvs.push_front(op);
    op->started = true;
    pr.current = op;
  }

  /// The frame is a single copy: reads its bytes from the sender's memory into the matched
  /// receive (with the sender's help where it can write here) or an unexpected buffer (or
  /// nowhere, after a mismatch), then acknowledges it. False while the sender's chunks are due.
  bool read_single_copy(space s, int q, peer_state& pr) {
    const std::size_t n = pr.frame.bytes;
    std::byte* dst = nullptr;
    if (pr.current != nullptr) {
      dst = pr.current->recv_buf;
      pr.current->moved = n;
    } else if (pr.buffering != nullptr) {
      pr.buffering->data.resize(n);
      dst = pr.buffering->data.data();
    }
    pr.frame_moved = n;
    pr.share.error = 0;
    if (dst != nullptr && n != 0) {
      // Only into a posted receive: it stays pending until the sender's chunks are in.
      const bool shared = share_ && pr.current != nullptr &&
                          v_.channel(s, rank_, q).single_copy.load(std::memory_order_relaxed) != 0;
      if (!shm_share_read(v_.channel(s, q, rank_), pr.share, pid(q), pr.read + 1, dst,
                          pr.frame.address, n, shared)) {
        pr.sharing = true;
        return false;
      }
    }
    acknowledge(s, q, pr);
    return true;
  }

  /// A shared single copy: true (and acknowledged) once the sender's chunks are in place.
  bool settle_single_copy(space s, int q, peer_state& pr) {
    if (!shm_share_settled(v_.channel(s, q, rank_), pr.share, pid(q), pr.current->recv_buf,
                           pr.frame.address, pr.frame.bytes))
      return false;
    pr.sharing = false;
    acknowledge(s, q, pr);
    return true;
  }

  void acknowledge(space s, int q, peer_state& pr) {
    if (const int e = pr.share.error; e != 0 && pr.current != nullptr) {
      pr.current->failed = true;
      pr.current->error = "reading " + std::to_string(pr.frame.bytes) + " bytes from rank " +
                          std::to_string(q) + "'s memory failed: " + std::strerror(e);
    }
    v_.channel(s, q, rank_).acked.store(++pr.read, std::memory_order_release);
  }

  /// Writes the chunks of its single copies the receiver `q` offers, then completes the ones it
  /// has read.
  void take_acks(space s, int q, peer_state& pr) {
    auto& ctl = v_.channel(s, rank_, q);
    if (share_ && v_.channel(s, q, rank_).single_copy.load(std::memory_order_relaxed) != 0 &&
        shm_share_help(ctl, pr.share, pid(q), [&](std::uint64_t m) {
          for (const shm_op* op : pr.acking)
            if (op->ack == m) return std::pair{op->send_buf, op->bytes};
          return std::pair<const std::byte*, std::size_t>{nullptr, 0};
        }))
      v_.block(q).bell.ring(true);
    const std::uint64_t acked = ctl.acked.load(std::memory_order_acquire);
    while (!pr.acking.empty() && pr.acking.front()->ack <= acked)
      complete(pr.acking, pr.acking.front());
  }

  void deliver(peer_state& pr, const std::byte* src, std::size_t n) {
    if (shm_op* op = pr.current) {
      std::byte* dst = op->recv_buf + pr.frame_moved;
      if (op->fuse != nullptr)
        (*op->fuse)(dst, dst, src, n / op->fuse->elem_size);
      else
        std::memcpy(dst, src, n);
      op->moved += n;
    } else if (pr.buffering != nullptr) {
      pr.buffering->data.insert(pr.buffering->data.end(), src, src + n);
    }
  }

  void finish_frame(peer_state& pr) {
    pr.in_frame = false;
    if (pr.current != nullptr) complete(pr.recvs, pr.current);
    pr.current = nullptr;
    if (pr.buffering != nullptr) {
      // A receive for this tag may have been posted while the frame was still arriving.
      pr.buffering = nullptr;
      const std::uint64_t tag = pr.unexpected.back().tag;
      const auto it = std::find_if(pr.recvs.begin(), pr.recvs.end(),
                                   [&](const shm_op* o) { return o->tag == tag; });
      if (it != pr.recvs.end()) {
        shm_op* op = *it;
        pr.recvs.erase(it);
        --pending_;
        take_unexpected(pr, op);
      }
    }
  }

  void fail(std::deque<shm_op*>& q, shm_op* op, std::string what) {
    op->failed = true;
    op->error = std::move(what);
    complete(q, op);
  }

  /// A user receive whose message was buffered already: complete it from the buffer.
  bool take_unexpected(peer_state& pr, shm_op* op) {
    for (auto it = pr.unexpected.begin(); it != pr.unexpected.end(); ++it) {
      if (it->tag != op->tag) continue;
      if (&*it == pr.buffering) return false;  // still arriving: receive it from the ring
      if (it->data.size() != op->bytes) {
        op->failed = true;
        op->error = "message size mismatch: rank " + std::to_string(op->peer) + " sent " +
                    std::to_string(it->data.size()) + " bytes with tag " + std::to_string(op->tag) +
                    " but rank " + std::to_string(rank_) + " expected " + std::to_string(op->bytes);
      } else if (op->bytes != 0) {
        std::memcpy(op->recv_buf, it->data.data(), op->bytes);
      }
      op->moved = op->bytes;
      op->complete = true;
      pr.unexpected.erase(it);
      return true;
    }
    return false;
  }

  shm_view v_;
  int rank_;
  int size_;
  std::size_t cap_;
  std::uint64_t key_;
  bool share_;  // single copies shared with their senders (TUTTI_SHM_SHARE)
  std::vector<peer_state> peers_;
  std::size_t pending_ = 0;
};

}  // namespace tutti::inline v0::detail

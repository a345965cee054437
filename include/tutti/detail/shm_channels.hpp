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
///
/// The state both sides keep is shm_channel_base's (detail/shm_channel_base.hpp), the sending
/// side shm_channel_send's (detail/shm_channel_send.hpp); here, the interface and receiving.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "tutti/detail/cma.hpp"
#include "tutti/detail/shm_channel_send.hpp"

namespace tutti::inline v0::detail {

class shm_channels : shm_channel_send {
 public:
  shm_channels(const shm_view& v, int rank, int size) : shm_channel_send(v, rank, size) {}

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
          // sender's cache overlap each other and the matching below (bench/RESULTS.md,
          // "isend/irecv at 8–128 bytes").
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
      if (!stream_recv(ctl, ring, pr)) break;
      finish_frame(pr);
    }
    if (pr.tail != start) {
      ctl.tail.store(pr.tail, std::memory_order_release);
      v_.block(q).bell.ring(true);
    }
  }

  /// Streams what has arrived of the current frame's payload into the matched receive, an
  /// unexpected buffer, or nowhere, whole elements at a time where the receive reduces; true
  /// once all of it has (the tail then rounds up to the next frame).
  bool stream_recv(shm_channel_ctl& ctl, const std::byte* ring, peer_state& pr) {
    const std::size_t total = pr.frame.bytes;
    const std::size_t elem = pr.current && pr.current->fuse ? pr.current->fuse->elem_size : 1;
    while (pr.frame_moved < total) {
      // head_seen may lag behind the frames found by their stamps.
      std::size_t avail = pr.head_seen > pr.tail ? pr.head_seen - pr.tail : 0;
      if (avail < elem && avail < total - pr.frame_moved) {
        pr.head_seen = ctl.head.load(std::memory_order_acquire);
        avail = pr.head_seen > pr.tail ? pr.head_seen - pr.tail : 0;
        if (avail < elem && avail < total - pr.frame_moved) return false;
      }
      const std::size_t at = pr.tail % cap_;
      std::size_t n = std::min({total - pr.frame_moved, avail, cap_ - at});
      if (n < total - pr.frame_moved) n -= n % elem;
      if (n == 0) return false;
      deliver(pr, ring + at, n);
      pr.frame_moved += n;
      pr.tail += n;
      if (pr.frame_moved < total) ctl.tail.store(pr.tail, std::memory_order_release);
    }
    pr.tail = round_up(pr.tail, sizeof(shm_frame));
    return true;
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
};

}  // namespace tutti::inline v0::detail

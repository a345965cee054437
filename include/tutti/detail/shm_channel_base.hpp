#pragma once
/// \file
/// What tutti::shm's channels (detail/shm_channels.hpp) keep per rank: the posted operations,
/// messages that arrived before their receive, and per peer and space the queues and the
/// mirrored ring positions; the sending side (detail/shm_channel_send.hpp) and the receiving
/// side build on it.

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <string>
#include <utility>
#include <vector>

#include "tutti/core/reduce.hpp"
#include "tutti/detail/board.hpp"
#include "tutti/detail/call.hpp"
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

/// The state both sides of the channels share.
class shm_channel_base {
 protected:
  shm_channel_base(const shm_view& v, int rank, int size)
      : v_(v),
        rank_(rank),
        size_(size),
        cap_(v.layout().channel_bytes),
        key_(v.header().stamp_key),
        share_(shm_share_enabled()),
        peers_(static_cast<std::size_t>(size) * 2) {}

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

  void fail(std::deque<shm_op*>& q, shm_op* op, std::string what) {
    op->failed = true;
    op->error = std::move(what);
    complete(q, op);
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

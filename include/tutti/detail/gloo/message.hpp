#pragma once
/// \file
/// One posted message of tutti::gloo (gloo_message, what a gloo::request holds): its Gloo
/// parts or its single copy, where a reducing receive's parts land, and what becomes of it
/// when it is destroyed unwaited.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gloo/transport/unbound_buffer.h>

#include "tutti/core/error.hpp"
#include "tutti/detail/call.hpp"
#include "tutti/detail/cma.hpp"
#include "tutti/detail/gloo/failure.hpp"
#include "tutti/detail/gloo/state.hpp"

namespace tutti::inline v0::detail {

/// A posted send or receive (see gloo::request). Destroyed unwaited, it aborts the world; a
/// single-copy send given up on is marked so, for its receiver. Moved out of, it is empty.
struct gloo_message {
  gloo_message() = default;
  gloo_message(gloo_message&& o) noexcept { *this = std::move(o); }
  gloo_message& operator=(gloo_message&& o) noexcept {
    if (this != &o) {
      release();
      parts = std::move(o.parts);
      done = o.done;
      part_bytes = o.part_bytes;
      total = o.total;
      reduce_into = o.reduce_into;
      staging = std::move(o.staging);
      s = std::move(o.s);
      peer = o.peer;
      is_send = o.is_send;
      msg = std::move(o.msg);
      cma_open = std::exchange(o.cma_open, false);
      ack = std::exchange(o.ack, nullptr);
      data = o.data;
    }
    return *this;
  }
  gloo_message(const gloo_message&) = delete;
  gloo_message& operator=(const gloo_message&) = delete;
  ~gloo_message() { release(); }

  [[nodiscard]] bool pending() const noexcept { return cma_open || done < parts.size(); }
  void release() noexcept {
    // The abort first: a receiver that finds the message abandoned then finds why.
    if (pending() && s)
      gloo_abort_world(*s, {errc::aborted, s->rank, s->rank, "a message was abandoned half done"});
    if (ack != nullptr)  // a single copy given up on: its receiver must not trust its read
      std::exchange(ack, nullptr)->store(cma_ack_words::abandoned, std::memory_order_release);
    forget();
    if (s && !staging.empty()) s->give_staging(std::move(staging));
  }
  /// Drops what is left of the message (its world is lost or aborted): its Gloo parts, a
  /// single-copy send's descriptor still waiting for room in the peer's inbox (never to be
  /// written: the peer would find it abandoned, or its buffer gone), and a single-copy
  /// receive's place among the receives waiting for a descriptor.
  void forget() noexcept {
    if (cma_open && s) {
      auto& link = s->cma_links[static_cast<std::size_t>(peer)];
      if (is_send)
        std::erase_if(link.outbox, [&](const cma_inbox::body& e) {
          return e.d.ack_address == msg->d.ack_address;
        });
      else if (!msg->arrived)
        std::erase(link.posted, msg.get());
    }
    cma_open = false;
    parts.clear();
    done = 0;
  }

  std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> parts;
  std::size_t done = 0;        // parts waited so far
  std::size_t part_bytes = 0;  // every part's size but the last's
  std::size_t total = 0;
  std::byte* reduce_into = nullptr;  // irecv_reduce: the parts land in staging, reduced here
  std::vector<std::byte> staging;
  std::shared_ptr<gloo_state> s;
  int peer = -1;
  bool is_send = false;
  /// A single copy (no Gloo parts): its descriptor and slot, and whether it is still to be
  /// waited; for a send, the word the receiver acknowledges in (detail::cma_ack_words; given
  /// back once acknowledged, never if the message is abandoned); for a receive, where the
  /// bytes go (or are reduced into, through staging, by reduce_into).
  std::unique_ptr<cma_message> msg;
  bool cma_open = false;
  cma_ack_words::word* ack = nullptr;
  std::byte* data = nullptr;
};

/// `gloo_lost` for message `m`, whose pair failed: its posted parts can no longer complete.
[[noreturn]] inline void gloo_lost(gloo_state& st, gloo_message& m, const call& c,
                                   const std::string& gloo_what) {
  m.forget();
  gloo_lost(st, c, m.peer, gloo_what);
}

}  // namespace tutti::inline v0::detail

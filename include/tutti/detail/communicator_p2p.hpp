#pragma once
/// \file
/// A communicator's non-blocking point-to-point calls (communicator::isend, irecv, batch) on a
/// host transport, from posting until they are done: each call's messages and its work's state
/// in one allocation, moved on by the thread that waits for the work or polls it.

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <vector>

#include "tutti/core/error.hpp"
#include "tutti/core/types.hpp"
#include "tutti/detail/call.hpp"
#include "tutti/detail/progress.hpp"
#include "tutti/detail/wait.hpp"
#include "tutti/work.hpp"

namespace tutti::inline v0::detail {

/// One message of a non-blocking point-to-point call or batch: a send of `out` to `peer`, or a
/// receive into `in` from it.
struct p2p_msg {
  bool is_send = true;
  std::span<const std::byte> out;
  std::span<std::byte> in;
  int peer = -1;
  std::uint64_t tag = 0;
  dtype type = dtype::uint8;
};

/// The pending calls of one communicator. It shares the communicator's transport and progress
/// queue: it touches the transport only where the queue is idle (a blocking wait drains it
/// first), so the progress thread and this never use the transport at once. Destroyed with the
/// communicator (after its queue), it fails the calls still pending rather than wait: their
/// peers may never post theirs.
template <class Transport>
class p2p_pending {
 public:
  p2p_pending(Transport& t, progress_queue& q) noexcept : t_(&t), q_(&q) {}
  p2p_pending(const p2p_pending&) = delete;
  p2p_pending& operator=(const p2p_pending&) = delete;
  ~p2p_pending() {
    for (auto& o : ops_) {
      const call& c = o->at(o->next).c;
      o->owner = nullptr;
      o->ws.complete(std::make_exception_ptr(
          error(errc::aborted, c.name_str(), c.seq, t_->rank(), -1,
                "the communicator was destroyed before this message was done")));
      o->withdraw();
    }
  }

  /// Posts every message of `msgs` (as the call `call_of(message)` describes, which may refuse
  /// it: then nothing is posted), all before any waits, and returns one work for them, done once
  /// every message is (or one failed). Errors while posting are the call's own, as for send and
  /// recv.
  template <class CallOf>
  work post(std::span<const p2p_msg> msgs, CallOf&& call_of, clock::time_point deadline) {
    std::shared_ptr<op> o = fresh_op();
    o->size(msgs.size());  // requests may refer to their calls: no reallocation after
    o->deadline = deadline;
    for (std::size_t i = 0; i < msgs.size(); ++i) o->at(i).c = call_of(msgs[i]);
    for (std::size_t i = 0; i < msgs.size(); ++i) {
      const p2p_msg& m = msgs[i];
      auto& mine = o->at(i);
      mine.r = m.is_send ? t_->isend(m.peer, m.out, mine.c, space::p2p, m.tag)
                         : t_->irecv(m.peer, m.in, mine.c, space::p2p, m.tag);
    }
    o->owner = this;
    o->ws.drive = [](void* p, bool block) noexcept {
      auto* me = static_cast<op*>(p);
      if (me->owner != nullptr) me->owner->advance(*me, block);
    };
    o->ws.drive_ctx = o.get();
    std::shared_ptr<work_state> ws(o, &o->ws);  // the work keeps the op alive
    ops_.push_back(std::move(o));
    return work(std::move(ws));
  }

 private:
  /// The messages of one call and its work's state. `owner` is null once the communicator is
  /// gone.
  struct op {
    struct msg {
      call c;
      typename Transport::request r;
    };
    work_state ws;
    p2p_pending* owner = nullptr;
    std::array<msg, 2> few;  // an isend or irecv, or a pair, need no allocation of their own
    std::vector<msg> many;   // larger batches
    std::size_t count = 0;
    std::size_t next = 0;  // messages before it are done
    clock::time_point deadline;

    void size(std::size_t n) {
      count = n;
      next = 0;
      many.clear();
      if (n > few.size()) many.resize(n);
    }
    msg& at(std::size_t i) { return count > few.size() ? many[i] : few[i]; }
    void withdraw() {  // destroys every request: a pending one withdraws its message
      for (auto& m : few) m.r = {};
      many.clear();
    }
  };

  /// The op of a new call: a finished one whose work handles are all gone (no allocation, and
  /// one reference count operation fewer per call), else a new one. Under ThreadSanitizer,
  /// which does not model the fence, always a new one.
  std::shared_ptr<op> fresh_op() {
#if !defined(__SANITIZE_THREAD__)
    for (auto& spare : spares_) {
      // Only this list holds it: no handle is left that could copy it, so the count stays 1.
      if (spare.use_count() != 1) continue;
      // Synchronizes with the release of the last handle, which may have been on another thread.
      std::atomic_thread_fence(std::memory_order_acquire);
      std::shared_ptr<op> o = std::move(spare);
      spare = std::move(spares_.back());
      spares_.pop_back();
      o->ws.finished.store(0, std::memory_order_relaxed);
      return o;
    }
#endif
    return std::make_shared<op>();
  }

  /// Moves `o`'s messages on (until they are done, if `block`), completing its work once all
  /// are done or one failed.
  void advance(op& o, bool block) noexcept {
    std::exception_ptr failed;
    try {
      if (block)
        q_->drain();
      else if (!q_->idle())
        return;
      for (; o.next < o.count; ++o.next) {
        auto& r = o.at(o.next).r;
        const call& c = o.at(o.next).c;
        if (block) {
          t_->wait(r, c, o.deadline);
        } else if constexpr (requires { t_->test(r, c, o.deadline); }) {
          if (!t_->test(r, c, o.deadline)) return;
        } else {
          return;  // a transport without test(): done once waited for
        }
      }
    } catch (...) {
      failed = std::current_exception();
    }
    o.ws.complete(failed, false);  // by the thread that drives it: nobody sleeps on it
    const auto it =
        std::find_if(ops_.begin(), ops_.end(), [&](const auto& p) { return p.get() == &o; });
    if (it != ops_.end()) {
      // Kept for reuse once its handles are gone, unless messages of it are still posted.
      if (!failed && spares_.size() < max_spares) {
        o.withdraw();  // every message is done: releases the transport's requests now
        spares_.push_back(std::move(*it));
      }
      *it = std::move(ops_.back());
      ops_.pop_back();  // may destroy o: the work that drives it holds it
    }
  }

  static constexpr std::size_t max_spares = 4;

  Transport* t_;
  progress_queue* q_;
  std::vector<std::shared_ptr<op>> ops_;
  std::vector<std::shared_ptr<op>> spares_;  // finished: reused by post once no handle is left
};

}  // namespace tutti::inline v0::detail

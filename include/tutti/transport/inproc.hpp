#pragma once
/// \file
/// tutti::inproc: ranks are threads of one process. Models point_to_point (single-copy
/// rendezvous: whichever side arrives second copies or reduces), fused_receive and
/// shared_segment. `inproc::run` (defined in tutti/run.hpp) starts a world of threads, one
/// communicator each.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "tutti/core/error.hpp"
#include "tutti/core/options.hpp"
#include "tutti/detail/cost.hpp"
#include "tutti/detail/inproc_world.hpp"
#include "tutti/detail/split.hpp"
#include "tutti/transport/concepts.hpp"

namespace tutti::inline v0 {

class inproc {
 public:
  using memory_space = host_memory;
  /// Defaults for tutti::automatic, fitted to bench/bench_all_reduce on a 2-core machine: a
  /// futex hand-off per message; a point-to-point message is copied (or reduced) by one of
  /// the two threads, while direct's segment copies run on every rank at once.
  static constexpr cost_model costs{.alpha_us = 2.0,
                                    .beta_us_per_byte = 1.0 / 2500.0,
                                    .gamma_us_per_byte = 1.0 / 10000.0,
                                    .segment_beta_us_per_byte = 1.0 / 10000.0};

  /// Whether ring's receive is worth posting a step early (detail::context::ring_post_ahead):
  /// always. A send that finds its receive posted copies at once, rather than when the
  /// receiver comes (bench/RESULTS.md, "Ring's receives posted a step early across shaped
  /// hosts").
  [[nodiscard]] static bool ring_post_ahead(int, std::size_t, std::size_t) noexcept { return true; }

  /// A posted send or receive. Waiting is done through `inproc::wait`; a request destroyed
  /// unwaited withdraws its message (or waits for a copy already under way).
  class request {
   public:
    request() = default;
    request(request&&) noexcept = default;
    request& operator=(request&& o) noexcept {
      if (this != &o) {
        release();
        msg_ = std::move(o.msg_);
        world_ = std::move(o.world_);
        channel_ = o.channel_;
        is_send_ = o.is_send_;
        peer_ = o.peer_;
      }
      return *this;
    }
    ~request() { release(); }
    [[nodiscard]] bool done() const noexcept {
      return !msg_ || msg_->state.load(std::memory_order_acquire) >= detail::inproc_message::done;
    }

   private:
    friend class inproc;
    void release() noexcept {
      if (msg_ && !done()) world_->cancel(*channel_, msg_.get(), is_send_);
      msg_.reset();
    }
    std::unique_ptr<detail::inproc_message> msg_;
    std::shared_ptr<detail::inproc_world> world_;
    detail::inproc_channel* channel_ = nullptr;
    bool is_send_ = false;
    int peer_ = -1;
  };

  inproc(std::shared_ptr<detail::inproc_world> world, int rank)
      : world_(std::move(world)), rank_(rank) {}

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return world_->size(); }
  /// Threads whose waits share the CPUs with this world's: its size, or for a split's child
  /// its parent's (the parent's other ranks still run), and so on up.
  [[nodiscard]] int machine_ranks() const noexcept { return world_->machine_ranks(); }

  /// This rank's endpoint in the child `p` plans (communicator::split): a world of threads the
  /// first member creates and the others find through this world. A rank that exits this
  /// world exits the child too, so waiting for it there raises at once. The child waits as
  /// crowded as this world (machine_ranks).
  [[nodiscard]] std::optional<inproc> split(const detail::split_plan& p,
                                            const detail::split_exchange&, const options&) {
    if (!p.joins()) return std::nullopt;
    return inproc(world_->child(p.id, p.color, p.members), p.rank);
  }

  [[nodiscard]] request isend(int peer, std::span<const std::byte> data, const detail::call& c,
                              detail::space s, std::uint64_t tag) {
    request r = make(peer, c, s, tag, true);
    r.msg_->send_buf = data.data();
    r.msg_->bytes = data.size();
    world_->post(*r.channel_, r.msg_.get(), true, s);
    return r;
  }

  [[nodiscard]] request irecv(int peer, std::span<std::byte> data, const detail::call& c,
                              detail::space s, std::uint64_t tag) {
    request r = make(peer, c, s, tag, false);
    r.msg_->recv_buf = data.data();
    r.msg_->bytes = data.size();
    world_->post(*r.channel_, r.msg_.get(), false, s);
    return r;
  }

  /// Receives a message and reduces it into `data` with the call's reducer, in one pass.
  [[nodiscard]] request irecv_reduce(int peer, std::span<std::byte> data, const detail::call& c) {
    request r = make(peer, c, detail::space::collective, 0, false);
    r.msg_->recv_buf = data.data();
    r.msg_->bytes = data.size();
    r.msg_->fuse = &c.red;
    world_->post(*r.channel_, r.msg_.get(), false, detail::space::collective);
    return r;
  }

  /// Waits for `r` until `deadline`; raises tutti::error on failure, abort or timeout.
  void wait(request& r, const detail::call& c, detail::clock::time_point deadline) {
    if (!r.msg_) return;
    auto* m = r.msg_.get();
    auto ready = [m] {
      return m->state.load(std::memory_order_acquire) >= detail::inproc_message::done;
    };
    if (!ready())
      detail::wait_on(
          world_->rank_state(rank_).bell, false, ready, [&] { poll(c, deadline, r.peer_); },
          world_->tuning());
    if (m->state.load(std::memory_order_acquire) == detail::inproc_message::failed)
      throw error(errc::mismatch, c.name_str(), c.seq, rank_, r.peer_, m->error);
    r.msg_.reset();
  }

  /// Whether `r` is done (as after `wait`), without waiting. Past `deadline` it waits
  /// instead, which raises at once.
  bool test(request& r, const detail::call& c, detail::clock::time_point deadline) {
    if (!r.msg_) return true;
    if (!r.done()) {
      if (detail::clock::now() < deadline) return false;
      wait(r, c, deadline);
      return true;
    }
    wait(r, c, deadline);  // done: returns at once, or raises its failure
    return true;
  }

  /// Puts this rank's call on the board, where waiting peers compare it with theirs, then
  /// raises the world's abort if there is one: a rank whose part of the calls after a mismatch
  /// involves no rank that raised would otherwise go on returning normally (tests/mismatch
  /// finding 3).
  void publish(const detail::call& c) {
    world_->rank_state(rank_).board.publish(c.seq, c.fp);
    if (world_->aborted()) raise_abort(c, -1);
  }

  [[nodiscard]] std::byte* segment(int r) noexcept { return world_->segment(r); }
  [[nodiscard]] std::size_t segment_bytes() const noexcept { return world_->segment_bytes(); }
  void segment_barrier(const detail::call& c, detail::clock::time_point deadline) {
    const std::uint32_t gen = world_->barrier_generation();
    if (!world_->barrier_arrive())
      detail::wait_on(
          world_->rank_state(rank_).bell, false,
          [&] { return world_->barrier_generation() != gen; }, [&] { poll(c, deadline, -1); },
          world_->tuning());
    // Every rank published its call before arriving: all must be in this very call.
    for (int r = 0; r < size(); ++r) {
      if (r == rank_) continue;
      auto theirs = world_->rank_state(r).board.lookup(c.seq);
      if (!theirs || !(*theirs == c.fp)) {
        const std::string what =
            theirs ? detail::mismatch_text(rank_, c.fp, r, *theirs)
                   : "mismatched collective: rank " + std::to_string(rank_) + " called " +
                         c.fp.describe() + " as call #" + std::to_string(c.seq) + " but rank " +
                         std::to_string(r) + " reached the barrier from another call";
        world_->abort(errc::mismatch, what, r, rank_);
        throw error(errc::mismatch, c.name_str(), c.seq, rank_, r, what);
      }
    }
  }

  /// Fails every rank's current and future waits (used when a rank's thread throws).
  void abort(errc code, const std::string& what) { world_->abort(code, what); }

  /// Runs `fn(comm)` on `n` threads, each with a `communicator<inproc, Algorithm>` of rank
  /// 0..n-1 (Algorithm defaults to tutti::automatic). Returns when every rank has returned. If
  /// any rank throws, the others' waits are released with tutti::error(errc::aborted), and the
  /// first rank's exception (the cause, not the aborts it caused) is rethrown here. A rank
  /// waiting for a rank whose `fn` already returned raises tutti::error(errc::peer_lost) naming
  /// it, without waiting for the timeout.
  ///
  /// Defined in tutti/run.hpp (included by tutti/tutti.hpp): it builds communicators, which
  /// sit above the transports, so this header only declares it.
  template <class Algorithm, class Fn>
  static void run(int n, Fn&& fn, const options& opts = {});
  template <class Fn>
  static void run(int n, Fn&& fn, const options& opts = {});

 private:
  request make(int peer, const detail::call& c, detail::space s, std::uint64_t tag, bool is_send) {
    if (peer < 0 || peer >= size())
      throw error(errc::invalid_argument, c.name_str(), c.seq, rank_, peer,
                  "peer rank out of range [0, " + std::to_string(size()) + ")");
    request r;
    r.msg_ = std::make_unique<detail::inproc_message>();
    r.msg_->tag = tag;
    r.msg_->seq = c.seq;
    r.msg_->fp = c.fp;
    r.msg_->owner = rank_;
    r.world_ = world_;
    r.channel_ = is_send ? &world_->channel(rank_, peer, s) : &world_->channel(peer, rank_, s);
    r.is_send_ = is_send;
    r.peer_ = peer;
    return r;
  }

  /// Raises the world's abort record in call c, naming `peer` (for a mismatch, a rank whose
  /// call differs from this rank's, if one is on the board).
  [[noreturn]] void raise_abort(const detail::call& c, int peer) const {
    const auto rec = world_->abort_reason();
    // The rank the record is about, or, if that is this rank, the one that wrote it.
    if (rec.subject >= 0 && rec.subject != rank_)
      peer = rec.subject;
    else if (rec.writer >= 0 && rec.writer != rank_)
      peer = rec.writer;
    throw error(rec.code, c.name_str(), c.seq, rank_,
                rec.code == errc::mismatch
                    ? detail::disagreeing_rank(
                          c, rank_, size(), peer,
                          [&](int q) -> const auto& { return world_->rank_state(q).board; })
                    : peer,
                rec.what);
  }

  void poll(const detail::call& c, detail::clock::time_point deadline, int peer) {
    if (world_->aborted()) raise_abort(c, peer);
    if (c.compared()) {
      for (int r = 0; r < size(); ++r) {
        if (r == rank_) continue;
        auto theirs = world_->rank_state(r).board.lookup(c.seq);
        if (theirs && !(*theirs == c.fp)) {
          const std::string what = detail::mismatch_text(rank_, c.fp, r, *theirs);
          world_->abort(errc::mismatch, what, r, rank_);
          throw error(errc::mismatch, c.name_str(), c.seq, rank_, r, what);
        }
      }
    }
    for (int r = 0; r < size(); ++r)
      if ((peer < 0 || r == peer) && r != rank_ && world_->exited(r)) {
        // A rank that failed records why before it is marked exited, perhaps just after the
        // look above: the mark's release orders the record, so a second look finds it.
        if (world_->aborted()) raise_abort(c, peer);
        throw error(
            errc::peer_lost, c.name_str(), c.seq, rank_, r,
            "rank " + std::to_string(r) + " returned from its function without making this call");
      }
    if (detail::clock::now() >= deadline)
      throw error(errc::timeout, c.name_str(), c.seq, rank_, peer,
                  peer >= 0 ? "timed out waiting for rank " + std::to_string(peer)
                            : "timed out waiting for the other ranks");
  }

  std::shared_ptr<detail::inproc_world> world_;
  int rank_;
};

}  // namespace tutti::inline v0

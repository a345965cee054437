#pragma once
/// \file
/// tutti::shm: ranks are processes on one host, joined through one POSIX shared-memory
/// segment. Models point_to_point (per-pair rings, see detail/shm_channels.hpp),
/// fused_receive and shared_segment (per-rank slots and a flag barrier that also compares the
/// ranks' calls), so the direct algorithms copy through shared memory.
///
/// Waits spin briefly, then sleep on a futex in the segment. While waiting a rank checks its
/// deadline, the abort record and whether every peer process is still alive, so a rank that
/// dies is reported by every other rank within a sleep slice (20 ms), naming it.
///
/// Its parts, in detail/: shm_layout (the segment's blocks, slots, lines and rings),
/// shm_segment (creating, attaching and sweeping the segment; watching peer processes),
/// shm_channels (the per-pair rings), shm_single_copy (large user messages copied straight
/// between the processes, by both ends), shm_state (what one rank holds of the world),
/// shm_failure (beats, stopped peers, abort records, a slow wait's poll), shm_flags (the
/// segment barrier and the line exchange), shm_join (joining a world once its rendezvous is
/// known).

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tutti/bootstrap/env.hpp"
#include "tutti/bootstrap/rendezvous.hpp"
#include "tutti/bootstrap/store.hpp"
#include "tutti/bootstrap/url.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/options.hpp"
#include "tutti/detail/board.hpp"
#include "tutti/detail/call.hpp"
#include "tutti/detail/cost.hpp"
#include "tutti/detail/shm_channels.hpp"
#include "tutti/detail/shm_failure.hpp"
#include "tutti/detail/shm_flags.hpp"
#include "tutti/detail/shm_join.hpp"
#include "tutti/detail/shm_layout.hpp"
#include "tutti/detail/shm_request.hpp"
#include "tutti/detail/shm_segment.hpp"
#include "tutti/detail/shm_state.hpp"
#include "tutti/detail/split.hpp"
#include "tutti/detail/wait.hpp"
#include "tutti/transport/concepts.hpp"

namespace tutti::inline v0 {

class shm {
 public:
  using memory_space = host_memory;
  /// Defaults for tutti::automatic: a flag hand-off through shared memory costs well under a
  /// microsecond; a point-to-point byte is copied twice (in and out of a ring); a segment byte
  /// is copied once each way by every rank at once.
  static constexpr cost_model costs{.alpha_us = 0.5,
                                    .beta_us_per_byte = 1.0 / 3000.0,
                                    .gamma_us_per_byte = 1.0 / 8000.0,
                                    .segment_beta_us_per_byte = 1.0 / 8000.0};

  /// A posted send or receive; waited on with `shm::wait` (detail/shm_request.hpp).
  using request = detail::shm_request;

  /// Joins the world whose segment `name` rank 0 created (rank 0: creates it). Prefer
  /// `communicator<shm>::from_env()` / `from_url()`, which run the rendezvous for you.
  explicit shm(std::shared_ptr<detail::shm_state> s) : s_(std::move(s)) {}

  [[nodiscard]] int rank() const noexcept { return s_->rank; }
  /// The segment's name in /dev/shm — unlinked by the time the world formed; for diagnostics.
  [[nodiscard]] const std::string& segment_name() const noexcept { return s_->name; }
  [[nodiscard]] int size() const noexcept { return s_->size; }

  [[nodiscard]] request isend(int peer, std::span<const std::byte> data, const detail::call& c,
                              detail::space sp, std::uint64_t tag) {
    request r = make(peer, c, sp, tag, true);
    r.op_->send_buf = data.data();
    r.op_->bytes = data.size();
    s_->channels.post(r.op_.get());
    return r;
  }

  [[nodiscard]] request irecv(int peer, std::span<std::byte> data, const detail::call& c,
                              detail::space sp, std::uint64_t tag) {
    request r = make(peer, c, sp, tag, false);
    r.op_->recv_buf = data.data();
    r.op_->bytes = data.size();
    s_->channels.post(r.op_.get());
    return r;
  }

  /// Receives a message and reduces it into `data` straight out of the ring.
  [[nodiscard]] request irecv_reduce(int peer, std::span<std::byte> data, const detail::call& c) {
    request r = make(peer, c, detail::space::collective, 0, false);
    r.op_->recv_buf = data.data();
    r.op_->bytes = data.size();
    r.op_->fuse = &c.red;
    s_->channels.post(r.op_.get());
    return r;
  }

  /// Waits for `r` until `deadline`, moving every posted message meanwhile.
  void wait(request& r, const detail::call& c, detail::clock::time_point deadline) {
    if (!r.op_) return;
    detail::shm_op* op = r.op_.get();
    auto& st = *s_;
    auto ready = [&] {
      st.channels.progress();
      return op->complete;
    };
    if (!ready()) {
      // A single-copy send completes when its receiver has copied it: spin through the copy
      // (at 4 bytes a nanosecond or faster) before sleeping, rather than pay a wake-up after.
      detail::wait_tuning tune = st.tuning;
      if (op->ack != 0 && tune.spin_for > std::chrono::nanoseconds::zero())
        tune.spin_for += std::chrono::nanoseconds(op->bytes / 4);
      detail::wait_on(
          st.view.block(st.rank).bell, true, ready,
          [&] { detail::shm_poll(st, c, deadline, op->peer, ready); }, tune);
    }
    if (op->failed) throw error(errc::mismatch, c.name_str(), c.seq, st.rank, op->peer, op->error);
    st.give_op(std::move(r.op_));
  }

  /// Moves every posted message as far as it goes without waiting; true once `r` is done (as
  /// after `wait`). Past `deadline` it waits instead, which raises at once. Every millisecond
  /// or so it looks at what a wait looks at before it sleeps (aborts, mismatched calls, dead
  /// peers), so a rank that polls a message from a dead peer learns of it as a waiting one does.
  bool test(request& r, const detail::call& c, detail::clock::time_point deadline) {
    if (!r.op_) return true;
    s_->channels.progress();
    if (!r.op_->complete) {
      const auto now = detail::clock::now();
      if (now >= deadline) {
        wait(r, c, deadline);
        return true;
      }
      if (now - s_->last_poll >= std::chrono::milliseconds(1)) {
        const detail::shm_op* op = r.op_.get();
        detail::shm_poll(*s_, c, deadline, op->peer, [op] { return op->complete; });
      }
      return false;
    }
    if (r.op_->failed)
      throw error(errc::mismatch, c.name_str(), c.seq, s_->rank, r.op_->peer, r.op_->error);
    s_->give_op(std::move(r.op_));
    return true;
  }

  /// Puts this rank's call on its board, where waiting peers compare it with theirs, then
  /// raises the world's abort record if there is one: a rank whose part of the calls after a
  /// mismatch involves no rank that raised (sends that fit in the rings, say) would otherwise
  /// go on returning normally (tests/mismatch finding 3).
  void publish(const detail::call& c) {
    auto& me = s_->view.block(s_->rank);
    me.board.publish(c.seq, c.fp);
    me.beat.store(++s_->beats, std::memory_order_relaxed);
    if (s_->view.aborted()) detail::shm_raise_abort(*s_, c, -1);
  }

  [[nodiscard]] std::byte* segment(int r) noexcept { return s_->view.slot(r); }
  [[nodiscard]] std::size_t segment_bytes() const noexcept { return s_->view.layout().slot_bytes; }

  /// Returns once every rank arrived; raises tutti::error(errc::mismatch) if any rank arrived
  /// from a different call.
  void segment_barrier(const detail::call& c, detail::clock::time_point deadline) {
    detail::shm_segment_barrier(*s_, c, deadline);
  }

  /// Payloads up to this many bytes travel in flagged cache lines (line_exchange).
  [[nodiscard]] static constexpr std::size_t line_capacity() noexcept {
    return detail::shm_line_capacity;
  }

  /// Publishes this rank's `n` bytes for call `c` in its next half of lines.
  void lines_put(const detail::call& c, const std::byte* data, std::size_t n) {
    detail::shm_lines_put(*s_, c, data, n);
  }
  /// Waits for rank q's `n` bytes of the call this rank last published and copies them out.
  void lines_get(int q, const detail::call& c, std::byte* out, std::size_t n,
                 detail::clock::time_point deadline) {
    detail::shm_lines_get(*s_, q, c, out, n, deadline);
  }

  /// Fails every rank's current and future waits with `code` and `what`.
  void abort(errc code, const std::string& what) { s_->view.abort(code, what); }

  /// This rank's endpoint of the world its launcher started (torchrun, tutti::spawn, Open MPI,
  /// MPICH, Slurm: see bootstrap/env.hpp). The segment's name travels through the store at
  /// MASTER_ADDR:MASTER_PORT where one is set (rank 0 serves it; under torchrun its agent
  /// does), else — under mpirun or srun — through a file only this user can read, in a private
  /// directory keyed by the launcher process. Every rank must be on this host.
  [[nodiscard]] static shm from_env(const options& opts = {}) {
    const bootstrap::world_info w = bootstrap::world_from_env();
    const std::string one_host =
        "tutti::shm needs every rank on one host, but the launcher reports " +
        std::to_string(w.local_size) + " of " + std::to_string(w.size) +
        " ranks here; use tutti::gloo across hosts";
    if (w.local_size != w.size) throw error(errc::invalid_argument, "", 0, w.rank, -1, one_host);
    return sweeping_on_failure(w.rank, [&] {
      const bootstrap::rendezvous r = bootstrap::rendezvous_from_env(w, "shm", opts, one_host);
      shm t = join_through(r, opts);
      r.remove_file();  // everyone attached: nobody reads it again
      return t;
    });
  }

  /// This rank's endpoint, meeting the others through the store an init URL names
  /// (`tcp://host:port` — rank 0 serves —, `file:///path`, `env://`).
  /// Runs a bootstrap; if it fails on a rank other than 0, removes the segments whose creator
  /// died (rank 0 may have died after creating its segment, before anyone learned the name,
  /// e.g. with the tcp:// store it served) before passing the error on.
  template <class F>
  static shm sweeping_on_failure(int rank, F&& f) {
    try {
      return f();
    } catch (...) {
      if (rank != 0) (void)detail::shm_sweep_orphans();
      throw;
    }
  }

  [[nodiscard]] static shm from_url(std::string_view url, int rank, int size,
                                    const options& opts = {}) {
    const auto u = bootstrap::parse_init_url(url);
    return sweeping_on_failure(rank, [&] {
      return join_through(bootstrap::rendezvous_from_url(u, rank, size, "shm", opts), opts);
    });
  }

  /// Creates (rank 0) or attaches to the segment and waits until all `size` ranks attached,
  /// then unlinks its name. `publish(name)` runs on rank 0; `fetch()` returns the name on the
  /// others. Raises tutti::error(errc::timeout) naming the ranks that never attached.
  template <class Publish, class Fetch>
  [[nodiscard]] static shm join(int rank, int size, Publish&& publish, Fetch&& fetch,
                                const options& opts = {}) {
    return shm(detail::shm_join(rank, size, publish, fetch, opts));
  }

  /// Waits as for `ranks` processes on this machine (never fewer than this world's): a world
  /// that is one level of a larger one (tutti::layered's ranks of one host, on a machine that
  /// runs other "hosts" too) shares the CPUs with ranks it does not know of, and spinning
  /// while they need a CPU slows everyone. Call before the first collective.
  void share_machine(int ranks) noexcept {
    s_->machine_ranks = std::max({ranks, s_->size, s_->machine_ranks});
    s_->tuning = detail::wait_tuning::for_host(s_->machine_ranks);
  }
  /// Ranks whose waits share this machine's CPUs as far as this rank knows: the world's size,
  /// or more after share_machine or in a split's child (its parent's).
  [[nodiscard]] int machine_ranks() const noexcept { return s_->machine_ranks; }

  /// This rank's endpoint in the child `p` plans (communicator::split): see join_split. The
  /// child waits as crowded as this world: the parent's other ranks still run.
  [[nodiscard]] std::optional<shm> split(const detail::split_plan& p,
                                         const detail::split_exchange& exchange,
                                         const options& opts) {
    std::optional<shm> child = join_split(p, exchange, opts);
    if (child) child->share_machine(s_->machine_ranks);
    return child;
  }
  /// This rank's endpoint in the child `p` plans over any parent on one host (a shm world, or
  /// the ranks of one host in a gloo world: tutti::split_host): a segment of its own, which the
  /// child's rank 0 creates; its name reaches the other members through `exchange` (an
  /// all-gather over the parent, which every parent rank joins once, members or not). The
  /// child watches its ranks' processes as any world does, so a rank that dies is named there
  /// within a sleep slice too.
  [[nodiscard]] static std::optional<shm> join_split(const detail::split_plan& p,
                                                     const detail::split_exchange& exchange,
                                                     const options& opts) {
    if (!p.joins()) {
      (void)exchange({});
      return std::nullopt;
    }
    bool exchanged = false;
    std::vector<std::string> names;
    auto publish = [&](const std::string& name) {
      exchanged = true;
      names = exchange(name);
    };
    auto fetch = [&] {
      exchanged = true;
      names = exchange({});
      const std::string& name = names[static_cast<std::size_t>(p.members[0])];
      if (name.empty() || name[0] == '!')
        throw error(errc::transport_failure, "", 0, p.rank, 0,
                    "tutti::shm: the child's rank 0 (rank " + std::to_string(p.members[0]) +
                        " of the parent) could not create its segment" +
                        (name.empty() ? std::string() : ": " + name.substr(1)));
      return name;
    };
    try {
      return shm(detail::shm_join(p.rank, p.size, publish, fetch, opts));
    } catch (const std::exception& e) {
      // The others wait in the exchange for this rank's part: tell them why it is missing.
      if (!exchanged) (void)exchange(std::string("!") + e.what());
      throw;
    }
  }

 private:
  request make(int peer, const detail::call& c, detail::space sp, std::uint64_t tag, bool is_send) {
    if (peer < 0 || peer >= size() || peer == rank())
      throw error(errc::invalid_argument, c.name_str(), c.seq, rank(), peer,
                  "peer must be another rank in [0, " + std::to_string(size()) + ")");
    if (s_->broken)
      throw error(errc::aborted, c.name_str(), c.seq, rank(), peer,
                  "an earlier call abandoned a message: this communicator cannot send any more");
    request r;
    r.op_ = s_->take_op();
    r.op_->is_send = is_send;
    r.op_->sp = sp;
    r.op_->peer = peer;
    r.op_->tag = tag;
    r.op_->seq = c.seq;
    r.op_->fp = c.fp;
    r.s_ = s_.get();
    return r;
  }

  /// Joins the world `r` meets in: the segment's name travels under r.key.
  [[nodiscard]] static shm join_through(const bootstrap::rendezvous& r, const options& opts) {
    return join(
        r.rank, r.size, [&](const std::string& name) { r.st->set_string(r.key, name); },
        [&] { return r.st->get_string(r.key, opts.timeout); }, opts);
  }

  std::shared_ptr<detail::shm_state> s_;
};

}  // namespace tutti::inline v0

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

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tutti/bootstrap/env.hpp"
#include "tutti/bootstrap/file_store.hpp"
#include "tutti/bootstrap/store.hpp"
#include "tutti/bootstrap/url.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/options.hpp"
#include "tutti/detail/call.hpp"
#include "tutti/detail/cost.hpp"
#include "tutti/detail/shm_channels.hpp"
#include "tutti/detail/shm_layout.hpp"
#include "tutti/detail/shm_segment.hpp"
#include "tutti/detail/wait.hpp"
#include "tutti/transport/concepts.hpp"

namespace tutti::inline v0 {

namespace detail {

/// Everything one rank holds of a shm world. Lives on the heap: requests point at it.
struct shm_state {
  shm_state(shm_mapping m, const shm_layout& l, int r, int n)
      : map(std::move(m)),
        view(map.base(), l),
        rank(r),
        size(n),
        channels(view, r, n),
        tuning(wait_tuning::for_host(n)) {}
  shm_state(const shm_state&) = delete;
  shm_state& operator=(const shm_state&) = delete;
  ~shm_state() {
    view.block(rank).state.store(static_cast<std::uint32_t>(shm_rank_state::closed),
                                 std::memory_order_release);
    for (int q = 0; q < size; ++q) view.block(q).bell.ring(true);
  }

  shm_mapping map;
  shm_view view;
  int rank;
  int size;
  shm_channels channels;
  shm_watch watch;
  wait_tuning tuning;
  std::uint64_t barrier_gen = 0;
  std::uint64_t line_gen = 0;
  std::string name;
  bool broken = false;  // a request died mid-message: the channels are out of step
  // Liveness (see shm_rank_block::beat): this rank's count, when it last stored it, and per
  // peer the value last seen and since when, observed in the polls of slow waits.
  std::uint64_t beats = 0;
  clock::time_point last_beat{};
  clock::time_point last_poll{};
  struct beat_seen {
    std::uint64_t value = 0;
    clock::time_point since{};
  };
  std::vector<beat_seen> seen;
};

/// Slot and channel sizes: TUTTI_SHM_SLOT_BYTES / TUTTI_SHM_CHANNEL_BYTES on rank 0 or defaults.
[[nodiscard]] inline shm_layout shm_default_layout(int ranks) {
  auto read = [](const char* var, std::size_t fallback, std::size_t lo, std::size_t hi) {
    const std::string s = env_string(var);
    if (s.empty()) return fallback;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
    if (end == s.c_str() || *end != '\0' || v < lo || v > hi)
      throw error(errc::invalid_argument, "", 0, -1, -1,
                  std::string(var) + "=" + s + " is not a byte count in [" + std::to_string(lo) +
                      ", " + std::to_string(hi) + "]");
    return static_cast<std::size_t>(v);
  };
  shm_layout l;
  l.ranks = static_cast<std::size_t>(ranks);
  l.slot_bytes =
      round_up(read("TUTTI_SHM_SLOT_BYTES", std::size_t{1} << 20, 8192, std::size_t{1} << 30),
               shm_layout::page);
  // Rings: 64 KiB per pair and space up to 16 ranks, smaller beyond (the pair count grows as p²).
  std::size_t ring = ranks <= 16 ? std::size_t{64} << 10 : std::size_t{16} << 10;
  ring = read("TUTTI_SHM_CHANNEL_BYTES", ring, 4096, std::size_t{64} << 20);
  std::size_t pow2 = 4096;
  while (pow2 < ring) pow2 <<= 1;
  l.channel_bytes = pow2;
  return l;
}

}  // namespace detail

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

  /// A posted send or receive; waited on with `shm::wait`. Destroyed unwaited, it withdraws
  /// its message (a message already partly moved breaks the communicator's channels).
  class request {
   public:
    request() = default;
    request(request&&) noexcept = default;
    request& operator=(request&& o) noexcept {
      if (this != &o) {
        release();
        op_ = std::move(o.op_);
        s_ = std::move(o.s_);
      }
      return *this;
    }
    request(const request&) = delete;
    request& operator=(const request&) = delete;
    ~request() { release(); }
    [[nodiscard]] bool done() const noexcept { return !op_ || op_->complete; }

   private:
    friend class shm;
    void release() noexcept {
      if (op_ && !op_->complete && !s_->channels.cancel(op_.get())) {
        s_->broken = true;
        s_->view.abort(errc::aborted, "rank " + std::to_string(s_->rank) +
                                          " abandoned a message half sent or received");
      }
      op_.reset();
    }
    std::unique_ptr<detail::shm_op> op_;
    std::shared_ptr<detail::shm_state> s_;
  };

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
    if (!ready())
      detail::wait_on(
          st.view.block(st.rank).bell, true, ready, [&] { poll(c, deadline, op->peer, ready); },
          st.tuning);
    if (op->failed) throw error(errc::mismatch, c.name_str(), c.seq, st.rank, op->peer, op->error);
    r.op_.reset();
  }

  /// Puts this rank's call on its board, where waiting peers compare it with theirs, then
  /// raises the world's abort record if there is one: a rank whose part of the calls after a
  /// mismatch involves no rank that raised (sends that fit in the rings, say) would otherwise
  /// go on returning normally (tests/mismatch finding 3).
  void publish(const detail::call& c) {
    auto& me = s_->view.block(s_->rank);
    me.board.publish(c.seq, c.fp);
    me.beat.store(++s_->beats, std::memory_order_relaxed);
    if (s_->view.aborted()) raise_abort(c, -1);
  }

  [[nodiscard]] std::byte* segment(int r) noexcept { return s_->view.slot(r); }
  [[nodiscard]] std::size_t segment_bytes() const noexcept { return s_->view.layout().slot_bytes; }

  /// Returns once every rank arrived; raises tutti::error(errc::mismatch) if any rank arrived
  /// from a different call.
  void segment_barrier(const detail::call& c, detail::clock::time_point deadline) {
    auto& st = *s_;
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
      detail::wait_on(
          st.view.block(st.rank).bell, true, arrived, [&] { poll(c, deadline, -1, arrived); },
          st.tuning);
    for (int q = 0; q < st.size; ++q) {
      if (q == st.rank) continue;
      const auto& theirs = st.view.block(q).barrier.rec[g % 2];
      const std::uint64_t seq = theirs.seq.load(std::memory_order_relaxed);
      const auto fp = detail::fingerprint::unpack(theirs.head.load(std::memory_order_relaxed),
                                                  theirs.count.load(std::memory_order_relaxed));
      if (seq != c.seq || !(fp == c.fp)) {
        const std::string what = seq == c.seq
                                     ? detail::mismatch_text(st.rank, c.fp, q, fp)
                                     : "mismatched collective: rank " + std::to_string(st.rank) +
                                           " is in call #" + std::to_string(c.seq) + " " +
                                           c.fp.describe() + " but rank " + std::to_string(q) +
                                           " reached the barrier from call #" +
                                           std::to_string(seq) + " " + fp.describe();
        st.view.abort(errc::mismatch, what, q);
        throw error(errc::mismatch, c.name_str(), c.seq, st.rank, q, what);
      }
    }
  }

  /// Payloads up to this many bytes travel in flagged cache lines (line_exchange).
  [[nodiscard]] static constexpr std::size_t line_capacity() noexcept {
    return detail::shm_line_capacity;
  }

  /// Publishes this rank's `n` bytes for call `c` in its next half of lines.
  void lines_put(const detail::call& c, const std::byte* data, std::size_t n) {
    auto& st = *s_;
    const std::uint64_t g = ++st.line_gen;
    const std::size_t h = g % 2;
    auto* first = reinterpret_cast<detail::shm_first_line*>(st.view.line(st.rank, h, 0));
    first->seq = c.seq;
    first->fp_head = c.fp.packed_head();
    first->fp_count = c.fp.count;
    std::size_t at = std::min(n, detail::shm_first_line::payload);
    if (at != 0) std::memcpy(first->data, data, at);
    first->tag.store(g, std::memory_order_release);
    for (std::size_t i = 1; at < n; ++i) {
      auto* line = reinterpret_cast<detail::shm_line*>(st.view.line(st.rank, h, i));
      const std::size_t k = std::min(n - at, detail::shm_line::payload);
      std::memcpy(line->data, data + at, k);
      line->tag.store(g, std::memory_order_release);
      at += k;
    }
    for (int q = 0; q < st.size; ++q)
      if (q != st.rank) st.view.block(q).bell.ring(true);
  }

  /// Waits for rank q's `n` bytes of the call this rank last published and copies them out.
  void lines_get(int q, const detail::call& c, std::byte* out, std::size_t n,
                 detail::clock::time_point deadline) {
    auto& st = *s_;
    const std::uint64_t g = st.line_gen;
    const std::size_t h = g % 2;
    auto await = [&](const std::atomic<std::uint64_t>& tag) {
      auto ready = [&] { return tag.load(std::memory_order_acquire) == g; };
      if (!ready())
        detail::wait_on(
            st.view.block(st.rank).bell, true, ready, [&] { poll(c, deadline, q, ready); },
            st.tuning);
    };
    // The writer stores the lines in order, each tag after its payload: once the last line's
    // tag shows this round, every line before it is complete too (release/acquire). Spinning
    // on that one line keeps this rank from pulling lines away from the writer as it fills them.
    const std::size_t extra =
        n > detail::shm_first_line::payload
            ? (n - detail::shm_first_line::payload + detail::shm_line::payload - 1) /
                  detail::shm_line::payload
            : 0;
    const auto* first = reinterpret_cast<const detail::shm_first_line*>(st.view.line(q, h, 0));
    if (extra == 0)
      await(first->tag);
    else
      await(reinterpret_cast<const detail::shm_line*>(st.view.line(q, h, extra))->tag);
    const auto fp = detail::fingerprint::unpack(first->fp_head, first->fp_count);
    if (first->tag.load(std::memory_order_acquire) != g || first->seq != c.seq || !(fp == c.fp)) {
      const std::string what = first->seq == c.seq
                                   ? detail::mismatch_text(st.rank, c.fp, q, fp)
                                   : "mismatched collective: rank " + std::to_string(st.rank) +
                                         " is in call #" + std::to_string(c.seq) + " " +
                                         c.fp.describe() + " but rank " + std::to_string(q) +
                                         " sent from call #" + std::to_string(first->seq) + " " +
                                         fp.describe();
      st.view.abort(errc::mismatch, what, q);
      throw error(errc::mismatch, c.name_str(), c.seq, st.rank, q, what);
    }
    std::size_t at = std::min(n, detail::shm_first_line::payload);
    if (at != 0) std::memcpy(out, first->data, at);
    for (std::size_t i = 1; at < n; ++i) {
      const auto* line = reinterpret_cast<const detail::shm_line*>(st.view.line(q, h, i));
      const std::size_t k = std::min(n - at, detail::shm_line::payload);
      std::memcpy(out + at, line->data, k);
      at += k;
    }
  }

  /// Fails every rank's current and future waits with `code` and `what`.
  void abort(errc code, const std::string& what) { s_->view.abort(code, what); }

  /// This rank's endpoint of the world its launcher started (torchrun, tutti::spawn, Open MPI,
  /// MPICH, Slurm: see bootstrap/env.hpp). The segment's name travels through the store at
  /// MASTER_ADDR:MASTER_PORT where one is set (rank 0 serves it), else — under mpirun, srun,
  /// or torchrun whose agent already serves MASTER_PORT — through a file only this user can
  /// read, in a private directory keyed by the launcher process. Every rank must be on this
  /// host.
  [[nodiscard]] static shm from_env(const options& opts = {}) {
    const bootstrap::world_info w = bootstrap::world_from_env();
    if (w.local_size != w.size)
      throw error(errc::invalid_argument, "", 0, w.rank, -1,
                  "tutti::shm needs every rank on one host, but the launcher reports " +
                      std::to_string(w.local_size) + " of " + std::to_string(w.size) +
                      " ranks here; use tutti::gloo across hosts");
    const std::string key = next_key();
    if (!w.master_addr.empty() && w.master_port > 0 && !w.agent_store) {
      return sweeping_on_failure(w.rank, [&] {
        auto st = bootstrap::env_store(w.rank, opts.timeout, opts.store_token);
        return join_through(*st, key, w.rank, w.size, opts);
      });
    }
    const std::string path =
        bootstrap::private_dir() + "/" + bootstrap::local_job_key() + "." + key.substr(10);
    bootstrap::file_store st(path, opts.timeout);
    shm t = join_through(st, key, w.rank, w.size, opts);
    if (w.rank == 0) ::unlink(path.c_str());  // everyone attached: nobody reads it again
    return t;
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
      auto st = bootstrap::make_store(u, rank, opts.timeout, opts.store_token);
      return join_through(*st, next_key(), rank, size, opts);
    });
  }

  /// Creates (rank 0) or attaches to the segment and waits until all `size` ranks attached,
  /// then unlinks its name. `publish(name)` runs on rank 0; `fetch()` returns the name on the
  /// others. Raises tutti::error(errc::timeout) naming the ranks that never attached.
  template <class Publish, class Fetch>
  [[nodiscard]] static shm join(int rank, int size, Publish&& publish, Fetch&& fetch,
                                const options& opts = {});

 private:
  request make(int peer, const detail::call& c, detail::space sp, std::uint64_t tag, bool is_send) {
    if (peer < 0 || peer >= size() || peer == rank())
      throw error(errc::invalid_argument, c.name_str(), c.seq, rank(), peer,
                  "peer must be another rank in [0, " + std::to_string(size()) + ")");
    if (s_->broken)
      throw error(errc::aborted, c.name_str(), c.seq, rank(), peer,
                  "an earlier call abandoned a message: this communicator cannot send any more");
    request r;
    r.op_ = std::make_unique<detail::shm_op>();
    r.op_->is_send = is_send;
    r.op_->sp = sp;
    r.op_->peer = peer;
    r.op_->tag = tag;
    r.op_->seq = c.seq;
    r.op_->fp = c.fp;
    r.s_ = s_;
    return r;
  }

  /// "tutti/shm/<n>": the n-th shm world this process joins (every rank joins in one order).
  [[nodiscard]] static std::string next_key() {
    static std::atomic<unsigned> generation{0};
    return "tutti/shm/" + std::to_string(generation.fetch_add(1));
  }

  [[nodiscard]] static shm join_through(bootstrap::store& st, const std::string& key, int rank,
                                        int size, const options& opts) {
    return join(
        rank, size, [&](const std::string& name) { st.set_string(key, name); },
        [&] { return st.get_string(key, opts.timeout); }, opts);
  }

  [[nodiscard]] bool closed(int q) const noexcept {
    return s_->view.block(q).state.load(std::memory_order_acquire) ==
           static_cast<std::uint32_t>(detail::shm_rank_state::closed);
  }

  /// How long a peer's beat must stand still, while this rank watches it, before a failure
  /// names that peer as the one that stopped: several sleep slices of a waiting rank.
  static constexpr std::chrono::milliseconds stall_window{100};

  /// Beats for this rank (at most every millisecond) and notes which peers' beats moved. A
  /// gap since the last poll means a new wait: what was seen before says nothing about now.
  void watch_beats(detail::clock::time_point now) {
    auto& st = *s_;
    if (now - st.last_beat >= std::chrono::milliseconds(1)) {
      st.view.block(st.rank).beat.store(++st.beats, std::memory_order_relaxed);
      st.last_beat = now;
    }
    const bool fresh = now - st.last_poll > stall_window;
    st.last_poll = now;
    st.seen.resize(static_cast<std::size_t>(st.size));
    for (int q = 0; q < st.size; ++q) {
      auto& s = st.seen[static_cast<std::size_t>(q)];
      const std::uint64_t v = st.view.block(q).beat.load(std::memory_order_relaxed);
      if (fresh || v != s.value) s = {v, now};
    }
  }

  /// The open peer to blame at a timeout, and how long its beat stood still while this rank
  /// watched: a peer whose process is stopped (SIGSTOP, a debugger: /proc says so) if there is
  /// one — certain, where a beat standing still only suggests it, for on a busy machine a live
  /// rank may not run for a while either —, else the peer whose beat stood still longest, at
  /// least stall_window (a rank computing outside tutti). The longest still beat and then the
  /// lowest rank win among equals; -1 if no peer qualifies.
  [[nodiscard]] int stalled(detail::clock::time_point now, detail::clock::duration& still,
                            bool& is_stopped) const {
    const auto& st = *s_;
    int who = -1;
    still = stall_window;
    is_stopped = false;
    for (int q = 0; q < st.size && static_cast<std::size_t>(q) < st.seen.size(); ++q) {
      if (q == st.rank || closed(q)) continue;
      const auto d = now - st.seen[static_cast<std::size_t>(q)].since;
      const bool stopped = st.watch.stopped(q);
      if (stopped && !is_stopped) {  // the first stopped peer beats every running one
        who = q;
        still = d;
        is_stopped = true;
      } else if (stopped == is_stopped && (d > still || (who < 0 && d == still))) {
        who = q;
        still = d;
      }
    }
    return who;
  }

  /// Raises peer_lost: rank `q` died. Records it first, so that the others name `q` too: a
  /// survivor that raises this and exits without closing its communicator would otherwise be
  /// the dead rank a slower survivor finds first (the lowest gone rank).
  [[noreturn]] void raise_died(const detail::call& c, int q) {
    const std::string text = "rank " + std::to_string(q) + " (pid " +
                             std::to_string(s_->view.block(q).pid.load(std::memory_order_relaxed)) +
                             ") died without closing its communicator";
    s_->view.abort(errc::peer_lost, text, q);
    throw error(errc::peer_lost, c.name_str(), c.seq, s_->rank, q, text);
  }

  /// Raises the world's abort record in call c. An abort of kind `aborted` is a consequence (a
  /// rank abandoned a message while it unwound from an error, typically a peer's death): a dead
  /// peer is the cause to name. For a mismatch, a rank whose call differs from this rank's if
  /// one is on the board; else the rank the record blames (unless that is this rank), else
  /// `peer`.
  [[noreturn]] void raise_abort(const detail::call& c, int peer) {
    auto& st = *s_;
    auto [code, what, blame] = st.view.abort_reason();
    if (code == errc::aborted)
      for (int q = 0; q < st.size; ++q)
        if (q != st.rank && !closed(q) && st.watch.gone(q)) raise_died(c, q);
    if (blame >= 0 && blame != st.rank) peer = blame;
    throw error(code, c.name_str(), c.seq, st.rank,
                code == errc::mismatch ? detail::disagreeing_rank(c, st.rank, st.size, peer,
                                                                  [&](int q) -> const auto& {
                                                                    return st.view.block(q).board;
                                                                  })
                                       : peer,
                what);
  }

  /// Runs before every sleep: abort record, peers' boards, peers' processes, the deadline.
  /// `ready` is what the caller waits for: a peer may write its last message and exit between
  /// the caller's last look and this one, so a lost peer is reported only if it still is not.
  /// A timeout names the peer whose beat stood still (stopped, or computing outside tutti for
  /// longer than the timeout) whoever this rank waited on, and records it for the others.
  template <class Ready>
  void poll(const detail::call& c, detail::clock::time_point deadline, int peer, Ready&& ready) {
    auto& st = *s_;
    const auto now = detail::clock::now();
    watch_beats(now);
    if (st.view.aborted()) raise_abort(c, peer);
    for (int q = 0; q < st.size; ++q) {
      if (q == st.rank) continue;
      if (c.compared()) {
        auto theirs = st.view.block(q).board.lookup(c.seq);
        if (theirs && !(*theirs == c.fp)) {
          const std::string what = detail::mismatch_text(st.rank, c.fp, q, *theirs);
          st.view.abort(errc::mismatch, what, q);
          throw error(errc::mismatch, c.name_str(), c.seq, st.rank, q, what);
        }
      }
      if (!closed(q) && st.watch.gone(q) && !ready()) raise_died(c, q);
    }
    // Only then ranks that closed cleanly (say, after raising this same death themselves):
    // a death is the cause worth naming.
    for (int q = 0; q < st.size; ++q)
      if (q != st.rank && (peer < 0 || peer == q) && closed(q) && !ready())
        throw error(
            errc::peer_lost, c.name_str(), c.seq, st.rank, q,
            "rank " + std::to_string(q) + " closed its communicator without making this call");
    if (now < deadline) return;
    std::string text = peer >= 0 ? "timed out waiting for rank " + std::to_string(peer)
                                 : "timed out waiting for the other ranks";
    detail::clock::duration still{};
    bool is_stopped = false;
    const int stopped = stalled(now, still, is_stopped);
    if (stopped < 0) throw error(errc::timeout, c.name_str(), c.seq, st.rank, peer, text);
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.2f", std::chrono::duration<double>(still).count());
    text += ": rank " + std::to_string(stopped) +
            (is_stopped ? " is stopped (SIGSTOP or a debugger); its beat stood still for "
                        : " made no progress for ") +
            secs + " s" + (is_stopped ? "" : " (busy outside tutti?)");
    // The others wait on the same stopped rank: tell them now, naming it, rather than let each
    // time out on whichever neighbour it waits on (or see this rank close first).
    st.view.abort(errc::timeout, "rank " + std::to_string(st.rank) + " " + text, stopped);
    throw error(errc::timeout, c.name_str(), c.seq, st.rank, stopped, text);
  }

  std::shared_ptr<detail::shm_state> s_;
};

template <class Publish, class Fetch>
shm shm::join(int rank, int size, Publish&& publish, Fetch&& fetch, const options& opts) {
  if (size < 1 || rank < 0 || rank >= size)
    throw error(errc::invalid_argument, "", 0, rank, -1,
                "tutti::shm: rank " + std::to_string(rank) + " is not in a world of " +
                    std::to_string(size));
  const auto deadline = detail::clock::now() + opts.timeout;
  std::string name;
  detail::shm_mapping map;
  detail::shm_layout layout;
  if (rank == 0) {
    (void)detail::shm_sweep_orphans();  // segments of earlier worlds whose rank 0 died early
    layout = detail::shm_default_layout(size);
    name = detail::shm_random_name(rank);
    map = detail::shm_create(name, layout);
    try {
      publish(name);
    } catch (...) {
      ::shm_unlink(name.c_str());
      throw;
    }
  } else {
    try {
      name = fetch();
    } catch (...) {
      // Rank 0 may have died after creating the segment, before publishing its name: nobody
      // can name it now, so remove every segment whose creator is gone.
      (void)detail::shm_sweep_orphans();
      throw;
    }
    std::tie(map, layout) = detail::shm_attach(name, rank, size);
  }
  auto st = std::make_shared<detail::shm_state>(std::move(map), layout, rank, size);
  st->name = name;
  auto& v = st->view;
  auto& me = v.block(rank);
  me.pid.store(static_cast<std::int32_t>(::getpid()), std::memory_order_relaxed);
  me.state.store(static_cast<std::uint32_t>(detail::shm_rank_state::attached),
                 std::memory_order_release);
  if (v.header().attached.fetch_add(1, std::memory_order_acq_rel) + 1 ==
      static_cast<std::uint32_t>(size))
    ::shm_unlink(name.c_str());  // the world is complete: nothing needs the name any more
  for (int q = 0; q < size; ++q) v.block(q).bell.ring(true);

  auto all_attached = [&] {
    return v.header().attached.load(std::memory_order_acquire) == static_cast<std::uint32_t>(size);
  };
  auto check = [&] {
    for (int q = 0; q < size; ++q) {
      const std::int32_t pid = v.block(q).pid.load(std::memory_order_relaxed);
      if (q != rank && pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) {
        ::shm_unlink(name.c_str());  // the world can never form: nobody else removes the name
        throw error(errc::peer_lost, "", 0, rank, q,
                    "tutti::shm: rank " + std::to_string(q) + " died while the world was forming");
      }
    }
    if (detail::clock::now() < deadline) return;
    ::shm_unlink(name.c_str());
    std::string missing;
    for (int q = 0; q < size; ++q)
      if (v.block(q).state.load(std::memory_order_acquire) == 0)
        missing += (missing.empty() ? "" : ", ") + std::to_string(q);
    throw error(errc::timeout, "", 0, rank, -1,
                "tutti::shm: ranks " + missing + " did not attach to the segment in time");
  };
  if (!all_attached()) detail::wait_on(me.bell, true, all_attached, check, st->tuning);
  std::vector<std::int32_t> pids(static_cast<std::size_t>(size));
  for (int q = 0; q < size; ++q)
    if (q != rank)
      pids[static_cast<std::size_t>(q)] = v.block(q).pid.load(std::memory_order_relaxed);
  st->watch = detail::shm_watch(std::move(pids));
  return shm(std::move(st));
}

}  // namespace tutti::inline v0

#pragma once
/// \file
/// Shared state of an in-process world: per-rank doorbells and call boards, per-pair message
/// channels, the abort flag, a barrier and the shared segment. Ranks are threads.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "tutti/core/error.hpp"
#include "tutti/detail/board.hpp"
#include "tutti/detail/call.hpp"
#include "tutti/detail/wait.hpp"

namespace tutti::inline v0::detail {

/// One posted send or receive. Lives on the heap, owned by its request, and never moves while
/// a channel can see it.
struct inproc_message {
  enum : std::uint32_t { posted, claimed, done, failed };
  const std::byte* send_buf = nullptr;
  std::byte* recv_buf = nullptr;
  std::size_t bytes = 0;
  const reducer* fuse = nullptr;  // receive side: recv_buf = recv_buf op message
  std::uint64_t tag = 0;
  std::uint64_t seq = 0;
  fingerprint fp;
  int owner = 0;
  std::atomic<std::uint32_t> state{posted};
  std::string error;  // written before state becomes `failed`
};

struct inproc_channel {
  std::mutex mu;
  std::deque<inproc_message*> sends;
  std::deque<inproc_message*> recvs;
};

struct inproc_rank_state {
  doorbell bell;
  call_board_row board;
};

class inproc_world {
 public:
  /// `machine_ranks`: threads of the process that share its CPUs, this world's among them
  /// (a split's child: its parent's); the waits are tuned for that many.
  explicit inproc_world(int n, std::size_t segment_bytes = std::size_t{1} << 20,
                        int machine_ranks = 0)
      : n_(n),
        machine_ranks_(std::max(n, machine_ranks)),
        ranks_(std::make_unique<inproc_rank_state[]>(static_cast<std::size_t>(n))),
        channels_(std::make_unique<inproc_channel[]>(2 * static_cast<std::size_t>(n) *
                                                     static_cast<std::size_t>(n))),
        segment_bytes_(segment_bytes),
        exited_(std::make_unique<std::atomic<bool>[]>(static_cast<std::size_t>(n))),
        tuning_(wait_tuning::for_host(machine_ranks_)),
        segments_(static_cast<std::size_t>(n)) {
    // Default-initialised (not zeroed): pages are touched only when a direct algorithm uses them.
    for (auto& seg : segments_) seg.reset(new std::byte[segment_bytes_]);
  }

  [[nodiscard]] int size() const noexcept { return n_; }
  /// The ranks whose waits share the CPUs with this world's (see the constructor).
  [[nodiscard]] int machine_ranks() const noexcept { return machine_ranks_; }
  /// How waits spin: barely at all when ranks outnumber hardware threads, where spinning only
  /// delays the rank that would make progress on this core.
  [[nodiscard]] const wait_tuning& tuning() const noexcept { return tuning_; }
  [[nodiscard]] inproc_rank_state& rank_state(int r) noexcept { return ranks_[idx(r)]; }
  [[nodiscard]] inproc_channel& channel(int src, int dst, space s) noexcept {
    return channels_[idx((static_cast<int>(s) * n_ + src) * n_ + dst)];
  }

  /// Posts `m` on the channel and, if its partner is already there, completes both.
  void post(inproc_channel& ch, inproc_message* m, bool is_send, space s) {
    inproc_message* partner = nullptr;
    {
      std::lock_guard lock(ch.mu);
      auto& other = is_send ? ch.recvs : ch.sends;
      for (auto it = other.begin(); it != other.end(); ++it) {
        if (s == space::collective || (*it)->tag == m->tag) {
          partner = *it;
          other.erase(it);
          break;
        }
      }
      if (partner == nullptr) {
        (is_send ? ch.sends : ch.recvs).push_back(m);
        return;
      }
      partner->state.store(inproc_message::claimed, std::memory_order_relaxed);
      m->state.store(inproc_message::claimed, std::memory_order_relaxed);
    }
    transfer(is_send ? m : partner, is_send ? partner : m, s);
  }

  /// Takes `m` back if no partner claimed it yet; otherwise waits for the transfer in flight
  /// (it never blocks on anything but a copy). Used when a request dies unwaited.
  void cancel(inproc_channel& ch, inproc_message* m, bool is_send) noexcept {
    {
      std::lock_guard lock(ch.mu);
      auto& mine = is_send ? ch.sends : ch.recvs;
      for (auto it = mine.begin(); it != mine.end(); ++it)
        if (*it == m) {
          mine.erase(it);
          return;
        }
    }
    while (m->state.load(std::memory_order_acquire) == inproc_message::claimed) cpu_relax();
  }

  /// What the first abort recorded: `subject` is the rank it is about (the other side of a
  /// mismatch as the writer saw it, a failed rank), `writer` the rank that wrote it (-1: none).
  struct abort_record {
    errc code = errc::aborted;
    std::string what;
    int subject = -1;
    int writer = -1;
  };

  /// Fails every rank's waits with `code` and `what`. The first abort wins; later ones keep it.
  void abort(errc code, const std::string& what, int subject = -1, int writer = -1) {
    {
      std::lock_guard lock(abort_mu_);
      if (!aborted_.load(std::memory_order_relaxed)) {
        abort_ = {code, what, subject, writer};
        aborted_.store(true, std::memory_order_release);
      }
    }
    for (int r = 0; r < n_; ++r) ranks_[idx(r)].bell.ring(false);
  }
  [[nodiscard]] bool aborted() const noexcept { return aborted_.load(std::memory_order_acquire); }

  /// Rank r's function returned: it will post nothing more, so waiting for it is pointless.
  /// So it is in every world split from this one that contains it.
  void mark_exited(int r) noexcept {
    exited_[idx(r)].store(true, std::memory_order_release);
    for (int q = 0; q < n_; ++q) ranks_[idx(q)].bell.ring(false);
    std::vector<std::pair<std::shared_ptr<inproc_world>, int>> reach;
    {
      std::lock_guard lock(children_mu_);
      for (const auto& c : children_)
        if (auto w = c.world.lock())
          for (std::size_t i = 0; i < c.members.size(); ++i)
            if (c.members[i] == r) reach.emplace_back(std::move(w), static_cast<int>(i));
    }
    for (auto& [w, child_rank] : reach) w->mark_exited(child_rank);
  }
  [[nodiscard]] bool exited(int r) const noexcept {
    return exited_[idx(r)].load(std::memory_order_acquire);
  }
  [[nodiscard]] abort_record abort_reason() {
    std::lock_guard lock(abort_mu_);
    return abort_;
  }

  // Generation barrier over all ranks.
  [[nodiscard]] std::uint32_t barrier_generation() const noexcept {
    return barrier_gen_.load(std::memory_order_acquire);
  }
  /// Returns true for the last rank to arrive, which has released the others.
  bool barrier_arrive() noexcept {
    if (barrier_arrived_.fetch_add(1, std::memory_order_acq_rel) !=
        static_cast<std::uint32_t>(n_ - 1))
      return false;
    barrier_arrived_.store(0, std::memory_order_relaxed);
    barrier_gen_.fetch_add(1, std::memory_order_acq_rel);
    for (int r = 0; r < n_; ++r) ranks_[idx(r)].bell.ring(false);
    return true;
  }

  [[nodiscard]] std::size_t segment_bytes() const noexcept { return segment_bytes_; }
  [[nodiscard]] std::byte* segment(int r) noexcept { return segments_[idx(r)].get(); }

  /// The world of split `id`'s color `color`, whose ranks are `members` (ranks of this world,
  /// in the child's order): the first member to ask creates it, the others find it. A member
  /// that exited this world already has exited the child too.
  [[nodiscard]] std::shared_ptr<inproc_world> child(std::uint64_t id, std::int64_t color,
                                                    const std::vector<int>& members) {
    std::lock_guard lock(children_mu_);
    auto& entry = forming_[{id, color}];
    if (!entry.world) {
      entry.world =
          std::make_shared<inproc_world>(static_cast<int>(members.size()), segment_bytes_,
                                         machine_ranks_);  // the parent's threads still run
      children_.push_back({entry.world, members});
      for (std::size_t i = 0; i < members.size(); ++i)
        if (exited(members[i])) entry.world->mark_exited(static_cast<int>(i));
    }
    auto w = entry.world;
    if (++entry.taken == members.size()) forming_.erase({id, color});
    return w;
  }

 private:
  static std::size_t idx(int i) noexcept { return static_cast<std::size_t>(i); }

  void transfer(inproc_message* snd, inproc_message* rcv, space s) {
    std::string problem;
    if (s == space::collective && (snd->seq != rcv->seq || !(snd->fp == rcv->fp))) {
      problem = snd->seq == rcv->seq
                    ? mismatch_text(rcv->owner, rcv->fp, snd->owner, snd->fp)
                    : "mismatched collective: rank " + std::to_string(rcv->owner) +
                          " is in call #" + std::to_string(rcv->seq) + " " + rcv->fp.describe() +
                          " but rank " + std::to_string(snd->owner) + " sent from call #" +
                          std::to_string(snd->seq) + " " + snd->fp.describe();
    } else if (snd->bytes != rcv->bytes) {
      problem = "message size mismatch: rank " + std::to_string(snd->owner) + " sent " +
                std::to_string(snd->bytes) + " bytes but rank " + std::to_string(rcv->owner) +
                " expected " + std::to_string(rcv->bytes);
    }
    if (!problem.empty()) {
      snd->error = problem;
      rcv->error = problem;
      // Abort first: a rank woken by its failed message must find the mismatch as the cause.
      if (s == space::collective) abort(errc::mismatch, problem, snd->owner, rcv->owner);
      finish(snd, inproc_message::failed);
      finish(rcv, inproc_message::failed);
      return;
    }
    if (rcv->fuse != nullptr)
      (*rcv->fuse)(rcv->recv_buf, rcv->recv_buf, snd->send_buf, snd->bytes / rcv->fuse->elem_size);
    else if (snd->bytes != 0)
      std::memcpy(rcv->recv_buf, snd->send_buf, snd->bytes);
    finish(snd, inproc_message::done);
    finish(rcv, inproc_message::done);
  }

  void finish(inproc_message* m, std::uint32_t state) noexcept {
    const int owner = m->owner;  // m may be freed by its owner once the state is stored
    m->state.store(state, std::memory_order_release);
    ranks_[idx(owner)].bell.ring(false);
  }

  int n_;
  int machine_ranks_;
  std::unique_ptr<inproc_rank_state[]> ranks_;
  std::unique_ptr<inproc_channel[]> channels_;
  std::atomic<bool> aborted_{false};
  std::mutex abort_mu_;
  abort_record abort_;
  std::atomic<std::uint32_t> barrier_arrived_{0};
  std::atomic<std::uint32_t> barrier_gen_{0};
  std::size_t segment_bytes_;
  std::unique_ptr<std::atomic<bool>[]> exited_;
  wait_tuning tuning_;
  std::vector<std::unique_ptr<std::byte[]>> segments_;

  struct child_entry {
    std::weak_ptr<inproc_world> world;
    std::vector<int> members;
  };
  struct forming_entry {
    std::shared_ptr<inproc_world> world;
    std::size_t taken = 0;
  };
  std::mutex children_mu_;
  std::vector<child_entry> children_;                                        // for mark_exited
  std::map<std::pair<std::uint64_t, std::int64_t>, forming_entry> forming_;  // until all took it
};

}  // namespace tutti::inline v0::detail

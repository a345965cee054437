// Point-to-point messages of tutti_torch::backend: send, recv and recv from any rank.
//
// Each direction between two ranks has its own lane: a thread and a two-rank world. In a group
// of 3 or more ranks a sender announces each message with an envelope carrying its tag, sent
// just before the message on the same world. A receiving lane takes the envelopes in order and
// matches each to the earliest-posted receive that wants it: one from this peer with that tag
// (`waiting`), or one from any rank (`anys_`); an envelope nobody wants yet is kept (`arrived`)
// for the next receive with its tag. A matched message joins the lane's `claims`, whose
// payloads the lane's thread takes in order (`drain`). While receives from any rank wait, a
// scout job on every receiving lane takes envelopes as they come, and a watcher (one thread
// per group) times those receives out and starts lanes from peers that begin sending later.

#include <algorithm>
#include <thread>

#include "backend.hpp"

namespace tutti_torch {

namespace {

using clock = std::chrono::steady_clock;

/// The tag envelopes travel with: no torch tag (an int) becomes it as a tutti tag.
constexpr uint64_t envelope_tag = uint64_t{1} << 40;

/// How long a lane's thread waits for an envelope before it looks at its claims again.
constexpr auto envelope_slice = std::chrono::milliseconds(10);

/// How long a scout goes on taking envelopes after the last receive from any rank was met.
constexpr auto scout_linger = std::chrono::milliseconds(2);

/// A job's work: nobody waits for it (the receives it serves complete their own).
[[nodiscard]] c10::intrusive_ptr<work> side_job(int rank) {
  return c10::make_intrusive<work>(rank, c10d::OpType::UNKNOWN, "p2p", std::vector<at::Tensor>{});
}

/// A poll that has found nothing for `waited`: yields the CPU for the first 200 µs (a reply in
/// flight comes within that), then sleeps 50 µs at a time, and 500 µs once it waited 100 ms.
void backoff(clock::duration waited) {
  if (waited < std::chrono::microseconds(200))
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(waited < std::chrono::milliseconds(100)
                                    ? std::chrono::microseconds(50)
                                    : std::chrono::microseconds(500));
}

/// Polls `w` until it is done (true, after rethrowing its error if it failed) or `until` has
/// passed (false; the call goes on). A lane's world has no deadline of its own, so its waits
/// are these polls (done() also looks for dead peers, as a blocking wait does).
bool settle(const tutti::work& w, clock::time_point until) {
  const auto start = clock::now();
  for (;;) {
    if (w.done()) {
      w.wait();
      return true;
    }
    const auto now = clock::now();
    if (now >= until) return false;
    backoff(now - start);
  }
}

/// `e` in the group's terms: tutti's errors from a lane name the ranks of its two-rank world.
[[nodiscard]] std::exception_ptr in_group_terms(std::exception_ptr e, int peer, bool sending) {
  try {
    std::rethrow_exception(e);
  } catch (const tutti::error& x) {
    return backend_error(std::string("tutti: ") + (sending ? "send to" : "recv from") + " rank " +
                         std::to_string(peer) + " failed (in the pair's own world, rank 0 " +
                         "sends and rank 1 receives): " + x.what());
  } catch (...) {
    return e;
  }
}

[[nodiscard]] std::string tag_text(uint64_t tag) {
  return std::to_string(static_cast<int>(static_cast<int64_t>(tag)));
}

}  // namespace

std::string backend::lane_key(int src, int dst) const {
  return "tutti/p2p/" + std::to_string(src) + "-" + std::to_string(dst);
}

backend::lane* backend::find_lane(int peer, bool sending) {
  std::lock_guard lock(lanes_mu_);
  const auto it = lanes_.find({peer, sending});
  return it == lanes_.end() ? nullptr : it->second.get();
}

backend::lane& backend::lane_to(int peer, bool sending) {
  TORCH_CHECK(peer >= 0 && peer < getSize() && peer != getRank(),
              "tutti: ", sending ? "send to " : "recv from ", "rank ", peer,
              ": the peer must be another rank of the group [0, ", getSize(), ")");
  std::lock_guard lock(lanes_mu_);
  auto& l = lanes_[{peer, sending}];
  if (!l) {
    l = std::make_unique<lane>();
    l->peer = peer;
    const int src = sending ? getRank() : peer;
    const int dst = sending ? peer : getRank();
    // Two ranks on one host meet over shm unless gloo was asked for (a group over shm is on
    // one host); two on different hosts over gloo.
    const bool same_host =
        hosts_[static_cast<std::size_t>(src)] == hosts_[static_cast<std::size_t>(dst)];
    const bool shm =
        over_ == transport_choice::shm || (choice_ != transport_choice::gloo && same_host);
    lane* raw = l.get();
    // The two-rank world is joined on the lane's own thread, as its first job: the caller
    // never waits for the peer to post its first message.
    raw->thread.post(side_job(getRank()), [this, raw, src, dst, sending, shm] {
      const std::string key = lane_key(src, dst);
      // Tells the receiver's watcher (receives from any rank) that messages are coming.
      if (sending && envelopes_) store_->set(key + "/open", std::vector<uint8_t>{1});
      raw->comm = join(key, sending ? 0 : 1, 2,
                       shm ? transport_choice::shm : transport_choice::gloo, envelopes_);
    });
  }
  return *l;
}

c10::intrusive_ptr<c10d::Work> backend::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  check_one(tensors, "send");
  const at::Tensor t = tensors[0].contiguous();
  lane& l = lane_to(dst, true);
  auto w = c10::make_intrusive<work>(getRank(), c10d::OpType::SEND, "send", tensors);
  l.thread.post(w, [this, &l, t, dst, tag] {
    TORCH_CHECK(l.comm, "tutti: send to rank ", dst, ": joining the two-rank world failed");
    try {
      if (envelopes_) return send_announced(l, t, dst, tag);
      visit_typed(*l.comm, t.scalar_type(), [&]<class C, class T>(C& c, type_tag<T>) {
        c.send(std::span<const T>(span_of<T>(t)), 1, static_cast<uint64_t>(tag));
      });
    } catch (...) {
      std::rethrow_exception(in_group_terms(std::current_exception(), dst, true));
    }
  });
  return w;
}

void backend::send_announced(lane& l, const at::Tensor& t, int dst, int tag) {
  const std::string what =
      "send to rank " + std::to_string(dst) + " (tag " + std::to_string(tag) + ")";
  TORCH_CHECK(l.broken.empty(), "tutti: ", what, ": ", l.broken);
  const at::Tensor env = at::full({1}, static_cast<int64_t>(tag), at::kLong);
  visit_typed(*l.comm, t.scalar_type(), [&]<class C, class T>(C& c, type_tag<T>) {
    const tutti::work e = c.isend(std::span<const int64_t>(span_of<int64_t>(env)), 1, envelope_tag);
    const tutti::work m = c.isend(std::span<const T>(span_of<T>(t)), 1, static_cast<uint64_t>(tag));
    await(l, m, {env, t}, what);
    await(l, e, {env, t}, what);
  });
}

c10::intrusive_ptr<c10d::Work> backend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  check_one(tensors, "recv");
  const at::Tensor t = tensors[0];
  lane& l = lane_to(src, false);
  auto w = c10::make_intrusive<work>(getRank(), c10d::OpType::RECV, "recv", tensors);
  w->set_source(src);
  if (!envelopes_) {
    l.thread.post(w, [&l, t, src, tag] {
      TORCH_CHECK(l.comm, "tutti: recv from rank ", src, ": joining the two-rank world failed");
      const at::Tensor d = dense(t);
      try {
        visit_typed(*l.comm, d.scalar_type(), [&]<class C, class T>(C& c, type_tag<T>) {
          c.recv(span_of<T>(d), 0, static_cast<uint64_t>(tag));
        });
      } catch (...) {
        std::rethrow_exception(in_group_terms(std::current_exception(), src, false));
      }
      copy_back(t, d);
    });
    return w;
  }
  const auto r = receive(t, tag, w);
  {
    std::lock_guard lock(any_mu_);
    r->order = ++orders_;
    // An envelope already here that nobody wanted when it came is this receive's.
    const auto it = std::find_if(l.arrived.begin(), l.arrived.end(),
                                 [&](const auto& a) { return a.first == r->tag; });
    if (it != l.arrived.end()) {
      l.arrived.erase(it);
      r->claimed = true;
      l.claims.push_back(r);
    } else {
      l.waiting.push_back(r);
    }
  }
  l.thread.post(side_job(getRank()), [this, &l, r, src] { recv_announced(l, r, src); });
  return w;
}

std::shared_ptr<backend::p2p_recv> backend::receive(const at::Tensor& t, int tag,
                                                    c10::intrusive_ptr<work> w) const {
  auto r = std::make_shared<p2p_recv>();
  r->tag = static_cast<uint64_t>(tag);
  r->t = t;
  r->d = dense(t);
  r->w = std::move(w);
  r->deadline = clock::now() + opts_.timeout;
  return r;
}

void backend::recv_announced(lane& l, const std::shared_ptr<p2p_recv>& r, int src) {
  try {
    TORCH_CHECK(l.comm, "tutti: recv from rank ", src, ": joining the two-rank world failed");
    for (;;) {
      drain(l);
      {
        std::lock_guard lock(any_mu_);
        if (r->claimed && std::find(l.claims.begin(), l.claims.end(), r) == l.claims.end())
          return;  // taken by the drain above, or by an earlier job
      }
      uint64_t tag = 0;
      if (next_envelope(l, r->deadline, tag)) {
        deposit(l, tag);
        continue;
      }
      std::lock_guard lock(any_mu_);
      if (!r->claimed)
        C10_THROW_ERROR(DistBackendError,
                        "tutti: recv from rank " + std::to_string(src) + " (tag " +
                            tag_text(r->tag) + ") timed out: no message within " +
                            std::to_string(opts_.timeout.count()) + " ms (the group's timeout)");
    }
  } catch (...) {
    const auto error = in_group_terms(std::current_exception(), src, false);
    bool mine = false;
    {
      std::lock_guard lock(any_mu_);
      const auto it = std::find(l.waiting.begin(), l.waiting.end(), r);
      if (it != l.waiting.end()) {
        l.waiting.erase(it);
        mine = true;
      }
    }
    if (mine) finish(r, error, src);  // else drain failed it
    std::rethrow_exception(error);
  }
}

c10::intrusive_ptr<c10d::Work> backend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  check_one(tensors, "recv");
  if (!envelopes_) {  // two ranks: the source is the other one
    TORCH_CHECK(getSize() == 2, "tutti: recv from any rank in a group of 1 rank: there is no ",
                "other rank to receive from");
    const int src = 1 - getRank();
    return recv(tensors, src, tag);
  }
  const at::Tensor t = tensors[0];
  auto w = c10::make_intrusive<work>(getRank(), c10d::OpType::RECVANYSOURCE, "recv from any rank",
                                     tensors);
  const auto r = receive(t, tag, w);
  lane* from = nullptr;
  bool watch = false;
  std::vector<lane*> scouts;  // receiving lanes without a scout yet
  {
    std::lock_guard lock(any_mu_);
    TORCH_CHECK(!stopping_, "tutti: the process group was shut down (destroy_process_group)");
    r->order = ++orders_;
    // Of the envelopes nobody wanted yet, the one that came first.
    uint64_t first = 0;
    std::lock_guard lanes(lanes_mu_);
    for (auto& [key, l] : lanes_) {
      if (key.second) continue;
      for (const auto& [atag, arrival] : l->arrived)
        if (atag == r->tag && (from == nullptr || arrival < first)) {
          from = l.get();
          first = arrival;
        }
    }
    if (from != nullptr) {
      from->arrived.erase(std::find_if(from->arrived.begin(), from->arrived.end(),
                                       [&](const auto& a) { return a.second == first; }));
      r->claimed = true;
      from->claims.push_back(r);
    } else {
      anys_.push_back(r);
      for (auto& [key, l] : lanes_)
        if (!key.second && !l->scouting) {
          l->scouting = true;
          scouts.push_back(l.get());
        }
      if (!watching_) {
        watching_ = true;
        watch = true;
        if (!any_thread_) any_thread_ = std::make_unique<runner>();
      }
    }
  }
  if (from != nullptr) from->thread.post(side_job(getRank()), [this, from] { drain(*from); });
  for (lane* l : scouts) l->thread.post(side_job(getRank()), [this, l] { scout(*l); });
  if (watch) any_thread_->post(side_job(getRank()), [this] { watch_any(); });
  return w;
}

bool backend::next_envelope(lane& l, std::chrono::steady_clock::time_point until, uint64_t& tag) {
  if (!l.envelope_posted) {
    std::visit(
        [&](auto& c) {
          l.envelope_wait = c.irecv(std::span<int64_t>(l.envelope.data(), 1), 0, envelope_tag);
        },
        *l.comm);
    l.envelope_posted = true;
  }
  // Waiting in slices, taking the payloads of messages claimed meanwhile (a receive from any
  // rank may claim one that came before), since their senders may be waiting for that.
  for (;;) {
    if (settle(l.envelope_wait, std::min(until, clock::now() + envelope_slice))) break;
    if (clock::now() >= until) return false;
    drain(l);
  }
  l.envelope_posted = false;
  l.envelope_wait.wait();  // its error, if it failed
  tag = static_cast<uint64_t>(l.envelope[0]);
  return true;
}

void backend::deposit(lane& l, uint64_t tag) {
  std::lock_guard lock(any_mu_);
  const auto wants = [tag](const std::shared_ptr<p2p_recv>& r) { return r->tag == tag; };
  const auto mine = std::find_if(l.waiting.begin(), l.waiting.end(), wants);
  const auto any = std::find_if(anys_.begin(), anys_.end(), wants);
  std::shared_ptr<p2p_recv> r;
  if (mine != l.waiting.end() && (any == anys_.end() || (*mine)->order < (*any)->order)) {
    r = *mine;
    l.waiting.erase(mine);
  } else if (any != anys_.end()) {
    r = *any;
    anys_.erase(any);
  } else {
    l.arrived.emplace_back(tag, ++arrivals_);
    return;
  }
  r->claimed = true;
  l.claims.push_back(std::move(r));
}

void backend::drain(lane& l) {
  for (;;) {
    std::shared_ptr<p2p_recv> r;
    {
      std::lock_guard lock(any_mu_);
      if (l.claims.empty()) return;
      r = l.claims.front();
    }
    const std::string what =
        "recv from rank " + std::to_string(l.peer) + " (tag " + tag_text(r->tag) + ")";
    std::exception_ptr error;
    try {
      TORCH_CHECK(l.broken.empty(), "tutti: ", what, ": ", l.broken);
      visit_typed(*l.comm, r->d.scalar_type(), [&]<class C, class T>(C& c, type_tag<T>) {
        await(l, c.irecv(span_of<T>(r->d), 0, r->tag), {r->d}, what);
      });
    } catch (...) {
      error = in_group_terms(std::current_exception(), l.peer, false);
    }
    std::deque<std::shared_ptr<p2p_recv>> done;
    {
      std::lock_guard lock(any_mu_);
      if (error) {  // the lane is out of step past this message: no later claim can be met
        done.swap(l.claims);
      } else {
        done.push_back(l.claims.front());
        l.claims.pop_front();
      }
    }
    for (const auto& x : done) finish(x, error, l.peer);
    if (error) std::rethrow_exception(error);
  }
}

void backend::scout(lane& l) {
  try {
    TORCH_CHECK(l.comm, "tutti: recv from rank ", l.peer, ": joining the two-rank world failed");
    for (auto idle = clock::now(), busy = idle;;) {
      drain(l);
      {
        // Lingers a little once no receive waits: the next one often comes at once.
        std::lock_guard lock(any_mu_);
        if (!anys_.empty()) busy = clock::now();
        if (stopping_ || clock::now() - busy > scout_linger) {
          l.scouting = false;
          return;
        }
      }
      if (l.thread.queued() > 0) {  // a receive from this peer was posted: it goes first
        l.thread.post(side_job(getRank()), [this, &l] { scout(l); });
        return;
      }
      uint64_t tag = 0;
      if (next_envelope(l, clock::time_point{}, tag)) {
        deposit(l, tag);
        idle = clock::now();
      } else {
        backoff(clock::now() - idle);
      }
    }
  } catch (...) {
    // The peer failed (or the group is going): receives from any rank fail rather than wait
    // for a message that may have been this peer's.
    const auto error = in_group_terms(std::current_exception(), l.peer, false);
    std::deque<std::shared_ptr<p2p_recv>> failed;
    {
      std::lock_guard lock(any_mu_);
      l.scouting = false;
      failed.swap(anys_);
    }
    for (const auto& r : failed) finish(r, error, -1);
    std::rethrow_exception(error);
  }
}

void backend::start_scouts(const std::vector<lane*>& lanes) {
  std::vector<lane*> go;
  {
    std::lock_guard lock(any_mu_);
    if (anys_.empty()) return;
    for (lane* l : lanes)
      if (!l->scouting) {
        l->scouting = true;
        go.push_back(l);
      }
  }
  for (lane* l : go) l->thread.post(side_job(getRank()), [this, l] { scout(*l); });
}

void backend::watch_any() {
  std::vector<lane*> lanes;  // receiving lanes seen so far
  std::vector<bool> seen(static_cast<std::size_t>(getSize()));
  try {
    for (unsigned spins = 0;; ++spins) {
      std::vector<std::shared_ptr<p2p_recv>> expired;
      bool last = false;
      {
        std::lock_guard lock(any_mu_);
        if (anys_.empty()) {
          watching_ = false;
          return;
        }
        const auto now = clock::now();
        for (auto it = anys_.begin(); it != anys_.end();) {
          if (stopping_ || (*it)->deadline <= now) {
            (*it)->claimed = true;
            expired.push_back(*it);
            it = anys_.erase(it);
          } else {
            ++it;
          }
        }
        last = anys_.empty();
        if (last) watching_ = false;
      }
      for (const auto& r : expired)
        finish(r,
               backend_error(stopping_ ? "tutti: recv from any rank: the process group was shut "
                                         "down (destroy_process_group)"
                                       : "tutti: recv from any rank (tag " + tag_text(r->tag) +
                                             ") timed out: no message within " +
                                             std::to_string(opts_.timeout.count()) +
                                             " ms (the group's timeout)"),
               -1);
      if (last) return;
      // Lanes from peers that have begun sending here: each gets a scout.
      for (int p = 0; p < getSize(); ++p) {
        if (p == getRank() || seen[static_cast<std::size_t>(p)]) continue;
        if (find_lane(p, false) == nullptr && !store_->check({lane_key(p, getRank()) + "/open"}))
          continue;
        seen[static_cast<std::size_t>(p)] = true;
        lanes.push_back(&lane_to(p, false));
      }
      start_scouts(lanes);  // again each time: a scout stops once no receive waits
      std::this_thread::sleep_for(std::chrono::milliseconds(spins < 100 ? 1 : 5));
    }
  } catch (...) {
    std::deque<std::shared_ptr<p2p_recv>> failed;
    {
      std::lock_guard lock(any_mu_);
      watching_ = false;
      failed.swap(anys_);
    }
    for (const auto& r : failed) finish(r, as_backend_error(std::current_exception()), -1);
    throw;
  }
}

void backend::finish(const std::shared_ptr<p2p_recv>& r, std::exception_ptr error, int src) {
  if (!error) {
    try {
      copy_back(r->t, r->d);
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (src >= 0) r->w->set_source(src);
  r->w->complete(error ? as_backend_error(error) : nullptr);
}

void backend::fail_pending(const std::string& why) {
  std::deque<std::shared_ptr<p2p_recv>> failed;
  {
    std::lock_guard lock(any_mu_);
    failed.swap(anys_);
  }
  for (const auto& r : failed) finish(r, backend_error(why), -1);
}

void backend::await(lane& l, const tutti::work& w, std::vector<at::Tensor> keep,
                    const std::string& what) {
  const auto until = clock::now() + opts_.timeout;
  if (!settle(w, until)) {
    // The message may still be moving out of or into `keep`: they live as long as the lane,
    // which cannot go on past it.
    l.kept.insert(l.kept.end(), keep.begin(), keep.end());
    l.broken = what + " did not finish within " + std::to_string(opts_.timeout.count()) +
               " ms (the group's timeout)";
    C10_THROW_ERROR(DistBackendError, "tutti: " + l.broken + ": timed out");
  }
}

}  // namespace tutti_torch

#pragma once
/// \file
/// tutti::gloo: ranks anywhere on a TCP network, through Gloo's TCP transport (libgloo). Every
/// tutti policy runs over its point-to-point messages (Gloo's unbound buffers on one connection
/// per pair); tutti::native runs Gloo's own collectives. Needs the tutti::gloo CMake component
/// (option TUTTI_WITH_GLOO; Debian: libgloo-dev).
///
/// Failure handling, on top of what Gloo offers:
/// - every wait has the call's deadline, and wakes every 100-200 ms to look for an abort record
///   or a mismatched call left in the store by another rank;
/// - a peer whose connection closes (its process died) is reported at once by the ranks
///   waiting on it, as errc::peer_lost naming it;
/// - a rank that raises any error records why in the store and closes all its connections, so
///   every other rank raises too, promptly, with the original cause;
/// - messages of disagreeing calls travel on different slots and never match (see gloo_slot);
/// - the world forms within one timeout (Gloo alone waits up to a timeout per pair), and an
///   abort fails every Gloo buffer of the world, so no wait inside Gloo outlives it.

#if !__has_include(<gloo/config.h>)
#error \
    "tutti/transport/gloo.hpp needs Gloo (Debian: libgloo-dev): link the tutti::gloo CMake component (configure tutti with -DTUTTI_WITH_GLOO=ON)"
#else

#include <gloo/config.h>
#if !GLOO_HAVE_TRANSPORT_TCP
#error "tutti::gloo needs a Gloo built with its TCP transport"
#endif

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/scatter.h>
#include <gloo/transport/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "tutti/bootstrap/env.hpp"
#include "tutti/bootstrap/file_store.hpp"
#include "tutti/bootstrap/store.hpp"
#include "tutti/bootstrap/url.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/options.hpp"
#include "tutti/detail/board.hpp"
#include "tutti/detail/call.hpp"
#include "tutti/detail/cma.hpp"
#include "tutti/detail/cost.hpp"
#include "tutti/detail/gloo_support.hpp"
#include "tutti/detail/proc_state.hpp"
#include "tutti/detail/wait.hpp"
#include "tutti/transport/concepts.hpp"

namespace tutti::inline v0::detail {

/// tutti's store as Gloo's rendezvous::Store, every key under `prefix`, every wait ending by
/// the bootstrap's deadline. Notes what Gloo's connectFullMesh has reached: its addresses
/// published (every pair exists), and the rank whose address it fetched last (the pair it
/// connects next).
class gloo_store_adapter final : public ::gloo::rendezvous::Store {
 public:
  gloo_store_adapter(bootstrap::store& s, std::string prefix, clock::time_point deadline)
      : s_(s), prefix_(std::move(prefix)), deadline_(deadline) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    s_.set(prefix_ + key, std::as_bytes(std::span<const char>(data.data(), data.size())));
    if (rank_of(key) >= 0) published_.store(true, std::memory_order_release);
  }
  std::vector<char> get(const std::string& key) override {
    note(key);
    const std::vector<std::byte> v = s_.get(prefix_ + key, left());
    const auto* p = reinterpret_cast<const char*>(v.data());
    return {p, p + v.size()};
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, left()); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& k : keys) {
      note(k);
      full.push_back(prefix_ + k);
    }
    s_.wait(full, std::min(timeout, left()));
  }

  /// Whether this rank has published its addresses (Gloo has created every pair by then).
  [[nodiscard]] bool published() const noexcept {
    return published_.load(std::memory_order_acquire);
  }
  /// The rank whose address Gloo waited for or fetched last, -1 before any.
  [[nodiscard]] int connecting() const noexcept {
    return connecting_.load(std::memory_order_relaxed);
  }

 private:
  /// q for Gloo's key of rank q's addresses ("q"), else -1 (e.g. its hostname key "rank_q").
  [[nodiscard]] static int rank_of(const std::string& key) noexcept {
    if (key.empty() || key.size() > 6 || key.find_first_not_of("0123456789") != std::string::npos)
      return -1;
    return std::stoi(key);
  }
  void note(const std::string& key) noexcept {
    if (const int q = rank_of(key); q >= 0) connecting_.store(q, std::memory_order_relaxed);
  }
  [[nodiscard]] std::chrono::milliseconds left() const {
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(deadline_ - clock::now());
    return std::max(ms, std::chrono::milliseconds(1));
  }

  bootstrap::store& s_;
  std::string prefix_;
  clock::time_point deadline_;
  std::atomic<bool> published_{false};
  std::atomic<int> connecting_{-1};
};

/// Every live Gloo buffer of one world, so that an abort can fail them all. When a connection
/// fails, Gloo's pair wakes the waits of its pending receives and of sends the peer has not
/// asked for yet, but not of a send already queued on the socket (Pair::signalException walks
/// its write queue for bound buffers only): a rank inside one of Gloo's own collectives whose
/// peer died mid-transfer waited in waitSend until the deadline (tests/faults finding 11).
/// So every buffer Gloo creates in a tutti world is a gloo_guarded_buffer around Gloo's own
/// (gloo_guarded_context hands them out), listed here; an abort wakes each one's waits, which
/// then throw. A buffer created afterwards starts failed. Sentinels are exempt: they tell
/// which peer's connection closed.
class gloo_guarded_buffer;
struct gloo_buffers {
  std::mutex mu;
  std::vector<gloo_guarded_buffer*> live;  // each knows its index
  std::exception_ptr failed;               // set once, under mu, before any buffer sees it
  void add(gloo_guarded_buffer* b) noexcept;
  void remove(gloo_guarded_buffer* b) noexcept;
  /// Fails every live buffer (and every later one) with an IoException saying `why` the world
  /// was aborted; their waits return and throw it.
  void fail(std::string_view why) noexcept;
};

class gloo_guarded_buffer final : public ::gloo::transport::UnboundBuffer {
 public:
  gloo_guarded_buffer(std::unique_ptr<::gloo::transport::UnboundBuffer> inner,
                      std::shared_ptr<gloo_buffers> list)
      : UnboundBuffer(inner->ptr, inner->size), inner_(std::move(inner)), list_(std::move(list)) {
    list_->add(this);
  }
  gloo_guarded_buffer(const gloo_guarded_buffer&) = delete;
  gloo_guarded_buffer& operator=(const gloo_guarded_buffer&) = delete;
  ~gloo_guarded_buffer() override { list_->remove(this); }

  /// Leaves the list: an abort does not fail this buffer.
  void exempt() noexcept { list_->remove(this); }

  bool waitRecv(int* rank, std::chrono::milliseconds timeout) override {
    const bool done = inner_->waitRecv(rank, timeout);
    throw_if_failed();
    return done;
  }
  bool waitSend(int* rank, std::chrono::milliseconds timeout) override {
    const bool done = inner_->waitSend(rank, timeout);
    throw_if_failed();
    return done;
  }
  void abortWaitRecv() override { inner_->abortWaitRecv(); }
  void abortWaitSend() override { inner_->abortWaitSend(); }
  void send(int dst, std::uint64_t slot, std::size_t offset, std::size_t n) override {
    throw_if_failed();
    inner_->send(dst, slot, offset, n);
  }
  void recv(int src, std::uint64_t slot, std::size_t offset, std::size_t n) override {
    throw_if_failed();
    inner_->recv(src, slot, offset, n);
  }
  void recv(std::vector<int> srcs, std::uint64_t slot, std::size_t offset, std::size_t n) override {
    throw_if_failed();
    inner_->recv(std::move(srcs), slot, offset, n);
  }

 private:
  friend struct gloo_buffers;
  void fail() noexcept {  // under the list's mutex
    failed_.store(true, std::memory_order_release);
    inner_->abortWaitSend();
    inner_->abortWaitRecv();
  }
  void throw_if_failed() const {
    if (failed_.load(std::memory_order_acquire)) std::rethrow_exception(list_->failed);
  }

  std::unique_ptr<::gloo::transport::UnboundBuffer> inner_;
  std::shared_ptr<gloo_buffers> list_;
  std::size_t index_ = static_cast<std::size_t>(-1);
  std::atomic<bool> failed_{false};
};

inline void gloo_buffers::add(gloo_guarded_buffer* b) noexcept {
  std::lock_guard lock(mu);
  if (failed) {
    b->fail();
    return;
  }
  try {
    live.push_back(b);
    b->index_ = live.size() - 1;
  } catch (...) {
    b->fail();  // no memory to list it: fail it now rather than miss it later
  }
}

inline void gloo_buffers::remove(gloo_guarded_buffer* b) noexcept {
  std::lock_guard lock(mu);
  if (b->index_ >= live.size() || live[b->index_] != b) return;
  live[b->index_] = live.back();
  live[b->index_]->index_ = b->index_;
  live.pop_back();
  b->index_ = static_cast<std::size_t>(-1);
}

inline void gloo_buffers::fail(std::string_view why) noexcept {
  std::lock_guard lock(mu);
  if (failed) return;
  try {
    failed = std::make_exception_ptr(
        ::gloo::IoException("tutti::gloo: the world was aborted: " + std::string(why)));
  } catch (...) {
    failed = std::current_exception();  // bad_alloc: still an error for every wait
  }
  for (gloo_guarded_buffer* b : live) b->fail();
}

/// Gloo's transport context of a connected world, handing out guarded buffers.
class gloo_guarded_context final : public ::gloo::transport::Context {
 public:
  gloo_guarded_context(std::shared_ptr<::gloo::transport::Context> inner,
                       std::shared_ptr<gloo_buffers> list)
      : Context(inner->rank, inner->size), inner_(std::move(inner)), list_(std::move(list)) {
    setTimeout(inner_->getTimeout());
  }
  std::unique_ptr<::gloo::transport::Pair>& getPair(int peer) override {
    return inner_->getPair(peer);
  }
  std::unique_ptr<::gloo::transport::Pair>& createPair(int peer) override {
    return inner_->createPair(peer);
  }
  std::unique_ptr<::gloo::transport::UnboundBuffer> createUnboundBuffer(void* p,
                                                                        std::size_t n) override {
    return std::make_unique<gloo_guarded_buffer>(inner_->createUnboundBuffer(p, n), list_);
  }

 private:
  std::shared_ptr<::gloo::transport::Context> inner_;
  std::shared_ptr<gloo_buffers> list_;
};

/// Gloo's TCP device, handing out guarded transport contexts (with the world's timeout, which
/// the pairs take when they are created) and keeping the last one, so that the bootstrap can
/// close its pairs at its deadline: Gloo's connectFullMesh connects the pairs one after
/// another, each waiting up to the whole timeout, so a rank whose peers had died waited for
/// up to (size - 1) timeouts (tests/faults finding 7).
class gloo_device final : public ::gloo::transport::Device {
 public:
  gloo_device(std::shared_ptr<::gloo::transport::Device> inner, std::shared_ptr<gloo_buffers> list,
              std::chrono::milliseconds timeout)
      : inner_(std::move(inner)), list_(std::move(list)), timeout_(timeout) {}
  std::string str() const override { return inner_->str(); }
  const std::string& getPCIBusID() const override { return inner_->getPCIBusID(); }
  int getInterfaceSpeed() const override { return inner_->getInterfaceSpeed(); }
  bool hasGPUDirect() const override { return inner_->hasGPUDirect(); }
  std::shared_ptr<::gloo::transport::Context> createContext(int rank, int size) override {
    auto inner = inner_->createContext(rank, size);
    inner->setTimeout(timeout_);
    auto c = std::make_shared<gloo_guarded_context>(std::move(inner), list_);
    std::lock_guard lock(mu_);
    last_ = c;
    return c;
  }

  /// Closes every pair of the last context (each has been created): a connect waiting on one
  /// returns at once. Gloo's own Pair::close, as for a context that closes its connections.
  void close_pairs() noexcept {
    std::shared_ptr<gloo_guarded_context> c;
    {
      std::lock_guard lock(mu_);
      c = last_.lock();
    }
    if (!c) return;
    for (int q = 0; q < c->size; ++q) {
      if (q == c->rank) continue;
      try {
        if (auto& pair = c->getPair(q)) pair->close();
      } catch (...) {
        // a pair that failed already
      }
    }
  }

 private:
  std::shared_ptr<::gloo::transport::Device> inner_;
  std::shared_ptr<gloo_buffers> list_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::weak_ptr<gloo_guarded_context> last_;
};

/// The signal set holding SIGPIPE alone.
[[nodiscard]] inline sigset_t sigpipe_set() noexcept {
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  return pipe;
}

/// Interrupts a blocked Gloo wait once its slice ends (Gloo's own wait timeout would close
/// every connection): the waiting thread arms it with the buffer and the slice's end, the
/// waker thread calls abortWait*() then, and the waiting thread disarms it before the buffer
/// can go away. Ticks every 50 ms; arming costs a mutex, never a wake-up.
class gloo_waker {
 public:
  gloo_waker() : th_([this] { run(); }) {}
  gloo_waker(const gloo_waker&) = delete;
  gloo_waker& operator=(const gloo_waker&) = delete;
  ~gloo_waker() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    th_.join();
  }

  void arm(::gloo::transport::UnboundBuffer* b, bool is_send, clock::time_point due) {
    std::lock_guard lock(mu_);
    buf_ = b;
    is_send_ = is_send;
    due_ = due;
  }
  void disarm() {
    std::lock_guard lock(mu_);
    buf_ = nullptr;
  }

  /// What to run every tick while a Gloo collective runs (tutti::native): Gloo waits inside it
  /// with no slices, so this is how a dead peer it leaves a send waiting on gets noticed.
  void set_watch(std::function<void()> f) {
    std::lock_guard lock(mu_);
    watch_ = std::move(f);
  }
  /// Starts (true) or stops the ticks' watch; stopping returns once a running tick is done, so
  /// what the watch touches is the caller's again.
  void watching(bool on) {
    std::unique_lock lock(mu_);
    watching_ = on;
    if (!on) idle_.wait(lock, [&] { return !ticking_; });
  }
  /// Runs the watch for its lifetime.
  class scope {
   public:
    explicit scope(gloo_waker& w) : w_(w) { w_.watching(true); }
    scope(const scope&) = delete;
    scope& operator=(const scope&) = delete;
    ~scope() { w_.watching(false); }

   private:
    gloo_waker& w_;
  };

 private:
  void run() {
    // The watch may write to a dead peer's socket (abort_world posts a receive): with SIGPIPE
    // blocked on this thread (its own, for good) the write fails with EPIPE instead of ending
    // the process. Found by tutti-faults with 4 MB messages under native.
    const sigset_t pipe = sigpipe_set();
    pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
    std::unique_lock lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(50));
      if (buf_ != nullptr && clock::now() >= due_) {
        if (is_send_)
          buf_->abortWaitSend();
        else
          buf_->abortWaitRecv();
        buf_ = nullptr;
      }
      if (watching_ && watch_) {
        ticking_ = true;
        lock.unlock();
        watch_();
        lock.lock();
        ticking_ = false;
        idle_.notify_all();
      }
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_;
  ::gloo::transport::UnboundBuffer* buf_ = nullptr;
  std::function<void()> watch_;
  bool watching_ = false;
  bool ticking_ = false;
  bool is_send_ = false;
  bool stop_ = false;
  clock::time_point due_{};
  std::thread th_;  // last: starts once the rest exists
};

/// Keeps SIGPIPE from killing the process while Gloo writes on this thread: Gloo writes to its
/// sockets with writev (no MSG_NOSIGNAL), and a write to a peer that died raises SIGPIPE, whose
/// default action ends the process; with it blocked the write fails with EPIPE, which Gloo
/// reports and tutti turns into errc::peer_lost. Blocks it on this thread for the guard's life
/// and discards a SIGPIPE that arrived meanwhile. Threads started meanwhile (Gloo's loop
/// thread, created with the device) keep it blocked for good. The process's disposition is
/// never changed.
class sigpipe_guard {
 public:
  sigpipe_guard() noexcept {
    const sigset_t pipe = sigpipe_set();
    pthread_sigmask(SIG_BLOCK, &pipe, &old_);
    sigset_t pending;
    sigemptyset(&pending);
    had_ = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
  }
  sigpipe_guard(const sigpipe_guard&) = delete;
  sigpipe_guard& operator=(const sigpipe_guard&) = delete;
  ~sigpipe_guard() {
    sigset_t pending;
    sigemptyset(&pending);
    if (!had_ && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
      const sigset_t pipe = sigpipe_set();
      const timespec now{0, 0};
      while (sigtimedwait(&pipe, nullptr, &now) == -1 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t old_{};
  bool had_ = false;
};

/// A single-copy message's descriptor and slot, and for a receive whether its descriptor has
/// arrived (in the mailbox: detail::cma_inbox). Held by its request, at a stable address.
struct cma_message {
  cma_descriptor d;
  std::uint64_t slot = 0;
  bool arrived = false;
};

/// Single copies between this rank and one peer (detail::cma_inbox).
struct cma_link {
  std::uint64_t inbox = 0;      // the address of this rank's inbox in the peer's mailbox
  std::uint64_t sent = 0;       // entries written there
  std::uint64_t room_seen = 0;  // the peer's count of entries it took, as last read
  std::uint64_t taken = 0;      // entries taken here from the peer's inbox in this rank's mailbox
  std::deque<cma_inbox::body> outbox;   // descriptors waiting for room in the peer's inbox
  std::deque<cma_message*> posted;      // receives waiting for their descriptor, in posting order
  std::deque<cma_inbox::body> arrived;  // descriptors no posted receive has claimed yet
};

struct gloo_state {
  std::shared_ptr<bootstrap::store> store;  // rendezvous, then abort and call records
  std::string prefix;                       // "tutti/gloo/<n>/"
  /// One zero-byte receive per peer, posted once the world is connected, on a slot nobody sends
  /// to: Gloo fails it when that peer's connection closes, which is how a rank learns that a
  /// peer it only sends to has died (Gloo leaves a pending send waiting). Destroyed after ctx.
  std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> sentinels;
  std::shared_ptr<detail::gloo_buffers> buffers = std::make_shared<detail::gloo_buffers>();
  std::shared_ptr<::gloo::transport::Device> device;
  std::shared_ptr<::gloo::rendezvous::Context> ctx;
  int rank = 0;
  int size = 1;
  std::string address;              // what the device bound, for messages
  std::string unlink_on_close;      // rank 0's rendezvous file, when one was used
  bool aborted = false;             // this rank closed its connections
  std::uint64_t published_seq = 0;  // last call record written
  /// Liveness: this rank's beat key counts its slow-wait polls; the peers' beats as seen at
  /// the first poll of the current slow wait, and when.
  std::uint64_t beats = 0;
  std::chrono::steady_clock::time_point last_poll{};
  std::chrono::steady_clock::time_point beats_since{};
  std::vector<std::string> beats_seen;
  /// The same during a Gloo collective (tutti::native), kept by the waker's watch: each peer's
  /// last beat seen and when it last changed, per call (native_call counts them).
  std::uint64_t native_call = 0;
  std::uint64_t native_watched = 0;
  std::uint64_t suspect_call = 0;
  int suspect = -1;  // a peer whose connection closed with no abort record yet, seen once
  std::vector<std::string> native_beats;
  std::vector<std::chrono::steady_clock::time_point> native_moved;
  std::byte dummy{};  // a valid address for zero-byte buffers
  /// Buffers whose operation completed, destroyed a few operations later: Gloo's loop
  /// thread may still hold one for a moment after the wait returns, and destroying it then
  /// spins (sched_yield) until it lets go — milliseconds when ranks outnumber cores.
  std::deque<std::unique_ptr<::gloo::transport::UnboundBuffer>> retired;
  /// Receive staging for reducing receives, kept between calls (no allocation per message).
  std::vector<std::vector<std::byte>> staging_pool;
  /// Single copies (detail/cma.hpp): each peer's pid where both can read and write the other's
  /// memory, else 0; this rank's mailbox (its first word is the probe's word); each peer's link.
  std::vector<pid_t> cma_pid;
  cma_inbox* mailbox = nullptr;
  std::vector<cma_link> cma_links;
  /// Ranks of this world on this machine (this one included), and whether they outnumber the
  /// CPUs this process may use (detail::oversubscribed; waits spin less).
  int host_ranks = 1;
  bool oversubscribed = false;
  /// Ranks per CPU on the world's most crowded machine; the same on every rank (costs).
  double ranks_per_cpu = 0;
  /// Whether every pair of ranks has single copies; the same on every rank (costs).
  bool single_copy_world = false;
  gloo_waker waker;

  [[nodiscard]] std::vector<std::byte> take_staging(std::size_t bytes) {
    std::vector<std::byte> v;
    if (!staging_pool.empty()) {
      v = std::move(staging_pool.back());
      staging_pool.pop_back();
    }
    if (v.size() < bytes) v.resize(bytes);
    return v;
  }
  void give_staging(std::vector<std::byte>&& v) noexcept {
    try {
      if (staging_pool.size() < 4) staging_pool.push_back(std::move(v));
    } catch (...) {
      // dropped: the next receive allocates
    }
  }

  gloo_state() = default;
  gloo_state(const gloo_state&) = delete;
  gloo_state& operator=(const gloo_state&) = delete;
  ~gloo_state() {
    if (!unlink_on_close.empty()) ::unlink(unlink_on_close.c_str());
  }
};

}  // namespace tutti::inline v0::detail

namespace tutti::inline v0 {

class gloo {
 public:
  using memory_space = host_memory;
  /// Defaults for tutti::automatic, fitted on loopback (bench/RESULTS.md): every message is a
  /// rendezvous over a TCP connection (tens of microseconds), bytes cross the kernel twice.
  static constexpr cost_model costs{.alpha_us = 40.0,
                                    .beta_us_per_byte = 1.0 / 1500.0,
                                    .gamma_us_per_byte = 1.0 / 8000.0,
                                    .segment_beta_us_per_byte = 1.0 / 1500.0};

  /// A posted send or receive; waited on with `gloo::wait`. Destroyed unwaited (only while an
  /// exception unwinds an algorithm), it aborts the world: Gloo cannot withdraw a posted
  /// message, and a message arriving for a destroyed buffer would jam its connection.
  /// A large collective message travels as several parts (`gloo::parts_of`); a receive that
  /// reduces (`irecv_reduce`) reduces each part as it lands, while the next ones are in flight.
  class request {
   public:
    request() = default;
    request(request&& o) noexcept { *this = std::move(o); }
    request& operator=(request&& o) noexcept {
      if (this != &o) {
        release();
        parts_ = std::move(o.parts_);
        done_ = o.done_;
        part_bytes_ = o.part_bytes_;
        total_ = o.total_;
        reduce_into_ = o.reduce_into_;
        staging_ = std::move(o.staging_);
        s_ = std::move(o.s_);
        peer_ = o.peer_;
        is_send_ = o.is_send_;
        msg_ = std::move(o.msg_);
        cma_open_ = std::exchange(o.cma_open_, false);
        ack_ = std::exchange(o.ack_, nullptr);
        data_ = o.data_;
      }
      return *this;
    }
    request(const request&) = delete;
    request& operator=(const request&) = delete;
    ~request() { release(); }

   private:
    friend class gloo;
    [[nodiscard]] bool pending() const noexcept { return cma_open_ || done_ < parts_.size(); }
    void release() noexcept {
      // The abort first: a receiver that finds the message abandoned then finds why.
      if (pending() && s_)
        abort_world(*s_, {errc::aborted, s_->rank, s_->rank, "a message was abandoned half done"});
      if (ack_ != nullptr)  // a single copy given up on: its receiver must not trust its read
        std::exchange(ack_, nullptr)
            ->store(detail::cma_ack_words::abandoned, std::memory_order_release);
      forget();
      if (s_ && !staging_.empty()) s_->give_staging(std::move(staging_));
    }
    /// Drops what is left of the message (its world is lost or aborted): its Gloo parts, a
    /// single-copy send's descriptor still waiting for room in the peer's inbox (never to be
    /// written: the peer would find it abandoned, or its buffer gone), and a single-copy
    /// receive's place among the receives waiting for a descriptor.
    void forget() noexcept {
      if (cma_open_ && s_) {
        auto& link = s_->cma_links[static_cast<std::size_t>(peer_)];
        if (is_send_)
          std::erase_if(link.outbox, [&](const detail::cma_inbox::body& e) {
            return e.d.ack_address == msg_->d.ack_address;
          });
        else if (!msg_->arrived)
          std::erase(link.posted, msg_.get());
      }
      cma_open_ = false;
      parts_.clear();
      done_ = 0;
    }
    std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> parts_;
    std::size_t done_ = 0;        // parts waited so far
    std::size_t part_bytes_ = 0;  // every part's size but the last's
    std::size_t total_ = 0;
    std::byte* reduce_into_ = nullptr;  // irecv_reduce: the parts land in staging_, reduced here
    std::vector<std::byte> staging_;
    std::shared_ptr<detail::gloo_state> s_;
    int peer_ = -1;
    bool is_send_ = false;
    /// A single copy (no Gloo parts): its descriptor and slot, and whether it is still to be
    /// waited; for a send, the word the receiver acknowledges in (detail::cma_ack_words; given
    /// back once acknowledged, never if the message is abandoned); for a receive, where the
    /// bytes go (or are reduced into, through staging_, by reduce_into_).
    std::unique_ptr<detail::cma_message> msg_;
    bool cma_open_ = false;
    detail::cma_ack_words::word* ack_ = nullptr;
    std::byte* data_ = nullptr;
  };

  /// How a collective message of `bytes` is cut: into up to `max_parts` parts of at least
  /// `part_min` bytes, more once parts would pass `part_max`; a whole number of elements each
  /// (the last may be shorter). Both ends compute it from the same size and element size, so
  /// their parts pair up; each part is a Gloo message on its own slot. Cutting lets a reducing
  /// receive overlap the reduction of part k with the transfer of part k + 1 (Gloo's loop
  /// thread moves the bytes meanwhile): 1.2-1.7x faster all_reduce at 1-16 MiB on loopback
  /// than whole messages (bench/RESULTS.md).
  static constexpr std::size_t part_min = std::size_t{256} << 10;
  static constexpr std::size_t part_max = std::size_t{1} << 20;
  static constexpr std::size_t max_parts = 8;
  [[nodiscard]] static std::size_t part_size(std::size_t bytes, std::size_t elem) noexcept {
    const std::size_t parts =
        std::max<std::size_t>({1, std::min(bytes / part_min, max_parts), bytes / part_max});
    if (parts == 1 || elem == 0) return bytes;
    const std::size_t elems = (bytes / elem + parts - 1) / parts;
    return elems * elem;
  }

  /// Collective messages between ranks on one host travel as single copies (detail/cma.hpp)
  /// where the probe at bootstrap found it possible and TUTTI_GLOO_CMA is not 0: the sender
  /// writes a descriptor into the receiver's mailbox (detail::cma_inbox), the receiver reads
  /// the bytes straight out of the sender's memory (reducing them, in cache-sized chunks, as it
  /// reads) and acknowledges in a word of the sender's. Through loopback TCP the bytes would be
  /// copied twice, into the kernel and out, and every message would wake Gloo's loop threads
  /// on both sides: a 4-byte all-reduce of 2 ranks takes about 5 µs this way, 50 µs through
  /// TCP (bench/RESULTS.md). Everything between hosts, and point-to-point messages, stay on
  /// Gloo's TCP pairs.
  /// α and β of a single copy, fitted on the 2-core VM of bench/RESULTS.md: a 4-byte recursive
  /// doubling step (a descriptor, a read, an acknowledgement) takes about 5 µs; a 4 MiB one
  /// (read and reduce 4 MiB) about 1.2 ms, α + n(β + γ) with γ = 1/8000.
  static constexpr double single_copy_alpha_us = 5.0;
  static constexpr double single_copy_beta_us_per_byte = 1.0 / 6500.0;
  /// The chunk a reducing single-copy receive reads and reduces at a time.
  static constexpr std::size_t single_copy_chunk = std::size_t{256} << 10;

  explicit gloo(std::shared_ptr<detail::gloo_state> s) : s_(std::move(s)) {}

  [[nodiscard]] int rank() const noexcept { return s_->rank; }
  [[nodiscard]] int size() const noexcept { return s_->size; }
  /// The address this rank's TCP device listens on.
  [[nodiscard]] const std::string& address() const noexcept { return s_->address; }
  /// Whether collective messages to and from `peer` travel as single copies: it runs on this host,
  /// in this PID and network namespace, and each of the two can read the other's memory.
  [[nodiscard]] bool single_copy(int peer) const noexcept {
    return peer >= 0 && static_cast<std::size_t>(peer) < s_->cma_pid.size() &&
           s_->cma_pid[static_cast<std::size_t>(peer)] != 0;
  }
  /// Ranks of this world on this rank's machine, this one included (same kernel boot).
  [[nodiscard]] int host_ranks() const noexcept { return s_->host_ranks; }
  /// `costs` with what this world found at run time, for tutti::automatic: single copies' α
  /// and β where every pair has them (a world on one host), and the ranks per CPU of its most
  /// crowded machine. The same on every rank.
  [[nodiscard]] cost_model world_costs() const noexcept {
    cost_model m = costs;
    if (s_->single_copy_world) {
      m.alpha_us = single_copy_alpha_us;
      m.beta_us_per_byte = single_copy_beta_us_per_byte;
    }
    m.ranks_per_cpu = s_->ranks_per_cpu;
    return m;
  }
  /// Gloo's context, for running Gloo's own algorithms on tutti's connections. Gloo's legacy
  /// algorithm classes (AllreduceRing and friends) set SO_SNDBUF on the connections they use
  /// (which turns off the kernel's autotuning for every later message): prefer the free
  /// functions (gloo::allreduce, ...), as tutti::native does.
  [[nodiscard]] const std::shared_ptr<::gloo::rendezvous::Context>& context() const noexcept {
    return s_->ctx;
  }

  [[nodiscard]] request isend(int peer, std::span<const std::byte> data, const detail::call& c,
                              detail::space sp, std::uint64_t tag) {
    return post(peer, const_cast<std::byte*>(data.data()), data.size(), c, sp, tag, true);
  }
  [[nodiscard]] request irecv(int peer, std::span<std::byte> data, const detail::call& c,
                              detail::space sp, std::uint64_t tag) {
    return post(peer, data.data(), data.size(), c, sp, tag, false);
  }
  /// Receives a collective message from `peer` and reduces it into `inout` (`inout = inout op
  /// message`) part by part as the parts arrive, at `wait`.
  [[nodiscard]] request irecv_reduce(int peer, std::span<std::byte> inout, const detail::call& c) {
    // A single copy reads chunk by chunk into a chunk's staging; TCP parts land in a whole one.
    const bool single = cma_to(peer, detail::space::collective);
    std::vector<std::byte> staging =
        s_->take_staging(single ? std::min(inout.size(), single_copy_chunk) : inout.size());
    request r = post(peer, staging.data(), inout.size(), c, detail::space::collective, 0, false);
    r.staging_ = std::move(staging);
    r.reduce_into_ = inout.data();
    return r;
  }

  /// Waits for `r` until `deadline`. Wakes every 100-200 ms to look for other ranks' aborts
  /// and mismatched calls; a closed connection raises errc::peer_lost naming the peer.
  void wait(request& r, const detail::call& c, detail::clock::time_point deadline) {
    auto& st = *s_;
    if (r.cma_open_) {
      if (r.is_send_) {
        wait_acknowledged(r, c, deadline);  // the receiver has read the bytes
        detail::cma_ack_words::instance().give(std::exchange(r.ack_, nullptr));
      } else {
        wait_arrival(r, c, deadline);
        read_single_copy(r, c);
      }
      r.cma_open_ = false;
    }
    while (r.pending()) {
      wait_buffer(r, *r.parts_[r.done_], r.is_send_, c, deadline);
      if (r.reduce_into_ != nullptr) {
        const std::size_t at = r.done_ * r.part_bytes_;
        const std::size_t n = std::min(r.part_bytes_, r.total_ - at);
        c.red(r.reduce_into_ + at, r.reduce_into_ + at, r.staging_.data() + at, n / c.elem_size);
      }
      retire(std::move(r.parts_[r.done_]));
      ++r.done_;
    }
    r.parts_.clear();
    r.done_ = 0;
    if (!r.staging_.empty()) st.give_staging(std::move(r.staging_));
  }

  /// Gloo's connections carry no call board; mismatches are checked on slow waits (poll).
  void publish(const detail::call&) noexcept {}

  // ---- native collectives (tutti::native), run by Gloo on the same connections -----------

  void native_all_reduce(const detail::call& c, const std::byte* in, std::byte* out,
                         std::size_t count, detail::clock::time_point deadline) {
    copy_if_distinct(out, in, count * c.elem_size);
    if (size() == 1 || empty_call(c, count, deadline)) return;
    native_run(c, deadline, [&](auto tag) {
      using T = decltype(tag);
      ::gloo::AllreduceOptions o(s_->ctx);
      o.setOutput(reinterpret_cast<T*>(out), count);
      o.setReduceFunction(reduce_fn(c));
      o.setAlgorithm(::gloo::AllreduceOptions::Algorithm::RING);
      o.setTag(detail::gloo_native_tag(c));
      o.setTimeout(left(deadline));
      ::gloo::allreduce(o);
    });
  }

  void native_reduce(const detail::call& c, const std::byte* in, std::byte* out, std::size_t count,
                     int root, detail::clock::time_point deadline) {
    if (rank() == root) copy_if_distinct(out, in, count * c.elem_size);
    if (size() == 1 || empty_call(c, count, deadline)) return;
    // Gloo's reduce writes scratch into the output of every rank: non-roots get their own.
    std::vector<std::byte> tmp(rank() == root ? 0 : count * c.elem_size);
    if (rank() != root) std::memcpy(tmp.data(), in, tmp.size());
    std::byte* buf = rank() == root ? out : tmp.data();
    native_run(c, deadline, [&](auto tag) {
      using T = decltype(tag);
      ::gloo::ReduceOptions o(s_->ctx);
      o.setOutput(reinterpret_cast<T*>(buf), count);
      o.setRoot(root);
      o.setReduceFunction(reduce_fn(c));
      o.setTag(detail::gloo_native_tag(c));
      o.setTimeout(left(deadline));
      ::gloo::reduce(o);
    });
  }

  void native_broadcast(const detail::call& c, std::byte* buf, std::size_t count, int root,
                        detail::clock::time_point deadline) {
    if (size() == 1 || empty_call(c, count, deadline)) return;
    native_run(c, deadline, [&](auto tag) {
      using T = decltype(tag);
      ::gloo::BroadcastOptions o(s_->ctx);
      o.setOutput(reinterpret_cast<T*>(buf), count);
      o.setRoot(root);
      o.setTag(detail::gloo_native_tag(c));
      o.setTimeout(left(deadline));
      ::gloo::broadcast(o);
    });
  }

  void native_all_gather(const detail::call& c, const std::byte* in, std::byte* out,
                         std::size_t count, detail::clock::time_point deadline) {
    const std::size_t bytes = count * c.elem_size;
    copy_if_distinct(out + static_cast<std::size_t>(rank()) * bytes, in, bytes);
    if (size() == 1 || empty_call(c, count, deadline)) return;
    native_run(c, deadline, [&](auto tag) {
      using T = decltype(tag);
      ::gloo::AllgatherOptions o(s_->ctx);
      // Gloo reads this rank's block from the output when no input is set.
      o.setOutput(reinterpret_cast<T*>(out), count * static_cast<std::size_t>(size()));
      o.setTag(detail::gloo_native_tag(c));
      o.setTimeout(left(deadline));
      ::gloo::allgather(o);
    });
  }

  void native_gather(const detail::call& c, const std::byte* in, std::byte* out, std::size_t count,
                     int root, detail::clock::time_point deadline) {
    const std::size_t bytes = count * c.elem_size;
    if (rank() == root) copy_if_distinct(out + static_cast<std::size_t>(root) * bytes, in, bytes);
    if (size() == 1 || empty_call(c, count, deadline)) return;
    native_run(c, deadline, [&](auto tag) {
      using T = decltype(tag);
      ::gloo::GatherOptions o(s_->ctx);
      o.setInput(const_cast<T*>(reinterpret_cast<const T*>(in)), count);
      if (rank() == root)
        o.setOutput(reinterpret_cast<T*>(out), count * static_cast<std::size_t>(size()));
      o.setRoot(root);
      o.setTag(detail::gloo_native_tag(c));
      o.setTimeout(left(deadline));
      ::gloo::gather(o);
    });
  }

  void native_scatter(const detail::call& c, const std::byte* in, std::byte* out, std::size_t count,
                      int root, detail::clock::time_point deadline) {
    const std::size_t bytes = count * c.elem_size;
    if (rank() == root) copy_if_distinct(out, in + static_cast<std::size_t>(root) * bytes, bytes);
    if (size() == 1 || empty_call(c, count, deadline)) return;
    native_run(c, deadline, [&](auto tag) {
      using T = decltype(tag);
      ::gloo::ScatterOptions o(s_->ctx);
      if (rank() == root) {
        std::vector<T*> blocks;
        blocks.reserve(static_cast<std::size_t>(size()));
        for (int q = 0; q < size(); ++q)
          blocks.push_back(
              const_cast<T*>(reinterpret_cast<const T*>(in + static_cast<std::size_t>(q) * bytes)));
        o.setInputs(blocks, count);
      }
      o.setOutput(reinterpret_cast<T*>(out), count);
      o.setRoot(root);
      o.setTag(detail::gloo_native_tag(c));
      o.setTimeout(left(deadline));
      ::gloo::scatter(o);
    });
  }

  void native_all_to_all(const detail::call& c, const std::byte* in, std::byte* out,
                         std::size_t count, detail::clock::time_point deadline) {
    const std::size_t total = count * static_cast<std::size_t>(size());
    if (size() == 1) {
      copy_if_distinct(out, in, total * c.elem_size);
      return;
    }
    if (empty_call(c, count, deadline)) return;
    // In place: Gloo reads its input while peers' blocks land in the output.
    std::vector<std::byte> tmp(in == out ? total * c.elem_size : 0);
    if (in == out) std::memcpy(tmp.data(), in, tmp.size());
    const std::byte* src = in == out ? tmp.data() : in;
    native_run(c, deadline, [&](auto tag) {
      using T = decltype(tag);
      ::gloo::AlltoallOptions o(s_->ctx);
      o.setInput(const_cast<T*>(reinterpret_cast<const T*>(src)), total);
      o.setOutput(reinterpret_cast<T*>(out), total);
      o.setTag(detail::gloo_native_tag(c));
      o.setTimeout(left(deadline));
      ::gloo::alltoall(o);
    });
  }

  /// Gloo's collectives exchange nothing at count 0, so a count-0 call meets the other ranks in
  /// a barrier on the call's tag instead (which hashes the sequence number, collective, type,
  /// op, root and count): a rank whose call disagrees waits on another tag and every rank
  /// raises at the deadline, as for a disagreement at any other count, instead of returning as
  /// if all had agreed. True when it ran (count 0).
  bool empty_call(const detail::call& c, std::size_t count, detail::clock::time_point deadline) {
    if (count != 0) return false;
    native_barrier(c, deadline);
    return true;
  }

  void native_barrier(const detail::call& c, detail::clock::time_point deadline) {
    if (size() == 1) return;
    native_run(c, deadline, [&](auto) {
      ::gloo::BarrierOptions o(s_->ctx);
      o.setTag(detail::gloo_native_tag(c));
      o.setTimeout(left(deadline));
      ::gloo::barrier(o);
    });
  }

  // ---- joining a world ------------------------------------------------------------------

  /// This rank's endpoint, from the launcher's environment (torchrun, Open MPI, MPICH, Slurm,
  /// tutti::spawn: see bootstrap/env.hpp). Ranks meet through the store at
  /// MASTER_ADDR:MASTER_PORT (rank 0 serves it); when every rank is on this host and no such
  /// store can be used (mpirun, srun, torchrun's agent store), through a file private to this
  /// user. The device binds TUTTI_SOCKET_IFNAME's address, else the one that reaches
  /// MASTER_ADDR.
  [[nodiscard]] static gloo from_env(const options& opts = {}) {
    const bootstrap::world_info w = bootstrap::world_from_env();
    const std::string key = next_key();
    if (!w.master_addr.empty() && w.master_port > 0 && !w.agent_store) {
      auto st = bootstrap::env_store(w.rank, opts.timeout, opts.store_token);
      return connect(std::move(st), key, w.rank, w.size, w.master_addr, w.master_port, opts);
    }
    if (w.local_size != w.size)
      throw error(errc::invalid_argument, "", 0, w.rank, -1,
                  "tutti::gloo across hosts needs a store: set MASTER_ADDR and MASTER_PORT "
                  "(rank 0 serves it), or use communicator<gloo>::from_url with tcp:// or "
                  "redis://" +
                      std::string(w.agent_store ? " (torchrun's agent store speaks torch's own "
                                                  "protocol, which tutti does not)"
                                                : ""));
    const std::string path = bootstrap::private_dir() + "/" + bootstrap::local_job_key() +
                             ".gloo." + key.substr(std::string_view("tutti/gloo/").size());
    auto st = std::make_shared<bootstrap::file_store>(path, opts.timeout);
    gloo t = connect(std::move(st), key, w.rank, w.size, "", -1, opts);
    if (w.rank == 0) t.s_->unlink_on_close = path;
    return t;
  }

  /// This rank's endpoint, meeting the others through the store an init URL names:
  /// `tcp://host:port` (rank 0 serves), `redis://host:port`, `file:///path`, `env://`.
  [[nodiscard]] static gloo from_url(std::string_view url, int rank, int size,
                                     const options& opts = {}) {
    const auto u = bootstrap::parse_init_url(url);
    auto st = bootstrap::make_store(u, rank, opts.timeout, opts.store_token);
    std::string host = u.host;
    int port = u.port;
    if (u.scheme == "env") {
      const bootstrap::world_info w = bootstrap::world_from_env();
      host = w.master_addr;
      port = w.master_port;
    }
    return connect(std::move(st), next_key(), rank, size, host, port, opts);
  }

  /// Joins the world of `size` ranks whose rendezvous runs through `st` under `key`.
  /// `route_host` (may be empty) picks the local address when TUTTI_SOCKET_IFNAME is unset.
  [[nodiscard]] static gloo connect(std::shared_ptr<bootstrap::store> st, const std::string& key,
                                    int rank, int size, const std::string& route_host,
                                    int route_port, const options& opts = {}) {
    if (size < 1 || rank < 0 || rank >= size)
      throw error(errc::invalid_argument, "", 0, rank, -1,
                  "tutti::gloo: rank " + std::to_string(rank) + " is not in a world of " +
                      std::to_string(size));
    auto s = std::make_shared<detail::gloo_state>();
    s->store = std::move(st);
    s->prefix = key + "/";
    s->rank = rank;
    s->size = size;
    ::gloo::transport::tcp::attr attr;
    const std::string iface = detail::env_string("TUTTI_SOCKET_IFNAME");
    std::string why;
    if (!iface.empty()) {
      if (!detail::interface_exists(iface))
        throw error(errc::invalid_argument, "", 0, rank, -1,
                    "TUTTI_SOCKET_IFNAME=" + iface + ": no such network interface here");
      attr.iface = iface;
      why = "TUTTI_SOCKET_IFNAME=" + iface;
    } else if (!route_host.empty()) {
      attr.hostname = detail::local_address_towards(route_host, route_port);
      if (attr.hostname.empty())
        throw error(errc::invalid_argument, "", 0, rank, -1,
                    "tutti::gloo: no local address reaches " + route_host +
                        " (set TUTTI_SOCKET_IFNAME to the interface to use)");
      why = "the address that reaches " + route_host;
    } else {
      attr.hostname = "127.0.0.1";
      why = "loopback: every rank is on this host";
    }
    try {
      const detail::sigpipe_guard no_sigpipe;  // also for Gloo's loop thread, started here
      const auto deadline = detail::clock::now() + opts.timeout;
      auto device = std::make_shared<detail::gloo_device>(
          ::gloo::transport::tcp::CreateDevice(attr), s->buffers, opts.timeout);
      s->device = device;
      s->address = s->device->str();
      if (detail::debug_info())
        std::fprintf(stderr, "tutti[gloo] rank %d/%d: TCP device %s (%s)\n", rank, size,
                     s->address.c_str(), why.c_str());
      s->ctx = std::make_shared<::gloo::rendezvous::Context>(rank, size);
      s->ctx->setTimeout(opts.timeout);
      connect_full_mesh(*s, *device, deadline, opts.timeout);
      s->sentinels.resize(static_cast<std::size_t>(size));
      for (int q = 0; q < size; ++q) {
        if (q == rank) continue;
        auto& b = s->sentinels[static_cast<std::size_t>(q)];
        b = s->ctx->createUnboundBuffer(&s->dummy, 0);
        static_cast<detail::gloo_guarded_buffer&>(*b).exempt();
        try {
          b->recv(q, detail::gloo_sentinel_slot, 0, 0);
        } catch (const std::exception& e) {
          throw error(errc::peer_lost, "", 0, rank, q,
                      "tutti::gloo: rank " + std::to_string(q) +
                          " closed its connection while the world was forming: " + e.what() +
                          store_silence(*s));
        }
      }
      count_host_ranks(*s, deadline);
      setup_single_copy(*s, deadline);
      // While Gloo runs one of its collectives: a peer whose connection closed aborts the world
      // (closing this rank's connections too), so the collective fails at once.
      // A rank that aborts records why before it closes its connections: a closed connection
      // with a record behind it is that rank's abort (its cause stands), without one a death.
      s->waker.set_watch([st = s.get()] {
        if (st->aborted) return;
        if (auto rec = recorded_abort(*st); rec && rec->writer != st->rank) {
          abort_world(*st, *rec, false);  // another rank failed: so does this call, at once
          return;
        }
        native_beat(*st);
        if (st->suspect_call != st->native_call) {
          st->suspect_call = st->native_call;
          st->suspect = -1;
        }
        for (int q = 0; q < st->size; ++q) {
          if (q == st->rank || !sentinel_closed(*st, q)) continue;
          if (auto rec = recorded_abort(*st)) {
            abort_world(*st, *rec, false);
          } else if (st->suspect != q) {
            // Gloo's own timeout closes a rank's connections a moment before tutti records
            // why: give q one tick to leave its record before calling it dead.
            st->suspect = q;
          } else {
            abort_world(*st, {errc::peer_lost, st->rank, q,
                              "rank " + std::to_string(q) +
                                  " closed its connection (its process exited or was killed)"});
          }
          return;
        }
      });
    } catch (const error&) {
      throw;
    } catch (const std::exception& e) {
      throw error(errc::transport_failure, "", 0, rank, -1,
                  std::string("tutti::gloo: could not connect the world: ") + e.what());
    }
    return gloo(std::move(s));
  }

 private:
  /// Whether a message in space `sp` to or from `peer` travels as a single copy.
  [[nodiscard]] bool cma_to(int peer, detail::space sp) const noexcept {
    return sp == detail::space::collective && single_copy(peer);
  }

  /// Waits in slices for one Gloo send or receive of `r` (see wait).
  void wait_buffer(request& r, ::gloo::transport::UnboundBuffer& b, bool is_send,
                   const detail::call& c, detail::clock::time_point deadline) {
    auto& st = *s_;
    const auto wait_until = [&](detail::clock::time_point due) {
      constexpr auto far = std::chrono::hours(24 * 365);
      try {
        st.waker.arm(&b, is_send, std::min(deadline, due));
        const bool done = is_send ? b.waitSend(nullptr, far) : b.waitRecv(nullptr, far);
        st.waker.disarm();
        return done;
      } catch (const std::exception& e) {
        st.waker.disarm();
        lost(r, c, e.what());
      }
    };
    for (;;) {
      if (wait_until(detail::clock::now() + std::chrono::milliseconds(100))) return;
      // A peer that sent its last message and exited closes its connection right after: a
      // slice cut just as the message completed leaves the completion with Gloo (a cut wait
      // returns false even then), so look once more before poll calls the peer lost. A
      // finished message returns at once; one that cannot finish fails or is cut at the
      // waker's next tick.
      if (connection_closed(r.peer_) && wait_until(detail::clock::now())) return;
      poll(c, deadline, r.peer_);
      cma_progress(r, c);  // descriptors waiting for room in a peer's inbox
    }
  }

  /// `lost` for a request whose pair failed: its posted parts can no longer complete.
  [[noreturn]] void lost(request& r, const detail::call& c, const std::string& gloo_what) {
    r.forget();
    lost(c, r.peer_, gloo_what);
  }

  void retire(std::unique_ptr<::gloo::transport::UnboundBuffer>&& b) {
    auto& st = *s_;
    st.retired.push_back(std::move(b));
    if (st.retired.size() > 64) st.retired.pop_front();
  }

  /// A process_vm_readv (or, `write`, process_vm_writev) with `peer` for `r` failed with `err`:
  /// ESRCH (its process is gone) raises errc::peer_lost as `lost` does; anything else aborts
  /// the world and raises errc::transport_failure: "rank <peer><what> (<call>: <reason>)".
  [[noreturn]] void cma_failed(request& r, const detail::call& c, int peer, int err, bool write,
                               std::string_view what) {
    const std::string call = write ? "process_vm_writev" : "process_vm_readv";
    r.forget();
    if (err == ESRCH) lost(c, peer, "its process is gone (" + call + ": ESRCH)");
    const std::string text = "rank " + std::to_string(peer) + std::string(what) + " (" + call +
                             ": " + std::generic_category().message(err) + ")";
    abort_world(*s_, {errc::transport_failure, rank(), peer, text});
    throw error(errc::transport_failure, c.name_str(), c.seq, rank(), peer, text);
  }

  /// A single-copy receive whose descriptor has arrived: reads the bytes out of the sender
  /// (reducing them chunk by chunk into reduce_into_, or straight into place), makes sure the
  /// sender still holds the message, then acknowledges (writes the sender's word), which frees
  /// the sender's buffer.
  void read_single_copy(request& r, const detail::call& c) {
    auto& st = *s_;
    const detail::cma_descriptor d = r.msg_->d;
    const pid_t pid = st.cma_pid[static_cast<std::size_t>(r.peer_)];
    auto fail = [&](errc code, const std::string& what) {
      r.forget();
      const std::string text = "rank " + std::to_string(r.peer_) + " " + what;
      abort_world(st, {code, rank(), r.peer_, text});
      throw error(code, c.name_str(), c.seq, rank(), r.peer_, text);
    };
    if (d.bytes != r.total_)
      fail(errc::mismatch, "sent " + std::to_string(d.bytes) + " bytes where this rank expected " +
                               std::to_string(r.total_));
    // The sender marks a message it gives up on (unwinding from an error, typically a third
    // rank's death) before its buffer can be freed or reused. Then the cause is in the world's
    // abort record, which the sender wrote before giving up: not the sender.
    const auto gave_up = [&] {
      std::uint64_t state = 0;
      return detail::cma_read(pid, &state, d.ack_address, sizeof state) == 0 &&
             state == detail::cma_ack_words::abandoned;
    };
    const auto raise_gave_up = [&] {
      r.forget();
      if (auto rec = read_abort(); rec && rec->writer != rank()) raise_recorded(c, *rec);
      fail(errc::aborted, "gave up on its message while this rank read it");
    };
    auto check = [&](int err, bool write = false) {
      if (err == 0) return;
      // A read that fails because the sender freed its abandoned buffer (EFAULT) is that.
      if (!write && err != ESRCH && gave_up()) raise_gave_up();
      cma_failed(r, c, r.peer_, err, write, write ? " could not be written" : " could not be read");
    };
    if (r.reduce_into_ != nullptr) {
      const std::size_t chunk = std::min(r.staging_.size(), single_copy_chunk);
      for (std::size_t at = 0; at < r.total_; at += chunk) {
        const std::size_t n = std::min(chunk, r.total_ - at);
        check(detail::cma_read(pid, r.staging_.data(), d.address + at, n));
        c.red(r.reduce_into_ + at, r.reduce_into_ + at, r.staging_.data(), n / c.elem_size);
      }
    } else {
      check(detail::cma_read(pid, r.data_, d.address, r.total_));
    }
    // Not marked after the read: the bytes read were the message's.
    std::uint64_t state = 0;
    check(detail::cma_read(pid, &state, d.ack_address, sizeof state));
    if (state == detail::cma_ack_words::abandoned) raise_gave_up();
    check(detail::cma_write_word(pid, d.ack_value, d.ack_address), true);
  }

  /// Waits until the receiver of single-copy send `r` acknowledged it (read_single_copy writes
  /// the word), as cma_wait waits.
  void wait_acknowledged(request& r, const detail::call& c, detail::clock::time_point deadline) {
    const std::uint64_t want = r.msg_->d.ack_value;
    cma_wait([&] { return r.ack_->load(std::memory_order_acquire) == want; }, r, c, deadline);
  }

  /// Waits until the descriptor of single-copy receive `r` has arrived, as cma_wait waits.
  void wait_arrival(request& r, const detail::call& c, detail::clock::time_point deadline) {
    cma_wait([&] { return r.msg_->arrived; }, r, c, deadline);
  }

  /// Waits until `done()`, moving every link's descriptors meanwhile (cma_progress). Spins
  /// (briefly where this machine's ranks outnumber its CPUs), then yields for up to 1 ms, then
  /// sleeps in naps of 20-200 µs; looks at the connection to `r`'s peer every millisecond (a
  /// peer that dies is named at once), and polls for aborts, mismatches and the deadline every
  /// 100 ms, as wait_buffer does. Yielding rather than napping at once matters most where
  /// ranks outnumber CPUs: a yield hands the CPU to a rank that has work (often the peer) and
  /// comes back as soon as none has, where a nap comes back 20 µs plus the timer's slack (50 µs)
  /// later at best, once per step — 4 ranks on 2 CPUs all-reduce 4 bytes by tree in about
  /// 30 µs yielding, 250 µs napping (bench/RESULTS.md). After 1 ms the wait is for something
  /// slow (a peer still computing): naps leave it the CPU.
  template <class Done>
  void cma_wait(Done done, request& r, const detail::call& c, detail::clock::time_point deadline) {
    using namespace std::chrono_literals;
    const auto ready = [&] {
      cma_progress(r, c);
      return done();
    };
    const bool shared_cpus = s_->oversubscribed;
    for (int i = 0, spins = shared_cpus ? 64 : 1024; i < spins; ++i) {
      if (ready()) return;
      detail::cpu_relax();
    }
    const auto start = detail::clock::now();
    auto next_poll = std::min(start + 100ms, deadline);
    auto next_look = start;
    std::chrono::microseconds nap = 20us;
    while (!ready()) {
      const auto now = detail::clock::now();
      if (now - start < 1ms) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(nap);
        nap = std::min<std::chrono::microseconds>(nap * 2, 200us);
      }
      if (s_->aborted) raise_aborted(c, r.peer_);
      if (now >= next_look || now >= next_poll) {
        // A peer that wrote its last word and exited closes its connection after the write:
        // seen closed, the wait may have been met meanwhile.
        if (connection_closed(r.peer_)) {
          if (ready()) return;
          lost(r, c, "its connection closed");
        }
        next_look = now + 1ms;
      }
      if (now >= next_poll) {
        poll(c, deadline, r.peer_, false);
        next_poll = std::min(detail::clock::now() + 100ms, deadline);
      }
    }
  }

  /// Moves single-copy descriptors on every link: takes those that peers wrote into this
  /// rank's mailbox (each to the first posted receive of its slot, or kept until one is
  /// posted), and writes those that waited for room into the peers' inboxes. `r` and `c` name
  /// the message and call a failure is raised for.
  void cma_progress(request& r, const detail::call& c) {
    auto& st = *s_;
    for (std::size_t q = 0; q < st.cma_links.size(); ++q) {
      if (st.cma_pid[q] == 0) continue;
      auto& link = st.cma_links[q];
      auto& box = st.mailbox[q + 1];
      for (;;) {
        auto& e = box.entries[link.taken % detail::cma_inbox::capacity];
        if (e.stamp.load(std::memory_order_acquire) != link.taken + 1) break;
        const detail::cma_inbox::body got{e.slot, e.d};
        box.taken.store(++link.taken, std::memory_order_release);
        const auto it =
            std::find_if(link.posted.begin(), link.posted.end(),
                         [&](const detail::cma_message* m) { return m->slot == got.slot; });
        if (it == link.posted.end()) {
          link.arrived.push_back(got);
        } else {
          (*it)->d = got.d;
          (*it)->arrived = true;
          link.posted.erase(it);
        }
      }
      if (!link.outbox.empty()) cma_flush(static_cast<int>(q), r, c);
    }
  }

  /// Writes the descriptors waiting in the outbox of the link to `peer` into the peer's inbox,
  /// as far as it has room: each entry's body, then (after a fence) its stamp.
  void cma_flush(int peer, request& r, const detail::call& c) {
    auto& st = *s_;
    auto& link = st.cma_links[static_cast<std::size_t>(peer)];
    const pid_t pid = st.cma_pid[static_cast<std::size_t>(peer)];
    const auto check = [&](int err, bool write) {
      if (err != 0)
        cma_failed(r, c, peer, err, write,
                   write ? "'s mailbox could not be written" : "'s mailbox could not be read");
    };
    constexpr auto cap = detail::cma_inbox::capacity;
    while (!link.outbox.empty()) {
      if (link.sent - link.room_seen >= cap) {
        check(detail::cma_read(pid, &link.room_seen, link.inbox, sizeof link.room_seen), false);
        if (link.sent - link.room_seen >= cap) return;
      }
      const std::uint64_t at = link.inbox + detail::cma_inbox::entry_offset(link.sent);
      check(detail::cma_transfer(pid, &link.outbox.front(), at, sizeof(detail::cma_inbox::body),
                                 true),
            true);
#if !defined(__SANITIZE_THREAD__)  // (ThreadSanitizer rejects fences, and sees no other process)
      std::atomic_thread_fence(std::memory_order_seq_cst);  // the body before the stamp
#endif
      check(detail::cma_write_word(pid, ++link.sent, at + detail::cma_inbox::stamp_offset), true);
      link.outbox.pop_front();
    }
  }

  /// Posts a Gloo send or receive of `n` bytes at `p` with `r`'s peer on `slot`, as the next
  /// part of `r`.
  void post_part(request& r, void* p, std::size_t n, std::uint64_t slot, bool is_send) {
    auto b = s_->ctx->createUnboundBuffer(n == 0 ? &s_->dummy : p, n);
    if (is_send)
      b->send(r.peer_, slot, 0, n);
    else
      b->recv(r.peer_, slot, 0, n);
    r.parts_.push_back(std::move(b));
  }

  /// Posts a single-copy message. A send takes a fresh acknowledgement word and writes its
  /// descriptor into the peer's inbox (or, while that is full, into the link's outbox); a
  /// receive claims the first descriptor of its slot that arrived unclaimed, or waits for one
  /// among the link's posted receives (cma_progress).
  request post_single_copy(int peer, std::byte* p, std::size_t bytes, const detail::call& c,
                           std::uint64_t tag, bool is_send) {
    auto& link = s_->cma_links[static_cast<std::size_t>(peer)];
    request r;
    r.s_ = s_;
    r.peer_ = peer;
    r.is_send_ = is_send;
    r.total_ = bytes;
    r.data_ = p;
    r.msg_ = std::make_unique<detail::cma_message>();
    r.msg_->slot = detail::gloo_slot(c, detail::space::collective, tag, bytes);
    r.cma_open_ = true;
    if (is_send) {
      const auto [word, value] = detail::cma_ack_words::instance().take();
      r.ack_ = word;
      r.msg_->d = {reinterpret_cast<std::uintptr_t>(p), bytes,
                   reinterpret_cast<std::uintptr_t>(word), value};
      link.outbox.push_back({r.msg_->slot, r.msg_->d});
      cma_flush(peer, r, c);
    } else {
      const auto it = std::find_if(link.arrived.begin(), link.arrived.end(),
                                   [&](const auto& got) { return got.slot == r.msg_->slot; });
      if (it == link.arrived.end()) {
        link.posted.push_back(r.msg_.get());
      } else {
        r.msg_->d = it->d;
        r.msg_->arrived = true;
        link.arrived.erase(it);
      }
    }
    return r;
  }

  /// Every rank publishes its machine's boot id and CPU count ("<boot id> <cpus>"); every rank
  /// reads them all, so all find the same ranks per CPU on the most crowded machine (the
  /// machine's online CPUs, which every process on it sees alike: a process's own affinity
  /// may differ between ranks). Counts the ranks on this machine.
  static void count_host_ranks(detail::gloo_state& st, detail::clock::time_point deadline) {
    if (st.size == 1) return;
    const std::string boot = detail::boot_id();
    const unsigned hw = std::thread::hardware_concurrency();
    const auto key = [&](int q) { return st.prefix + "host/" + std::to_string(q); };
    st.store->set_string(key(st.rank),
                         boot.empty() || hw == 0 ? "?" : boot + " " + std::to_string(hw));
    std::map<std::string, std::pair<int, unsigned>, std::less<>> hosts;  // ranks, CPUs
    for (int q = 0; q < st.size; ++q) {
      const std::string v = st.store->get_string(key(q), left(deadline));
      std::string_view rest = v;
      const auto id = detail::next_field(rest, false);
      const auto cpus = detail::next_integer<unsigned>(rest, true);
      if (!id || id->empty() || !cpus || *cpus == 0) continue;  // unknown: not counted
      auto& h = hosts[std::string(*id)];
      ++h.first;
      h.second = std::max(h.second, *cpus);
    }
    for (const auto& [id, h] : hosts) {
      st.ranks_per_cpu = std::max(st.ranks_per_cpu, double(h.first) / h.second);
      if (id == boot) st.host_ranks = h.first;
    }
    st.oversubscribed = detail::oversubscribed(st.host_ranks);
    if (detail::debug_info())
      std::fprintf(stderr,
                   "tutti[gloo] rank %d/%d: %d ranks on this machine (%u CPUs here); %.2f ranks "
                   "per CPU on the most crowded one\n",
                   st.rank, st.size, st.host_ranks, detail::usable_cpus(), st.ranks_per_cpu);
  }

  /// The probe (detail/cma.hpp): every rank publishes its host identity, pid and a random
  /// word's address; each reads the word of every peer on its host back, publishes which it
  /// could read, and uses single copies with the peers that could read it too. TUTTI_GLOO_CMA=0
  /// leaves this rank out (so every pair with it stays on TCP).
  static void setup_single_copy(detail::gloo_state& st, detail::clock::time_point deadline) {
    const auto n = static_cast<std::size_t>(st.size);
    st.cma_pid.assign(n, 0);
    if (st.size == 1) return;
    const std::string env = detail::env_string("TUTTI_GLOO_CMA");
    detail::cma_offer mine;
    if (env != "0" && env != "off" && env != "no" && env != "false") {
      mine.host = detail::cma_host_identity();
      mine.pid = ::getpid();
      std::random_device rd;
      mine.value = ((std::uint64_t{rd()} << 32) ^ rd()) | 1;
      st.mailbox = detail::cma_mailbox::make(st.size, mine.value);
      mine.address = reinterpret_cast<std::uintptr_t>(st.mailbox);
    }
    const auto key = [&](const char* what, int q) { return st.prefix + what + std::to_string(q); };
    st.store->set_string(key("cma/", st.rank), mine.encode());
    std::string readable(n, '0');
    std::vector<pid_t> pids(n, 0);
    st.cma_links.assign(n, {});
    std::string refused;
    for (int q = 0; q < st.size; ++q) {
      if (q == st.rank) continue;
      const auto theirs =
          detail::cma_offer::decode(st.store->get_string(key("cma/", q), left(deadline)));
      if (mine.host.empty() || !theirs || theirs->host != mine.host) continue;
      std::uint64_t got = 0;
      int err = detail::cma_read(theirs->pid, &got, theirs->address, sizeof got);
      // Acknowledgements are writes: write the word back as it was (others may be reading it).
      if (err == 0 && got == theirs->value)
        err = detail::cma_write_word(theirs->pid, got, theirs->address);
      if (err == 0 && got == theirs->value) {
        readable[static_cast<std::size_t>(q)] = '1';
        pids[static_cast<std::size_t>(q)] = theirs->pid;
        st.cma_links[static_cast<std::size_t>(q)].inbox =
            detail::cma_mailbox::inbox_address(theirs->address, st.rank);
      } else {
        refused += " " + std::to_string(q) + " (" +
                   (err != 0 ? std::generic_category().message(err) : std::string("wrong word")) +
                   ")";
      }
    }
    st.store->set_string(key("cma_ok/", st.rank), readable);
    // Every rank's list, so that every rank knows alike whether every pair has single copies.
    std::string with;
    const auto all_but = [n](const std::string& v, std::size_t self) {
      if (v.size() != n) return false;
      for (std::size_t j = 0; j < n; ++j)
        if (j != self && v[j] != '1') return false;
      return true;
    };
    st.single_copy_world = all_but(readable, static_cast<std::size_t>(st.rank));
    for (int q = 0; q < st.size; ++q) {
      if (q == st.rank) continue;
      const auto i = static_cast<std::size_t>(q);
      const std::string v = st.store->get_string(key("cma_ok/", q), left(deadline));
      st.single_copy_world = st.single_copy_world && all_but(v, i);
      if (readable[i] == '1' && v.size() == n && v[static_cast<std::size_t>(st.rank)] == '1') {
        st.cma_pid[i] = pids[i];
        with += " " + std::to_string(q);
      }
    }
    if (detail::debug_info())
      std::fprintf(stderr, "tutti[gloo] rank %d/%d: single copies with ranks:%s%s%s\n", st.rank,
                   st.size, with.empty() ? " none" : with.c_str(),
                   refused.empty() ? "" : "; cannot read the memory of ranks", refused.c_str());
  }

  request post(int peer, std::byte* p, std::size_t bytes, const detail::call& c, detail::space sp,
               std::uint64_t tag, bool is_send) {
    auto& st = *s_;
    if (peer < 0 || peer >= size() || peer == rank())
      throw error(errc::invalid_argument, c.name_str(), c.seq, rank(), peer,
                  "peer must be another rank in [0, " + std::to_string(size()) + ")");
    if (st.aborted) raise_aborted(c, peer);
    if (cma_to(peer, sp)) return post_single_copy(peer, p, bytes, c, tag, is_send);
    request r;
    r.s_ = s_;
    r.peer_ = peer;
    r.is_send_ = is_send;
    r.total_ = bytes;
    // send/recv messages stay whole: their ends may be posted with different element sizes.
    r.part_bytes_ = sp == detail::space::collective ? part_size(bytes, c.elem_size) : bytes;
    const std::size_t parts = bytes == 0 ? 1 : (bytes + r.part_bytes_ - 1) / r.part_bytes_;
    r.parts_.reserve(parts);
    try {
      const detail::sigpipe_guard no_sigpipe;
      for (std::size_t i = 0; i < parts; ++i) {
        const std::size_t at = i * r.part_bytes_;
        const std::size_t n = std::min(r.part_bytes_, bytes - at);
        post_part(r, p + at, n, detail::gloo_slot(c, sp, tag, n), is_send);
      }
    } catch (const std::exception& e) {
      lost(r, c, e.what());
    }
    return r;
  }

  /// Gloo's connectFullMesh within one deadline: at the deadline the waker closes the pairs
  /// (a connect waiting on one returns) and the store's waits have ended, so a rank whose peers
  /// died or never came raises errc::timeout then. Every failure names the rank this one was
  /// connecting to, and says so when the store does not answer either.
  static void connect_full_mesh(detail::gloo_state& st, detail::gloo_device& device,
                                detail::clock::time_point deadline,
                                std::chrono::milliseconds timeout) {
    detail::gloo_store_adapter adapter(*st.store, st.prefix, deadline);
    std::atomic<bool> closed{false};
    st.waker.set_watch([&] {
      if (!closed.load() && adapter.published() && detail::clock::now() >= deadline) {
        closed.store(true);
        device.close_pairs();
      }
    });
    auto failed = [&](errc code, const std::string& what) {
      const int peer = adapter.connecting();
      std::string text = "tutti::gloo: rank " + std::to_string(st.rank) +
                         (code == errc::timeout ? " could not connect to every rank within " +
                                                      std::to_string(timeout.count()) + " ms"
                                                : std::string(" could not connect the world"));
      if (peer >= 0) text += " (it was connecting to rank " + std::to_string(peer) + ")";
      if (!what.empty()) text += ": " + what;
      return error(code, "", 0, st.rank, peer, text + store_silence(st));
    };
    {
      const detail::gloo_waker::scope watching(st.waker);
      try {
        st.ctx->connectFullMesh(adapter, st.device);
      } catch (const error& e) {
        if (e.kind() == errc::timeout) throw failed(errc::timeout, e.what());
        throw;  // the store's own error (it names the store)
      } catch (const std::exception& e) {
        const bool late = closed.load() || detail::clock::now() >= deadline;
        throw failed(late ? errc::timeout : errc::transport_failure, e.what());
      }
    }
    st.waker.set_watch({});
    if (closed.load()) throw failed(errc::timeout, "");
  }

  /// Runs a Gloo collective with a type of the call's element size (Gloo sizes its segments
  /// in elements); translates Gloo's failures.
  template <class F>
  void native_run(const detail::call& c, detail::clock::time_point deadline, F&& f) {
    auto& st = *s_;
    if (st.aborted) raise_aborted(c, -1);
    struct b16 {
      std::byte b[16];
    };
    try {
      const detail::sigpipe_guard no_sigpipe;
      const detail::gloo_waker::scope watching((++st.native_call, st.waker));
      switch (c.elem_size) {
        case 1:
          f(std::uint8_t{});
          break;
        case 2:
          f(std::uint16_t{});
          break;
        case 4:
          f(std::uint32_t{});
          break;
        case 8:
          f(std::uint64_t{});
          break;
        default:
          f(b16{});
          break;
      }
    } catch (const error&) {
      throw;
    } catch (const std::exception& e) {
      const std::string what = e.what();
      if (detail::clock::now() >= deadline) {
        if (auto rec = read_abort(); rec && rec->writer != rank()) raise_recorded(c, *rec);
        const int stopped = stopped_peer();
        const int culprit = stopped >= 0 ? stopped : native_stalled();
        const std::string text =
            "timed out in Gloo's " + c.name_str() + ": " + what +
            (stopped >= 0
                 ? "; rank " + std::to_string(culprit) + " is stopped (SIGSTOP or a debugger)"
             : culprit >= 0
                 ? "; rank " + std::to_string(culprit) + " made no progress (busy outside tutti?)"
                 : std::string());
        abort_world(
            st, {errc::timeout, rank(), culprit, "rank " + std::to_string(rank()) + " " + text});
        throw error(errc::timeout, c.name_str(), c.seq, rank(), culprit, text);
      }
      lost(c, dead_peer(), what);
    }
  }

  /// A peer whose connection Gloo has seen close (its sentinel receive failed), else -1.
  [[nodiscard]] int dead_peer() noexcept {
    for (int q = 0; q < size(); ++q)
      if (q != rank() && connection_closed(q)) return q;
    return -1;
  }

  /// Whether Gloo has seen the connection to `peer` close: its sentinel receive (which never
  /// completes otherwise) has failed. Does not block: the wait is aborted before it starts.
  /// A tick of the watch during a Gloo collective that lasts: this rank beats (as its slow
  /// waits do) and notes when each peer's beat last moved, so that a timeout inside Gloo can
  /// name the rank that stopped.
  static void native_beat(detail::gloo_state& st) noexcept {
    try {
      const auto now = std::chrono::steady_clock::now();
      st.store->set_string(st.prefix + "beat/" + std::to_string(st.rank),
                           std::to_string(++st.beats));
      const auto n = static_cast<std::size_t>(st.size);
      const bool fresh = st.native_watched != st.native_call;
      st.native_watched = st.native_call;
      st.native_beats.resize(n);
      st.native_moved.resize(n);
      for (int q = 0; q < st.size; ++q) {
        if (q == st.rank) continue;
        std::string v;
        try {
          v = st.store->get_string(st.prefix + "beat/" + std::to_string(q),
                                   std::chrono::milliseconds(0));
        } catch (...) {
          // no beat yet: reads as standing still
        }
        const auto i = static_cast<std::size_t>(q);
        if (fresh || v != st.native_beats[i]) {
          st.native_beats[i] = std::move(v);
          st.native_moved[i] = now;
        }
      }
    } catch (...) {
      // the store went away: the timeout names no one
    }
  }

  /// After a Gloo collective timed out: the peer whose beat stood still longest during it,
  /// for at least stall_window; -1 if none (or the call was too short to watch).
  /// A peer whose process is stopped (SIGSTOP, a debugger), by /proc: certain, where a beat
  /// standing still only suggests it (on a busy machine a live rank may not run for a while
  /// either). Only peers on this host whose pid the single-copy probe verified; -1 if none.
  [[nodiscard]] int stopped_peer() const noexcept {
    const auto& pids = s_->cma_pid;
    for (std::size_t q = 0; q < pids.size(); ++q)
      if (static_cast<int>(q) != rank() && pids[q] != 0 && detail::process_stopped(pids[q]))
        return static_cast<int>(q);
    return -1;
  }

  [[nodiscard]] int native_stalled() {
    auto& st = *s_;
    if (st.native_watched != st.native_call ||
        st.native_moved.size() != static_cast<std::size_t>(st.size))
      return -1;
    const auto now = std::chrono::steady_clock::now();
    int who = -1;
    for (int q = 0; q < st.size; ++q) {
      // Not connection_closed: Gloo's own timeout has just closed every connection of this rank.
      if (q == st.rank) continue;
      const auto since = st.native_moved[static_cast<std::size_t>(q)];
      if (now - since >= stall_window &&
          (who < 0 || since < st.native_moved[static_cast<std::size_t>(who)]))
        who = q;
    }
    return who;
  }

  [[nodiscard]] bool connection_closed(int peer) noexcept { return sentinel_closed(*s_, peer); }
  [[nodiscard]] static bool sentinel_closed(detail::gloo_state& st, int peer) noexcept {
    if (peer < 0 || static_cast<std::size_t>(peer) >= st.sentinels.size()) return false;
    auto& b = st.sentinels[static_cast<std::size_t>(peer)];
    if (!b) return true;  // failed before
    try {
      b->abortWaitRecv();
      (void)b->waitRecv(nullptr, std::chrono::hours(1));
      return false;
    } catch (...) {
      return true;
    }
  }

  [[nodiscard]] static ::gloo::AllreduceOptions::Func reduce_fn(const detail::call& c) {
    const detail::reducer red = c.red;
    return [red](void* d, const void* a, const void* b, std::size_t n) { red(d, a, b, n); };
  }

  [[nodiscard]] static std::chrono::milliseconds left(detail::clock::time_point deadline) {
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - detail::clock::now());
    return std::max(ms, std::chrono::milliseconds(1));
  }

  static void copy_if_distinct(std::byte* d, const std::byte* s, std::size_t n) noexcept {
    if (d != s && n != 0) std::memmove(d, s, n);
  }

  /// A Gloo call failed or a connection closed while talking to `peer` (-1: unknown). If some
  /// rank aborted the world, raises its reason; else the peer is gone: errc::peer_lost.
  [[noreturn]] void lost(const detail::call& c, int peer, const std::string& gloo_what) {
    auto& st = *s_;
    if (auto rec = read_abort(); rec && rec->writer != rank()) {
      raise_recorded(c, *rec);
    } else if (rec && st.aborted && rec->code == errc::peer_lost) {
      // This rank's native watch saw the peer go and closed the connections.
      throw error(errc::peer_lost, c.name_str(), c.seq, rank(), rec->subject, rec->what);
    }
    if (st.aborted) raise_aborted(c, peer);
    const std::string who = peer >= 0 ? "rank " + std::to_string(peer) : "a peer";
    // With the store gone too (a tcp:// store dies with its rank), no abort record can say
    // why the peer left: it may have been failing because the store's host died.
    const std::string text =
        who + " closed its connection (its process exited or was killed): " + gloo_what +
        store_silence(st);
    abort_world(st, {errc::peer_lost, rank(), peer, text});
    throw error(errc::peer_lost, c.name_str(), c.seq, rank(), peer, text);
  }

  /// Raises the error another rank recorded when it aborted the world (after closing this
  /// rank's connections too, so the ranks waiting on it learn at once).
  [[noreturn]] void raise_recorded(const detail::call& c, const detail::gloo_abort_record& rec) {
    abort_world(*s_, rec, false);
    // `subject` is the writer's other side; on that side it is this rank: name the writer.
    int peer = rec.subject == rank() ? rec.writer : rec.subject;
    // A mismatch is between the writer and the subject, one of whom may have made the same call
    // as this rank: name the one whose call (its record in the store) differs from this rank's.
    if (rec.code == errc::mismatch && c.compared())
      for (const int q : {rec.subject, rec.writer}) {
        if (q < 0 || q == rank() || q >= size()) continue;
        try {
          const auto theirs = detail::gloo_parse_call(s_->store->get_string(
              s_->prefix + "call/" + std::to_string(q), std::chrono::milliseconds(0)));
          if (theirs && theirs->first == c.seq && !(theirs->second == c.fp)) {
            peer = q;
            break;
          }
        } catch (const error&) {  // no record, or no store: keep the writer's view
        }
      }
    throw error(rec.code, c.name_str(), c.seq, rank(), peer,
                "rank " + std::to_string(rec.writer) + " reported: " + rec.what);
  }

  [[noreturn]] void raise_aborted(const detail::call& c, int peer) {
    if (auto rec = read_abort())
      throw error(
          errc::aborted, c.name_str(), c.seq, rank(), rec->subject,
          "the world was aborted: rank " + std::to_string(rec->writer) + " reported: " + rec->what);
    throw error(errc::aborted, c.name_str(), c.seq, rank(), peer,
                "this rank's connections were closed by an earlier error");
  }

  /// "" if the store answers (a missing key is an answer), else "; the store does not answer
  /// either (why)".
  [[nodiscard]] static std::string store_silence(detail::gloo_state& st) {
    try {
      (void)st.store->get_string(st.prefix + "abort", std::chrono::milliseconds(0));
    } catch (const error& e) {
      if (e.kind() != errc::timeout)
        return "; the store does not answer either (" + std::string(e.what()) + ")";
    } catch (...) {
      // an answer of some kind: the store is up
    }
    return {};
  }

  [[nodiscard]] std::optional<detail::gloo_abort_record> read_abort() noexcept {
    return recorded_abort(*s_);
  }
  [[nodiscard]] static std::optional<detail::gloo_abort_record> recorded_abort(
      detail::gloo_state& st) noexcept {
    try {
      const std::string v = st.store->get_string(st.prefix + "abort", std::chrono::milliseconds(0));
      return detail::gloo_abort_record::decode(v);
    } catch (...) {
      return std::nullopt;  // no record, or the store is gone with its rank
    }
  }

  /// How long a peer's beat must stand still before a timeout names it as the rank that
  /// stopped: a few slices of a waiting rank's polls.
  static constexpr std::chrono::milliseconds stall_window{250};

  /// Every peer's beat key ("" where there is none yet, or the store does not answer).
  [[nodiscard]] std::vector<std::string> read_beats() {
    auto& st = *s_;
    std::vector<std::string> v(static_cast<std::size_t>(st.size));
    for (int q = 0; q < st.size; ++q) {
      if (q == st.rank) continue;
      try {
        v[static_cast<std::size_t>(q)] = st.store->get_string(
            st.prefix + "beat/" + std::to_string(q), std::chrono::milliseconds(0));
      } catch (...) {
        // no beat yet, or no store: reads as standing still
      }
    }
    return v;
  }

  /// Beats (once per poll, so at most every slice of a slow wait; never on the fast path) and,
  /// at the first poll of a slow wait, notes every peer's beat.
  void watch_beats(detail::clock::time_point now) {
    auto& st = *s_;
    try {
      st.store->set_string(st.prefix + "beat/" + std::to_string(st.rank),
                           std::to_string(++st.beats));
    } catch (...) {
      // the store went away: peers will see this rank as standing still
    }
    if (now - st.last_poll > stall_window) {
      st.beats_seen = read_beats();
      st.beats_since = now;
    }
    st.last_poll = now;
  }

  /// The lowest peer, open to this rank, whose beat has not moved for at least stall_window
  /// since this wait began to watch; -1 if none.
  [[nodiscard]] int stalled(detail::clock::time_point now) {
    auto& st = *s_;
    if (now - st.beats_since < stall_window ||
        st.beats_seen.size() != static_cast<std::size_t>(st.size))
      return -1;
    const auto v = read_beats();
    for (int q = 0; q < st.size; ++q)
      if (q != st.rank &&
          v[static_cast<std::size_t>(q)] == st.beats_seen[static_cast<std::size_t>(q)] &&
          !connection_closed(q))
        return q;
    return -1;
  }

  /// Before every further slice of a slow wait: another rank's abort, a mismatched call, the
  /// deadline. A timeout names the peer whose beat stood still (stopped, or computing outside
  /// tutti for longer than the timeout) whoever this rank waited on, in the abort record too.
  void poll(const detail::call& c, detail::clock::time_point deadline, int peer,
            bool look_at_peer = true) {
    auto& st = *s_;
    watch_beats(detail::clock::now());
    if (auto rec = read_abort(); rec && rec->writer != rank()) raise_recorded(c, *rec);
    // Gloo wakes a receive whose connection closed, not a send waiting for the peer to post
    // its receive: ask the sentinel (unless the caller does, as cma_wait).
    if (look_at_peer && peer >= 0 && connection_closed(peer))
      lost(c, peer, "its connection closed while this rank waited to send to it");
    const bool collective = c.compared();
    std::string theirs_text;
    if (collective) {
      try {
        if (st.published_seq != c.seq) {
          st.store->set_string(st.prefix + "call/" + std::to_string(rank()),
                               detail::gloo_call_record(c));
          st.published_seq = c.seq;
        }
        const std::string v = st.store->get_string(st.prefix + "call/" + std::to_string(peer),
                                                   std::chrono::milliseconds(0));
        if (auto theirs = detail::gloo_parse_call(v)) {
          if (theirs->first == c.seq && !(theirs->second == c.fp)) {
            const std::string what = detail::mismatch_text(rank(), c.fp, peer, theirs->second);
            abort_world(st, {errc::mismatch, rank(), peer, what});
            throw error(errc::mismatch, c.name_str(), c.seq, rank(), peer, what);
          }
          theirs_text = " (rank " + std::to_string(peer) + " was last seen in call #" +
                        std::to_string(theirs->first) + " " + theirs->second.describe() + ")";
        }
      } catch (const error& e) {
        if (e.code() == errc::mismatch) throw;
        // No record yet, or the store is unreachable: the deadline still holds.
      }
    }
    if (const auto now = detail::clock::now(); now >= deadline) {
      std::string text = (peer >= 0 ? "timed out waiting for rank " + std::to_string(peer)
                                    : std::string("timed out waiting for the other ranks")) +
                         theirs_text;
      int blame = peer;
      if (const int stopped = stopped_peer(); stopped >= 0) {
        text += ": rank " + std::to_string(stopped) + " is stopped (SIGSTOP or a debugger)";
        blame = stopped;
      } else if (const int still = stalled(now); still >= 0) {
        char secs[32];
        std::snprintf(secs, sizeof secs, "%.2f",
                      std::chrono::duration<double>(now - st.beats_since).count());
        text += ": rank " + std::to_string(still) + " made no progress for " + secs +
                " s (busy outside tutti?)";
        blame = still;
      }
      abort_world(st,
                  {errc::timeout, rank(), blame, "rank " + std::to_string(rank()) + " " + text});
      throw error(errc::timeout, c.name_str(), c.seq, rank(), blame, text);
    }
  }

  /// Records why (unless `record` is false: the reason came from the store) and closes every
  /// connection of this rank, so ranks waiting on it raise at once instead of at their
  /// deadlines. Gloo has no call for this in this version; a receive that times out makes it
  /// close the context's connections, so this posts one that cannot complete and lets it.
  static void abort_world(detail::gloo_state& st, const detail::gloo_abort_record& why,
                          bool record = true) noexcept {
    if (st.aborted) return;
    st.aborted = true;
    if (record) {
      try {
        st.store->set_string(st.prefix + "abort", why.encode());
      } catch (...) {
        // the store went away: closing the connections still tells the peers
      }
    }
    if (st.size == 1 || !st.ctx) return;
    for (int q = 0; q < st.size; ++q) {
      if (q == st.rank) continue;
      bool posted = false;
      try {
        auto b = st.ctx->createUnboundBuffer(&st.dummy, 0);
        b->recv(q, detail::gloo_p2p_prefix | detail::gloo_slot_mask, 0, 0);
        posted = true;
        b->waitRecv(nullptr, std::chrono::milliseconds(1));
      } catch (...) {
        // Posting fails at once on a pair that failed already (try the next); the wait
        // times out and closes every connection.
      }
      if (posted) break;
    }
    // Gloo leaves a send already on the wire to a dead peer waiting: fail every buffer.
    st.buffers->fail(why.what);
  }

  /// "tutti/gloo/<n>": the n-th gloo world this process joins (every rank joins in one order).
  [[nodiscard]] static std::string next_key() {
    static std::atomic<unsigned> generation{0};
    return "tutti/gloo/" + std::to_string(generation.fetch_add(1));
  }

  std::shared_ptr<detail::gloo_state> s_;
};

}  // namespace tutti::inline v0

#endif

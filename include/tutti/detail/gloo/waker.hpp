#pragma once
/// \file
/// tutti::gloo's waker thread, which cuts a blocked Gloo wait into slices and runs a watch
/// while Gloo runs a collective of its own; the guard that keeps SIGPIPE from ending the
/// process while Gloo writes to a dead peer's socket, and the one that starts Gloo's loop
/// thread under SCHED_BATCH.

#include <pthread.h>
#include <sched.h>
#include <signal.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include <gloo/transport/unbound_buffer.h>

#include "tutti/core/options.hpp"
#include "tutti/detail/wait.hpp"

namespace tutti::inline v0::detail {

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
  /// Arms for a slice that has already ended and wakes the thread: the wait that follows
  /// returns at once, done or not (a poll of Gloo's buffer, which has no call for that).
  void kick(::gloo::transport::UnboundBuffer* b, bool is_send) {
    arm(b, is_send, clock::now());
    cv_.notify_one();
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

/// Gloo's loop thread (one per TCP device: it reads and writes every pair's socket) handles
/// a pair's events only if it can take the pair's lock at once; if not, it returns to
/// epoll_wait, which reports the same unread bytes at once, and so spins. A rank's own thread
/// holds that lock while it posts a send or a receive. Where the loop thread, woken by a
/// packet, preempts that thread on its CPU, it spins until the scheduler's slice ends with the
/// thread that would let go waiting for the CPU. On simulated hosts sharing 2 CPUs nearly every
/// event call then found the lock taken, and recursive halving's mid-size all_reduce took
/// several times its usual time (bench/RESULTS.md, "Gloo's loop thread spins on a lock").
/// Under SCHED_BATCH a thread woken does not preempt the one running, so the lock's holder
/// finishes first.
///
/// The guard runs the calling thread under SCHED_BATCH for its life, where it runs under
/// SCHED_OTHER (a real-time or idle policy is left alone): threads started meanwhile (Gloo's
/// loop thread, created with the device) inherit it for good. TUTTI_GLOO_LOOP_BATCH=0 leaves
/// the policy alone.
class batch_scheduling_guard {
 public:
  batch_scheduling_guard() noexcept {
#if defined(SCHED_BATCH)
    if (!env_switch_on("TUTTI_GLOO_LOOP_BATCH")) return;
    if ((sched_getscheduler(0) & ~SCHED_RESET_ON_FORK) != SCHED_OTHER) return;
    const sched_param none{};
    on_ = sched_setscheduler(0, SCHED_BATCH, &none) == 0;
#endif
  }
  batch_scheduling_guard(const batch_scheduling_guard&) = delete;
  batch_scheduling_guard& operator=(const batch_scheduling_guard&) = delete;
  ~batch_scheduling_guard() {
#if defined(SCHED_BATCH)
    const sched_param none{};
    if (on_) (void)sched_setscheduler(0, SCHED_OTHER, &none);
#endif
  }

 private:
  bool on_ = false;
};

}  // namespace tutti::inline v0::detail

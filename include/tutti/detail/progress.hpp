#pragma once
/// \file
/// A communicator's progress thread: runs async collectives one at a time, in issue order.

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "tutti/work.hpp"

namespace tutti::inline v0::detail {

class progress_queue {
 public:
  progress_queue() = default;
  progress_queue(const progress_queue&) = delete;
  progress_queue& operator=(const progress_queue&) = delete;
  ~progress_queue() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();  // runs what is queued first: nothing is lost
  }

  /// Queues `job`; its outcome completes the returned state. Wakes the thread only if it
  /// sleeps: a loop of _async calls pays no system call while the thread is busy.
  std::shared_ptr<work_state> push(std::function<void()> job) {
    auto state = std::make_shared<work_state>();
    bool wake = false;
    {
      std::lock_guard lock(mu_);
      if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
      jobs_.push_back({std::move(job), state});
      pending_.fetch_add(1, std::memory_order_relaxed);
      wake = sleeping_;
    }
    if (wake) cv_.notify_one();
    return state;
  }

  /// Whether every queued job has run: the thread does not touch the transport until the
  /// next push (only the caller's thread pushes).
  [[nodiscard]] bool idle() const noexcept { return pending_.load(std::memory_order_acquire) == 0; }

  /// Blocks until every queued job has run. Costs one load when nothing is queued.
  void drain() {
    if (idle()) return;
    std::unique_lock lock(mu_);
    idle_cv_.wait(lock, [this] { return idle(); });
  }

 private:
  struct item {
    std::function<void()> job;
    std::shared_ptr<work_state> state;
  };

  void loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      if (jobs_.empty() && !stopping_) {
        sleeping_ = true;
        cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        sleeping_ = false;
      }
      if (jobs_.empty()) return;
      item it = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      std::exception_ptr error;
      try {
        it.job();
      } catch (...) {
        error = std::current_exception();
      }
      it.state->complete(error);
      lock.lock();
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) idle_cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::deque<item> jobs_;
  std::atomic<std::size_t> pending_{0};  // written under mu_; read without it by idle()
  bool sleeping_ = false;                ///< the thread waits on cv_ (under mu_)
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tutti::inline v0::detail

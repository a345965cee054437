#pragma once
/// \file
/// torch's Work for tutti's calls, and the thread that runs them in order.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <tutti/core/error.hpp>

namespace tutti_torch {

/// One call: wait(timeout), isCompleted, and a future holding the call's output tensors (what
/// DDP's communication hooks chain on).
class work final : public c10d::Work {
 public:
  work(int rank, c10d::OpType type, std::string title, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type),
        title_(std::move(title)),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {}

  /// Completes the future, then marks the call finished (with its error, if any): as gloo's,
  /// so a caller returning from wait() finds the future complete too.
  void complete(std::exception_ptr error) {
    if (error)
      future_->setError(error);
    else
      future_->markCompleted(c10::IValue(outputs_));
    finish(error);
  }

  bool wait(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(mutex_);
    if (timeout.count() <= 0) {  // torch's kNoTimeout: wait until done
      cv_.wait(lock, [this] { return completed_; });
    } else if (!cv_.wait_for(lock, timeout, [this] { return completed_; })) {
      C10_THROW_ERROR(DistBackendError, "tutti: " + title_ + " did not finish within " +
                                            std::to_string(timeout.count()) +
                                            " ms (Work.wait's timeout; the call goes on)");
    }
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }

  std::vector<at::Tensor> result() override { return outputs_; }
  /// The rank a receive's message came from (-1 for other calls).
  int sourceRank() const override { return source_; }
  void set_source(int r) { source_ = r; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::string title_;
  int source_ = -1;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

/// An exception_ptr to a c10::DistBackendError (torch.distributed.DistBackendError in Python)
/// carrying `what`.
[[nodiscard]] inline std::exception_ptr backend_error(const std::string& what) {
  try {
    C10_THROW_ERROR(DistBackendError, what);
  } catch (...) {
    return std::current_exception();
  }
}

/// `e` as torch raises it: a c10::Error as it is, anything else as a DistBackendError with its
/// message (tutti's errors among them).
[[nodiscard]] inline std::exception_ptr as_backend_error(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const c10::Error&) {
    return e;
  } catch (const std::exception& x) {
    return backend_error(x.what());
  } catch (...) {
    return backend_error("tutti: unknown exception");
  }
}

/// A thread that runs posted jobs one after another and completes each job's work with the
/// job's outcome. tutti's errors reach Python as DistBackendError with tutti's message.
class runner {
 public:
  runner() : thread_([this] { loop(); }) {}
  runner(const runner&) = delete;
  runner& operator=(const runner&) = delete;

  ~runner() { stop(); }

  /// Runs what was posted, then stops the thread; later posts raise. Each job is bounded by its
  /// communicator's deadline, and a communicator that failed fails its later calls at once.
  /// Idempotent; call it without the GIL.
  void stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    std::lock_guard lock(join_mu_);
    if (thread_.joinable()) thread_.join();
  }

  /// Queues fn for the thread; or, when `here` and nothing is queued or running, runs it on the
  /// calling thread (a blocking call, which torch waits for at once: no hand-over to another
  /// thread and back). Either way calls run one at a time, in the order they came.
  void post(c10::intrusive_ptr<work> w, std::function<void()> fn, bool here = false) {
    {
      std::lock_guard lock(mu_);
      TORCH_CHECK(!stop_, "tutti: the process group was shut down (destroy_process_group)");
      if (!here || busy_ || !jobs_.empty()) {
        jobs_.push_back({std::move(w), std::move(fn)});
        cv_.notify_one();
        return;
      }
      busy_ = true;
    }
    execute(job{std::move(w), std::move(fn)});
    bool wake = false;
    {
      std::lock_guard lock(mu_);
      busy_ = false;
      wake = stop_ || !jobs_.empty();  // a call queued meanwhile waits for this one
    }
    if (wake) cv_.notify_one();
  }

  /// Jobs posted and not yet started.
  [[nodiscard]] std::size_t queued() {
    std::lock_guard lock(mu_);
    return jobs_.size();
  }

 private:
  struct job {
    c10::intrusive_ptr<work> w;
    std::function<void()> fn;
  };

  void loop() {
    for (;;) {
      job j;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return !busy_ && (stop_ || !jobs_.empty()); });
        if (jobs_.empty()) return;
        j = std::move(jobs_.front());
        jobs_.pop_front();
        busy_ = true;
      }
      execute(std::move(j));
      std::lock_guard lock(mu_);
      busy_ = false;
    }
  }

  static void execute(job j) {
    std::exception_ptr error;
    try {
      j.fn();
    } catch (...) {
      error = as_backend_error(std::current_exception());
    }
    j.fn = nullptr;  // drop the tensors it holds before waking the waiter
    j.w->complete(error);
    // The work's tensors may be the last references to Python objects: this thread then
    // takes the GIL to release them, which must not happen once the interpreter is
    // finalizing (the thread would be ended inside a destructor). tutti_torch shuts every
    // backend down at exit (atexit), before finalization starts.
    j.w.reset();
  }

  std::mutex mu_;
  std::mutex join_mu_;
  std::condition_variable cv_;
  std::deque<job> jobs_;
  bool stop_ = false;
  bool busy_ = false;   // a job is running (on the thread or on a caller's)
  std::thread thread_;  // last: starts once the rest exists
};

}  // namespace tutti_torch

#pragma once
/// \file
/// tutti::work: the handle an async collective returns.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <thread>

#include "tutti/detail/wait.hpp"

namespace tutti::inline v0 {

namespace detail {
struct work_state {
  std::atomic<std::uint32_t> finished{0};
  doorbell bell;
  std::exception_ptr error;  // written before `finished` is set
  /// Point-to-point work moves its messages in the thread that waits for it:
  /// `drive(drive_ctx, true)` waits until the messages are done, `drive(drive_ctx, false)`
  /// moves what it can without blocking; either completes the state once they are done or
  /// failed. Null for collectives, which the progress thread or a CUDA stream completes.
  void (*drive)(void* ctx, bool block) noexcept = nullptr;
  void* drive_ctx = nullptr;

  /// Publishes the result and wakes waiters. A driven work is completed by the thread that
  /// waits for it or polls it, so nobody sleeps on its bell: `wake` false skips the ring's
  /// fence there.
  void complete(std::exception_ptr e, bool wake = true) noexcept {
    error = std::move(e);
    finished.store(1, std::memory_order_release);
    if (wake) bell.ring(false);
  }
  [[nodiscard]] bool is_done() const noexcept {
    return finished.load(std::memory_order_acquire) != 0;
  }
};
}  // namespace detail

/// Completion of an async collective or of non-blocking point-to-point messages, the same for
/// host and device memory. On host memory the collectives run in issue order on the
/// communicator's progress thread; on device memory (tutti::nccl) each is enqueued on its CUDA
/// stream before the call returns, and the handle completes once the stream has reached the end
/// of it. `isend`, `irecv` and a `batch` of them post their messages before the call returns;
/// on host memory their bytes move while this rank waits for them (or for any other call of
/// the communicator), so wait for them, or poll `done()`, from the thread that makes the
/// communicator's calls. Either way the buffers passed to the call must stay alive and
/// untouched (on the host, or by other streams' work) until `wait()` returns or `done()` is
/// true. Every call has its own deadline, so a wait always ends. Destroying an unwaited work
/// handle does not cancel the call.
class work {
 public:
  work() = default;
  explicit work(std::shared_ptr<detail::work_state> s) noexcept : s_(std::move(s)) {}

  /// True once the call finished (successfully or not). Never blocks; for point-to-point
  /// messages it moves what it can first (as MPI_Test does).
  [[nodiscard]] bool done() const noexcept {
    if (!s_) return true;
    if (s_->drive != nullptr && !s_->is_done()) s_->drive(s_->drive_ctx, false);
    return s_->is_done();
  }

  /// Blocks until the call finished; rethrows its tutti::error if it failed.
  void wait() const {
    if (!s_) return;
    if (s_->drive != nullptr && !s_->is_done()) s_->drive(s_->drive_ctx, true);
    detail::wait_on(
        s_->bell, false, [this] { return s_->is_done(); }, [] {});
    if (s_->error) std::rethrow_exception(s_->error);
  }

  /// Waits at most `d`. Returns false on timeout (the call goes on); true when it finished,
  /// after rethrowing its error if it failed.
  template <class Rep, class Period>
  [[nodiscard]] bool wait_for(std::chrono::duration<Rep, Period> d) const {
    if (!s_) return true;
    const auto deadline = detail::clock::now() + d;
    if (s_->drive != nullptr) {
      // Point-to-point: move the messages in slices until they are done or `d` has passed.
      for (unsigned spins = 0; !done(); ++spins) {
        if (detail::clock::now() >= deadline) return false;
        if (spins >= 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      if (s_->error) std::rethrow_exception(s_->error);
      return true;
    }
    struct expired {};
    try {
      detail::wait_on(
          s_->bell, false, [this] { return s_->is_done(); },
          [&] {
            if (detail::clock::now() >= deadline) throw expired{};
          });
    } catch (const expired&) {
      return false;
    }
    if (s_->error) std::rethrow_exception(s_->error);
    return true;
  }

 private:
  std::shared_ptr<detail::work_state> s_;
};

}  // namespace tutti::inline v0

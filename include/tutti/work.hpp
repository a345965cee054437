#pragma once
/// \file
/// tutti::work: the handle an async collective returns.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>

#include "tutti/detail/wait.hpp"

namespace tutti::inline v0 {

namespace detail {
struct work_state {
  std::atomic<std::uint32_t> finished{0};
  doorbell bell;
  std::exception_ptr error;  // written before `finished` is set

  void complete(std::exception_ptr e) noexcept {
    error = std::move(e);
    finished.store(1, std::memory_order_release);
    bell.ring(false);
  }
  [[nodiscard]] bool is_done() const noexcept {
    return finished.load(std::memory_order_acquire) != 0;
  }
};
}  // namespace detail

/// Completion of an async collective, the same for host and device memory. On host memory the
/// collectives run in issue order on the communicator's progress thread; on device memory
/// (tutti::nccl) each is enqueued on its CUDA stream before the call returns, and the handle
/// completes once the stream has reached the end of it. Either way the buffers passed to the
/// call must stay alive and untouched (on the host, or by other streams' work) until `wait()`
/// returns or `done()` is true. Every collective has its own deadline, so a wait always ends.
/// Destroying an unwaited work handle does not cancel the collective.
class work {
 public:
  work() = default;
  explicit work(std::shared_ptr<detail::work_state> s) noexcept : s_(std::move(s)) {}

  /// True once the collective finished (successfully or not). Never blocks.
  [[nodiscard]] bool done() const noexcept { return !s_ || s_->is_done(); }

  /// Blocks until the collective finished; rethrows its tutti::error if it failed.
  void wait() const {
    if (!s_) return;
    detail::wait_on(
        s_->bell, false, [this] { return s_->is_done(); }, [] {});
    if (s_->error) std::rethrow_exception(s_->error);
  }

  /// Waits at most `d`. Returns false on timeout (the collective goes on); true when it
  /// finished, after rethrowing its error if it failed.
  template <class Rep, class Period>
  [[nodiscard]] bool wait_for(std::chrono::duration<Rep, Period> d) const {
    if (!s_) return true;
    const auto deadline = detail::clock::now() + d;
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

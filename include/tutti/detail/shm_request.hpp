#pragma once
/// \file
/// tutti::shm::request: a posted point-to-point message of tutti::shm, until it is waited for
/// (shm::wait, shm::test) or withdrawn.

#include <memory>
#include <string>
#include <utility>

#include "tutti/core/error.hpp"
#include "tutti/detail/shm_state.hpp"

namespace tutti::inline v0 {
class shm;
}  // namespace tutti::inline v0

namespace tutti::inline v0::detail {

/// A posted send or receive; waited on with `shm::wait`. Destroyed unwaited, it withdraws
/// its message (a message already partly moved breaks the communicator's channels). A
/// pending request must not outlive the transport that posted it.
class shm_request {
 public:
  shm_request() = default;
  shm_request(shm_request&&) noexcept = default;
  shm_request& operator=(shm_request&& o) noexcept {
    if (this != &o) {
      release();
      op_ = std::move(o.op_);
      s_ = o.s_;
    }
    return *this;
  }
  shm_request(const shm_request&) = delete;
  shm_request& operator=(const shm_request&) = delete;
  ~shm_request() { release(); }
  [[nodiscard]] bool done() const noexcept { return !op_ || op_->complete; }

 private:
  friend class tutti::v0::shm;
  void release() noexcept {
    if (op_ && !op_->complete && !s_->channels.cancel(op_.get())) {
      s_->broken = true;
      s_->view.abort(errc::aborted, "rank " + std::to_string(s_->rank) +
                                        " abandoned a message half sent or received");
    }
    if (op_ && op_->complete)
      s_->give_op(std::move(op_));
    else
      op_.reset();  // withdrawn or abandoned: the channels may still know it; not reused
  }
  std::unique_ptr<shm_op> op_;
  // Not owning (a reference count would cost two atomic operations per message): whoever
  // posts requests destroys the pending ones before the transport (the communicator does).
  shm_state* s_ = nullptr;
};

}  // namespace tutti::inline v0::detail

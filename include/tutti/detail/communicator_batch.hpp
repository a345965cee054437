#pragma once
/// \file
/// A communicator's point-to-point messages as the machinery takes them (p2p_msg, from a
/// buffer of its memory space), and communicator::batch's builder.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tutti/core/types.hpp"
#include "tutti/detail/communicator_buffers.hpp"
#include "tutti/detail/communicator_p2p.hpp"
#include "tutti/work.hpp"

namespace tutti::inline v0::detail {

/// A send of `data` (a buffer of memory space `Space`) to `peer`.
template <class Space, class B>
[[nodiscard]] p2p_msg outgoing(B data, int peer, std::uint64_t tag) noexcept {
  return {true, std::as_bytes(view<Space>(data)), {}, peer, tag, dtype_of<value_of<B>>};
}
/// A receive into `data` (a buffer of memory space `Space`) from `peer`.
template <class Space, class B>
[[nodiscard]] p2p_msg incoming(B data, int peer, std::uint64_t tag) noexcept {
  return {false, {}, std::as_writable_bytes(view<Space>(data)), peer, tag, dtype_of<value_of<B>>};
}

/// The builder communicator::batch returns (documented there): the messages of one batch,
/// posted together by start(). `Comm`, the tutti::communicator that made it, must outlive it.
template <class Comm>
class batch_builder {
  using space = typename Comm::memory_space;

 public:
  template <buffer Buf>
  batch_builder& send(Buf data, int dst, std::uint64_t tag = 0) {
    msgs_.push_back(outgoing<space>(data, dst, tag));
    return *this;
  }
  template <writable_buffer Buf>
  batch_builder& recv(Buf data, int src, std::uint64_t tag = 0) {
    msgs_.push_back(incoming<space>(data, src, tag));
    return *this;
  }
  /// Posts every message; the work is done once all are. An empty batch is done at once.
  [[nodiscard]] work start() { return c_->p2p_async(std::span<const p2p_msg>(msgs_), stream_); }
  /// start(), then waits.
  void run() { start().wait(); }
  [[nodiscard]] std::size_t size() const noexcept { return msgs_.size(); }

 private:
  friend Comm;
  batch_builder(Comm& c, void* stream) : c_(&c), stream_(stream) {}
  Comm* c_;
  void* stream_;
  std::vector<p2p_msg> msgs_;
};

}  // namespace tutti::inline v0::detail

#pragma once
/// \file
/// What an algorithm sees of one call: ranks, blocking and non-blocking byte messaging with the
/// call's deadline, the type-erased reduction and scratch space. Algorithms are written once
/// against this, on bytes; element types never reach them. A class template over the
/// transport that dispatches on its concepts, so it sits at the algorithm layer although it is
/// private (tests/layers/check_layers.cmake).

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tutti/detail/algo_table.hpp"
#include "tutti/detail/blocks.hpp"
#include "tutti/detail/call.hpp"
#include "tutti/detail/scratch.hpp"
#include "tutti/detail/wait.hpp"
#include "tutti/transport/concepts.hpp"

namespace tutti::inline v0::detail {

template <class Transport>
class context {
 public:
  using transport_type = Transport;
  using request = typename Transport::request;

  context(Transport& t, const call& c, clock::time_point deadline, scratch_space& s,
          const algo_table& overrides) noexcept
      : t_(t), c_(c), deadline_(deadline), scratch_(s), overrides_(overrides) {}

  [[nodiscard]] int rank() const noexcept { return t_.rank(); }
  [[nodiscard]] int size() const noexcept { return t_.size(); }
  [[nodiscard]] const call& info() const noexcept { return c_; }
  [[nodiscard]] std::size_t elem() const noexcept { return c_.elem_size; }
  [[nodiscard]] Transport& transport() noexcept { return t_; }
  [[nodiscard]] clock::time_point deadline() const noexcept { return deadline_; }
  /// TUTTI_ALGO's rules, for tutti::automatic.
  [[nodiscard]] const algo_table& overrides() const noexcept { return overrides_; }

  [[nodiscard]] request isend(int peer, const void* p, std::size_t bytes) {
    return t_.isend(peer, {static_cast<const std::byte*>(p), bytes}, c_, space::collective, 0);
  }
  [[nodiscard]] request irecv(int peer, void* p, std::size_t bytes) {
    return t_.irecv(peer, {static_cast<std::byte*>(p), bytes}, c_, space::collective, 0);
  }
  void wait(request& r) { t_.wait(r, c_, deadline_); }

  void send(int peer, const void* p, std::size_t bytes) {
    auto r = isend(peer, p, bytes);
    wait(r);
  }
  void recv(int peer, void* p, std::size_t bytes) {
    auto r = irecv(peer, p, bytes);
    wait(r);
  }
  /// Sends to `to` and receives from `from` at the same time (either may equal the other).
  void sendrecv(int to, const void* sp, std::size_t sbytes, int from, void* rp,
                std::size_t rbytes) {
    auto rr = irecv(from, rp, rbytes);
    auto sr = isend(to, sp, sbytes);
    wait(rr);
    wait(sr);
  }

  /// `inout = inout op message from "from"`, fused where the transport can.
  void recv_reduce(int from, void* inout, std::size_t bytes) {
    auto r = irecv_reduce(from, inout, bytes);
    wait(r);
    finish_reduce(inout, bytes);
  }
  /// Sends `sp` to `to` while reducing the message from `from` into `inout`.
  void sendrecv_reduce(int to, const void* sp, std::size_t sbytes, int from, void* inout,
                       std::size_t rbytes) {
    auto rr = irecv_reduce(from, inout, rbytes);
    auto sr = isend(to, sp, sbytes);
    wait(rr);
    wait(sr);
    finish_reduce(inout, rbytes);
  }

  /// Whether a receive of `bytes` from `peer` should be posted a step ahead of its message
  /// (exchange_reduce_and_post): never on a device transport, whose operations run in order
  /// on its stream (an early receive would hold back every later operation until its message
  /// came); as the transport says where it has a say (tutti::gloo: not for a message of several
  /// TCP parts); else always.
  [[nodiscard]] bool post_ahead(int peer, std::size_t bytes) const noexcept {
    if constexpr (device_transport<Transport>)
      return false;
    else if constexpr (requires { t_.post_ahead(peer, bytes, c_.elem_size); })
      return t_.post_ahead(peer, bytes, c_.elem_size);
    else
      return true;
  }

  /// Whether run_ring posts the receive of `bytes` from `peer` (reducing into place:
  /// `reduce`) a step early: where the transport asks for that (`ring_post_ahead`: tutti::gloo,
  /// whose sends wait for the receiver's recv-ready notice, and tutti::inproc, whose two sides
  /// meet) and, for a reducing receive, reduces on arrival (fused_receive: a staged one would
  /// need a second staging buffer). Not where sends go ahead on their own (tutti::shm's
  /// channels): an early receive saves no wait there, and made ring's large all_reduce slower
  /// at random (bench/RESULTS.md). Never on a device transport (post_ahead).
  [[nodiscard]] bool ring_post_ahead(int peer, std::size_t bytes, bool reduce) const noexcept {
    if constexpr (!device_transport<Transport> &&
                  requires { t_.ring_post_ahead(peer, bytes, c_.elem_size); }) {
      constexpr bool on_arrival = fused_receive<Transport>;
      return (on_arrival || !reduce) && t_.ring_post_ahead(peer, bytes, c_.elem_size);
    } else {
      return false;
    }
  }

  /// Posts a receive of `bytes` from `from` into `p`, reduced into it (`reduce`: `p = p op
  /// message`) or copied; wait for it, then finish_receive.
  [[nodiscard]] request post_receive(int from, void* p, std::size_t bytes, bool reduce) {
    return reduce ? irecv_reduce(from, p, bytes) : irecv(from, p, bytes);
  }
  /// Completes a receive from post_receive after its wait.
  void finish_receive(void* p, std::size_t bytes, bool reduce) {
    if (reduce) finish_reduce(p, bytes);
  }

  /// sendrecv_reduce with `to == from`, which also posts the receive of that peer's next
  /// message into `next` before this step's send goes: a transport whose sends wait until the
  /// receiver has posted (Gloo's TCP pairs) then finds it posted when that message comes. The
  /// caller waits for the returned receive. `next` may be the range this step sends from: the
  /// peer can only answer once it has this step's message.
  [[nodiscard]] request exchange_reduce_and_post(int peer, const void* sp, std::size_t sbytes,
                                                 void* inout, std::size_t rbytes, void* next,
                                                 std::size_t next_bytes) {
    auto rr = irecv_reduce(peer, inout, rbytes);
    auto nr = irecv(peer, next, next_bytes);
    auto sr = isend(peer, sp, sbytes);
    wait(rr);
    wait(sr);
    finish_reduce(inout, rbytes);
    return nr;
  }

  /// d = a op b over `bytes` bytes of elements (on the GPU for device transports).
  void reduce(void* d, const void* a, const void* b, std::size_t bytes) {
    if constexpr (device_transport<Transport>)
      t_.device_reduce(c_, d, a, b, bytes / c_.elem_size);
    else
      c_.red(d, a, b, bytes / c_.elem_size);
  }

  /// dst = src, `bytes` bytes of the transport's memory (a no-op when they are the same).
  void copy(void* dst, const void* src, std::size_t bytes) {
    if constexpr (device_transport<Transport>)
      t_.device_copy(c_, dst, src, bytes);
    else
      copy_bytes(dst, src, bytes);
  }

  /// avg's final division of the `count` result elements at `out`, unless the policy's
  /// backend already applied it (mark_finished).
  void finish(void* out, std::size_t count) {
    if (finished_ || out == nullptr) return;
    if constexpr (device_transport<Transport>)
      t_.device_finish(c_, out, count);
    else
      c_.red.finish(out, count, size());
  }
  /// The backend applied avg's division itself (NCCL's ncclAvg).
  void mark_finished() noexcept { finished_ = true; }

  /// Which half of the shared segment the next round uses (0 or 1). Consecutive rounds
  /// alternate, so a rank may start writing round k + 1 while peers still read round k.
  [[nodiscard]] std::size_t next_segment_half() noexcept { return scratch_.segment_rounds++ % 2; }

  /// Scratch memory for the algorithm (in the transport's memory), valid until the call
  /// returns.
  [[nodiscard]] std::byte* scratch(std::size_t bytes) {
    if constexpr (device_transport<Transport>)
      return t_.device_scratch(c_, bytes, false);
    else
      return scratch_space::grow(scratch_.algo, bytes);
  }

 private:
  request irecv_reduce(int from, void* inout, std::size_t bytes) {
    if constexpr (fused_receive<Transport>) {
      return t_.irecv_reduce(from, {static_cast<std::byte*>(inout), bytes}, c_);
    } else {
      return irecv(from, staging(bytes), bytes);
    }
  }
  void finish_reduce(void* inout, std::size_t bytes) {
    if constexpr (!fused_receive<Transport>) reduce(inout, inout, staging(bytes), bytes);
  }
  std::byte* staging(std::size_t bytes) {
    if constexpr (device_transport<Transport>)
      return t_.device_scratch(c_, bytes, true);
    else
      return scratch_space::grow(scratch_.staging, bytes);
  }

  Transport& t_;
  const call& c_;
  clock::time_point deadline_;
  scratch_space& scratch_;
  const algo_table& overrides_;
  bool finished_ = false;
};

}  // namespace tutti::inline v0::detail

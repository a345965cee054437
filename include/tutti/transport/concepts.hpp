#pragma once
/// \file
/// What a transport is: concepts for point-to-point messaging, a shared segment, native
/// collectives, and the memory space its buffers live in.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "tutti/core/options.hpp"
#include "tutti/detail/call.hpp"
#include "tutti/detail/split.hpp"
#include "tutti/detail/wait.hpp"

namespace tutti::inline v0 {

/// Memory spaces: where a transport's buffers live. A collective on a transport accepts only
/// spans of its memory space.
struct host_memory {};
struct cuda_device_memory {};

/// Non-blocking send and receive of byte spans between ranks. Messages between a pair of ranks
/// in one space are matched in the order they were posted (collectives) or by tag (send/recv).
/// Every wait has a deadline, and raises tutti::error on timeout, abort, dead peer or mismatch.
template <class T>
concept point_to_point = requires(T& t, const T& ct, int peer, std::span<const std::byte> out,
                                  std::span<std::byte> in, const detail::call& c, std::uint64_t tag,
                                  typename T::request& req, detail::clock::time_point deadline) {
  typename T::memory_space;
  { ct.rank() } -> std::same_as<int>;
  { ct.size() } -> std::same_as<int>;
  { t.isend(peer, out, c, detail::space::collective, tag) } -> std::same_as<typename T::request>;
  { t.irecv(peer, in, c, detail::space::collective, tag) } -> std::same_as<typename T::request>;
  t.wait(req, c, deadline);
  t.publish(c);  // announces the call's fingerprint before its first exchange; may raise
                 // an abort already recorded for the world
};

/// A transport that can reduce an incoming message straight into the receive buffer
/// (`in = in op message`) without a staging copy.
template <class T>
concept fused_receive =
    point_to_point<T> && requires(T& t, int peer, std::span<std::byte> in, const detail::call& c) {
      { t.irecv_reduce(peer, in, c) } -> std::same_as<typename T::request>;
    };

/// All ranks map one segment: each rank owns a slot of `segment_bytes()` that every rank can
/// read and write, and `segment_barrier` synchronises them.
template <class T>
concept shared_segment = point_to_point<T> && requires(T& t, int r, const detail::call& c,
                                                       detail::clock::time_point deadline) {
  { t.segment(r) } -> std::same_as<std::byte*>;
  { t.segment_bytes() } -> std::same_as<std::size_t>;
  t.segment_barrier(c, deadline);
};

/// A shared-segment transport that also moves small payloads in cache lines carrying their
/// own ready flags (one line transfer per 56 bytes, no flag to fetch first): direct's small
/// all_reduce uses it. `lines_put` publishes this rank's contribution to call c (at most
/// `line_capacity()` bytes); `lines_get` waits for rank q's and copies it out, raising
/// tutti::error on a mismatched call. Every rank must `lines_get` every other rank's
/// contribution before its next `lines_put`.
template <class T>
concept line_exchange =
    shared_segment<T> && requires(T& t, const detail::call& c, const std::byte* in, std::byte* out,
                                  std::size_t n, int q, detail::clock::time_point deadline) {
      { T::line_capacity() } -> std::same_as<std::size_t>;
      t.lines_put(c, in, n);
      t.lines_get(q, c, out, n, deadline);
    };

/// Device-memory transports (tutti::nccl): work is enqueued on a CUDA stream. The communicator
/// records an event after each call (`record`) and waits for it with the call's deadline
/// (`complete`): at once for a blocking call, on its progress thread for an async one. Own
/// policies copy, reduce and keep scratch on the device through the transport.
template <class T>
concept device_transport =
    point_to_point<T> && std::same_as<typename T::memory_space, cuda_device_memory> &&
    requires(T& t, const detail::call& c, void* d, const void* s, std::size_t n,
             detail::clock::time_point deadline) {
      t.complete(t.record(c), c, deadline);
      t.device_copy(c, d, s, n);
      t.device_reduce(c, d, s, s, n);
      t.device_finish(c, d, n);
      { t.device_scratch(c, n, true) } -> std::same_as<std::byte*>;
    };

/// Transports that make a sub-communicator's endpoint from a parent's (communicator::split):
/// `t.split(plan, exchange, opts)` returns this rank's endpoint in the child the plan names,
/// or nothing for a rank that joins none, calling `exchange` (an all-gather over the parent)
/// once on every parent rank or on none.
template <class T>
concept splittable =
    requires(T& t, const detail::split_plan& p, const detail::split_exchange& x, const options& o) {
      { t.split(p, x, o) } -> std::same_as<std::optional<T>>;
    };

/// Transports whose backend runs collectives itself (Gloo's algorithms, NCCL's kernels):
/// tutti::native delegates to them. One concept per collective; a backend offers a subset.
template <class T>
concept native_all_reduce =
    requires(T& t, const detail::call& c, const std::byte* in, std::byte* out, std::size_t n,
             detail::clock::time_point d) { t.native_all_reduce(c, in, out, n, d); };
template <class T>
concept native_reduce =
    requires(T& t, const detail::call& c, const std::byte* in, std::byte* out, std::size_t n,
             int root, detail::clock::time_point d) { t.native_reduce(c, in, out, n, root, d); };
template <class T>
concept native_broadcast =
    requires(T& t, const detail::call& c, std::byte* buf, std::size_t n, int root,
             detail::clock::time_point d) { t.native_broadcast(c, buf, n, root, d); };
template <class T>
concept native_all_gather =
    requires(T& t, const detail::call& c, const std::byte* in, std::byte* out, std::size_t n,
             detail::clock::time_point d) { t.native_all_gather(c, in, out, n, d); };
template <class T>
concept native_gather =
    requires(T& t, const detail::call& c, const std::byte* in, std::byte* out, std::size_t n,
             int root, detail::clock::time_point d) { t.native_gather(c, in, out, n, root, d); };
template <class T>
concept native_scatter =
    requires(T& t, const detail::call& c, const std::byte* in, std::byte* out, std::size_t n,
             int root, detail::clock::time_point d) { t.native_scatter(c, in, out, n, root, d); };
template <class T>
concept native_all_to_all =
    requires(T& t, const detail::call& c, const std::byte* in, std::byte* out, std::size_t n,
             detail::clock::time_point d) { t.native_all_to_all(c, in, out, n, d); };
template <class T>
concept native_reduce_scatter =
    requires(T& t, const detail::call& c, const std::byte* in, std::byte* out, std::size_t n,
             detail::clock::time_point d) { t.native_reduce_scatter(c, in, out, n, d); };
template <class T>
concept native_all_to_allv =
    requires(T& t, const detail::call& c, const std::byte* in, std::span<const std::size_t> sc,
             std::byte* out, std::span<const std::size_t> rc,
             detail::clock::time_point d) { t.native_all_to_allv(c, in, sc, out, rc, d); };
template <class T>
concept native_barrier =
    requires(T& t, const detail::call& c, detail::clock::time_point d) { t.native_barrier(c, d); };

}  // namespace tutti::inline v0

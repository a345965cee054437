#pragma once
/// \file
/// tutti::communicator<Transport, Algorithm>: every collective, blocking and async, with
/// argument checks, sequence numbers and cross-rank fingerprint checks.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "tutti/algorithm/automatic.hpp"
#include "tutti/core/device_span.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/ops.hpp"
#include "tutti/core/options.hpp"
#include "tutti/core/reduce.hpp"
#include "tutti/core/types.hpp"
#include "tutti/detail/communicator_base.hpp"
#include "tutti/transport/concepts.hpp"
#include "tutti/work.hpp"

namespace tutti {

/// A group of ranks over `Transport`, running collectives with `Algorithm`.
///
/// Every rank calls the same collectives in the same order with matching arguments (same
/// element type, op, root and count; per-rank counts of the v-variants equal on every rank).
/// A call that does not match raises tutti::error(errc::mismatch) naming both sides on the
/// ranks whose messages meet the disagreement, and peer() is a rank whose call differs from
/// this rank's; a rank whose part of the schedule never meets it completes that call (and
/// possibly a few more) with correct results and raises at a later call, once the abort
/// reaches it: on inproc and shm at the first call it starts after the abort was recorded, and
/// at the latest at a call that waits for a rank that raised (a rank whose calls only send into
/// buffers can return first). No call returns a wrong result. After any error the communicator
/// is broken: every later call raises at once.
template <class Transport, class Algorithm = automatic>
class communicator : private detail::communicator_base<Transport, Algorithm> {
  using base = detail::communicator_base<Transport, Algorithm>;

 public:
  using transport_type = Transport;
  using algorithm_type = Algorithm;

  /// Takes over `t`, this rank's endpoint. Raises tutti::error(errc::invalid_argument) when
  /// `opts.algo` (TUTTI_ALGO) does not parse.
  explicit communicator(Transport t, const options& opts = {}) : base(std::move(t), opts) {}
  /// The communicator of the world this process's launcher started (torchrun, mpirun, srun,
  /// tutti::spawn): rank and size from the environment, rendezvous as the transport defines.
  [[nodiscard]] static communicator from_env(const options& opts = {})
    requires requires { Transport::from_env(opts); }
  {
    return communicator(Transport::from_env(opts), opts);
  }
  /// The communicator of rank `rank` in a world of `size`, meeting through the store an init
  /// URL names: `env://`, `tcp://host:port` (rank 0 serves it), `file:///path`.
  [[nodiscard]] static communicator from_url(std::string_view url, int rank, int size,
                                             const options& opts = {})
    requires requires { Transport::from_url(url, rank, size, opts); }
  {
    return communicator(Transport::from_url(url, rank, size, opts), opts);
  }
  communicator(communicator&&) noexcept = default;
  communicator& operator=(communicator&&) noexcept = default;
  /// Waits for queued async collectives (each is bounded by its deadline); never throws.
  ~communicator() = default;

  [[nodiscard]] int rank() const noexcept { return base::rank(); }
  [[nodiscard]] int size() const noexcept { return base::size(); }
  [[nodiscard]] const options& opts() const noexcept { return base::opts(); }
  [[nodiscard]] Transport& transport() noexcept { return base::transport(); }

  // ---- all_reduce -------------------------------------------------------------------------
  /// Reduces `buf` across ranks in place; every rank gets the result.
  template <element T, class Op>
  void all_reduce(std::span<T> buf, Op op) {
    host_buffers();
    this->template all_reduce_impl<T>(buf, buf, op, false);
  }
  /// Out-of-place: `out` (same size as `in`) receives the result; `in` is unchanged.
  template <element T, class Op>
  void all_reduce(std::span<const T> in, std::span<T> out, Op op) {
    host_buffers();
    this->template all_reduce_impl<T>(in, out, op, false);
  }
  template <element T, class Op>
  [[nodiscard]] work all_reduce_async(std::span<T> buf, Op op) {
    host_buffers();
    return this->template all_reduce_impl<T>(buf, buf, op, true);
  }
  template <element T, class Op>
  [[nodiscard]] work all_reduce_async(std::span<const T> in, std::span<T> out, Op op) {
    host_buffers();
    return this->template all_reduce_impl<T>(in, out, op, true);
  }

  // ---- reduce -----------------------------------------------------------------------------
  /// Reduces to `root`: `out` (size of `in`) receives the result on root and is not touched
  /// elsewhere (it may be empty there).
  template <element T, class Op>
  void reduce(std::span<const T> in, std::span<T> out, Op op, int root) {
    host_buffers();
    this->template reduce_impl<T>(in, out, op, root, false);
  }
  /// In place: root's `buf` receives the result; other ranks' `buf` is not changed.
  template <element T, class Op>
  void reduce(std::span<T> buf, Op op, int root) {
    host_buffers();
    this->template reduce_impl<T>(buf, buf, op, root, false);
  }
  template <element T, class Op>
  [[nodiscard]] work reduce_async(std::span<const T> in, std::span<T> out, Op op, int root) {
    host_buffers();
    return this->template reduce_impl<T>(in, out, op, root, true);
  }

  // ---- broadcast --------------------------------------------------------------------------
  /// Copies root's `buf` into every rank's `buf`.
  template <element T>
  void broadcast(std::span<T> buf, int root) {
    host_buffers();
    this->template broadcast_impl<T>(buf, root, false);
  }
  template <element T>
  [[nodiscard]] work broadcast_async(std::span<T> buf, int root) {
    host_buffers();
    return this->template broadcast_impl<T>(buf, root, true);
  }

  // ---- all_gather -------------------------------------------------------------------------
  /// `out` (size() * in.size()) receives every rank's `in`, in rank order.
  template <element T>
  void all_gather(std::span<const T> in, std::span<T> out) {
    host_buffers();
    this->template all_gather_impl<T>(in, out, false);
  }
  /// In place: `buf` holds size() blocks; this rank's block is its input.
  template <element T>
  void all_gather(std::span<T> buf) {
    host_buffers();
    this->template all_gather_in_place<T>(buf, false);
  }
  template <element T>
  [[nodiscard]] work all_gather_async(std::span<const T> in, std::span<T> out) {
    host_buffers();
    return this->template all_gather_impl<T>(in, out, true);
  }

  // ---- gather / scatter -------------------------------------------------------------------
  /// Root's `out` (size() * in.size()) receives every rank's `in`; `out` may be empty elsewhere.
  template <element T>
  void gather(std::span<const T> in, std::span<T> out, int root) {
    host_buffers();
    this->template gather_impl<T>(in, out, root, false);
  }
  template <element T>
  [[nodiscard]] work gather_async(std::span<const T> in, std::span<T> out, int root) {
    host_buffers();
    return this->template gather_impl<T>(in, out, root, true);
  }
  /// Every rank's `out` receives its block of root's `in` (size() * out.size()); `in` may be
  /// empty off the root.
  template <element T>
  void scatter(std::span<const T> in, std::span<T> out, int root) {
    host_buffers();
    this->template scatter_impl<T>(in, out, root, false);
  }
  template <element T>
  [[nodiscard]] work scatter_async(std::span<const T> in, std::span<T> out, int root) {
    host_buffers();
    return this->template scatter_impl<T>(in, out, root, true);
  }

  // ---- reduce_scatter ---------------------------------------------------------------------
  /// Reduces `in` (size() * out.size()) across ranks; rank r's `out` receives block r.
  template <element T, class Op>
  void reduce_scatter(std::span<const T> in, std::span<T> out, Op op) {
    host_buffers();
    this->template reduce_scatter_impl<T>(in, out, op, false);
  }
  /// In place: `buf` holds size() blocks; block rank() receives this rank's result.
  template <element T, class Op>
  void reduce_scatter(std::span<T> buf, Op op) {
    host_buffers();
    if (buf.size() % static_cast<std::size_t>(size()) != 0)
      this->bad_size("reduce_scatter", buf.size());
    const std::size_t n = buf.size() / static_cast<std::size_t>(size());
    this->template reduce_scatter_impl<T>(buf, buf.subspan(static_cast<std::size_t>(rank()) * n, n),
                                          op, false);
  }
  template <element T, class Op>
  [[nodiscard]] work reduce_scatter_async(std::span<const T> in, std::span<T> out, Op op) {
    host_buffers();
    return this->template reduce_scatter_impl<T>(in, out, op, true);
  }

  // ---- all_to_all -------------------------------------------------------------------------
  /// Block j of this rank's `in` goes to rank j, arriving as block rank() of its `out`.
  template <element T>
  void all_to_all(std::span<const T> in, std::span<T> out) {
    host_buffers();
    this->template all_to_all_impl<T>(in, out, false);
  }
  template <element T>
  void all_to_all(std::span<T> buf) {
    host_buffers();
    this->template all_to_all_impl<T>(buf, buf, false);
  }
  template <element T>
  [[nodiscard]] work all_to_all_async(std::span<const T> in, std::span<T> out) {
    host_buffers();
    return this->template all_to_all_impl<T>(in, out, true);
  }

  // ---- v-variants: per-rank counts, blocks laid out back to back in rank order ------------
  /// `counts[r]` elements from rank r; every rank passes the same `counts`.
  template <element T>
  void all_gatherv(std::span<const T> in, std::span<T> out, std::span<const std::size_t> counts) {
    host_buffers();
    this->template vector_impl<detail::collective::all_gatherv, T>(in, out, counts, -1, false);
  }
  template <element T>
  void gatherv(std::span<const T> in, std::span<T> out, std::span<const std::size_t> counts,
               int root) {
    host_buffers();
    this->template vector_impl<detail::collective::gatherv, T>(in, out, counts, root, false);
  }
  template <element T>
  void scatterv(std::span<const T> in, std::span<T> out, std::span<const std::size_t> counts,
                int root) {
    host_buffers();
    this->template vector_impl<detail::collective::scatterv, T>(in, out, counts, root, false);
  }
  /// `send_counts[j]` elements go to rank j; `recv_counts[j]` arrive from rank j. Rank i's
  /// send_counts[j] must equal rank j's recv_counts[i].
  template <element T>
  void all_to_allv(std::span<const T> in, std::span<const std::size_t> send_counts,
                   std::span<T> out, std::span<const std::size_t> recv_counts) {
    host_buffers();
    this->template all_to_allv_impl<T>(in, send_counts, out, recv_counts, false);
  }
  template <element T>
  [[nodiscard]] work all_to_allv_async(std::span<const T> in,
                                       std::span<const std::size_t> send_counts, std::span<T> out,
                                       std::span<const std::size_t> recv_counts) {
    host_buffers();
    return this->template all_to_allv_impl<T>(in, send_counts, out, recv_counts, true);
  }

  // ---- barrier, send, recv ----------------------------------------------------------------
  /// Returns once every rank has entered the barrier.
  void barrier() { this->barrier_impl(false); }
  [[nodiscard]] work barrier_async() { return this->barrier_impl(true); }

  /// Sends `data` to rank `dst`; matched with the `recv` of the same tag on `dst`, in order.
  template <element T>
  void send(std::span<const T> data, int dst, std::uint64_t tag = 0) {
    host_buffers();
    this->p2p_impl(detail::collective::send, std::as_bytes(data), {}, dst, tag, dtype_of<T>);
  }
  template <element T>
  void recv(std::span<T> data, int src, std::uint64_t tag = 0) {
    host_buffers();
    this->p2p_impl(detail::collective::recv, {}, std::as_writable_bytes(data), src, tag,
                   dtype_of<T>);
  }
  // ---- device memory (tutti::nccl) --------------------------------------------------------
  // The same collectives on GPU memory, ordered on `stream` (default: the transport's own).
  // A blocking call returns once its work on the stream has finished; an async one at once,
  // with a work handle that completes through a CUDA event.

  template <element T, class Op>
  void all_reduce(device_span<T> buf, Op op, stream_ref stream = {}) {
    device_buffers();
    this->template all_reduce_impl<T>(host_view(buf), host_view(buf), op, false, stream.handle);
  }
  template <element T, class Op>
  void all_reduce(device_span<const T> in, device_span<T> out, Op op, stream_ref stream = {}) {
    device_buffers();
    this->template all_reduce_impl<T>(host_view(in), host_view(out), op, false, stream.handle);
  }
  template <element T, class Op>
  [[nodiscard]] work all_reduce_async(device_span<T> buf, Op op, stream_ref stream = {}) {
    device_buffers();
    return this->template all_reduce_impl<T>(host_view(buf), host_view(buf), op, true,
                                             stream.handle);
  }
  template <element T, class Op>
  [[nodiscard]] work all_reduce_async(device_span<const T> in, device_span<T> out, Op op,
                                      stream_ref stream = {}) {
    device_buffers();
    return this->template all_reduce_impl<T>(host_view(in), host_view(out), op, true,
                                             stream.handle);
  }
  template <element T, class Op>
  void reduce(device_span<const T> in, device_span<T> out, Op op, int root,
              stream_ref stream = {}) {
    device_buffers();
    this->template reduce_impl<T>(host_view(in), host_view(out), op, root, false, stream.handle);
  }
  template <element T, class Op>
  void reduce(device_span<T> buf, Op op, int root, stream_ref stream = {}) {
    device_buffers();
    this->template reduce_impl<T>(host_view(buf), host_view(buf), op, root, false, stream.handle);
  }
  template <element T, class Op>
  [[nodiscard]] work reduce_async(device_span<const T> in, device_span<T> out, Op op, int root,
                                  stream_ref stream = {}) {
    device_buffers();
    return this->template reduce_impl<T>(host_view(in), host_view(out), op, root, true,
                                         stream.handle);
  }
  template <element T>
  void broadcast(device_span<T> buf, int root, stream_ref stream = {}) {
    device_buffers();
    this->template broadcast_impl<T>(host_view(buf), root, false, stream.handle);
  }
  template <element T>
  [[nodiscard]] work broadcast_async(device_span<T> buf, int root, stream_ref stream = {}) {
    device_buffers();
    return this->template broadcast_impl<T>(host_view(buf), root, true, stream.handle);
  }
  template <element T>
  void all_gather(device_span<const T> in, device_span<T> out, stream_ref stream = {}) {
    device_buffers();
    this->template all_gather_impl<T>(host_view(in), host_view(out), false, stream.handle);
  }
  template <element T>
  void all_gather(device_span<T> buf, stream_ref stream = {}) {
    device_buffers();
    this->template all_gather_in_place<T>(host_view(buf), false, stream.handle);
  }
  template <element T>
  [[nodiscard]] work all_gather_async(device_span<const T> in, device_span<T> out,
                                      stream_ref stream = {}) {
    device_buffers();
    return this->template all_gather_impl<T>(host_view(in), host_view(out), true, stream.handle);
  }
  template <element T>
  void gather(device_span<const T> in, device_span<T> out, int root, stream_ref stream = {}) {
    device_buffers();
    this->template gather_impl<T>(host_view(in), host_view(out), root, false, stream.handle);
  }
  template <element T>
  [[nodiscard]] work gather_async(device_span<const T> in, device_span<T> out, int root,
                                  stream_ref stream = {}) {
    device_buffers();
    return this->template gather_impl<T>(host_view(in), host_view(out), root, true, stream.handle);
  }
  template <element T>
  void scatter(device_span<const T> in, device_span<T> out, int root, stream_ref stream = {}) {
    device_buffers();
    this->template scatter_impl<T>(host_view(in), host_view(out), root, false, stream.handle);
  }
  template <element T>
  [[nodiscard]] work scatter_async(device_span<const T> in, device_span<T> out, int root,
                                   stream_ref stream = {}) {
    device_buffers();
    return this->template scatter_impl<T>(host_view(in), host_view(out), root, true, stream.handle);
  }
  template <element T, class Op>
  void reduce_scatter(device_span<const T> in, device_span<T> out, Op op, stream_ref stream = {}) {
    device_buffers();
    this->template reduce_scatter_impl<T>(host_view(in), host_view(out), op, false, stream.handle);
  }
  template <element T, class Op>
  [[nodiscard]] work reduce_scatter_async(device_span<const T> in, device_span<T> out, Op op,
                                          stream_ref stream = {}) {
    device_buffers();
    return this->template reduce_scatter_impl<T>(host_view(in), host_view(out), op, true,
                                                 stream.handle);
  }
  template <element T>
  void all_to_all(device_span<const T> in, device_span<T> out, stream_ref stream = {}) {
    device_buffers();
    this->template all_to_all_impl<T>(host_view(in), host_view(out), false, stream.handle);
  }
  template <element T>
  [[nodiscard]] work all_to_all_async(device_span<const T> in, device_span<T> out,
                                      stream_ref stream = {}) {
    device_buffers();
    return this->template all_to_all_impl<T>(host_view(in), host_view(out), true, stream.handle);
  }
  template <element T>
  void all_gatherv(device_span<const T> in, device_span<T> out, std::span<const std::size_t> counts,
                   stream_ref stream = {}) {
    device_buffers();
    this->template vector_impl<detail::collective::all_gatherv, T>(
        host_view(in), host_view(out), counts, -1, false, stream.handle);
  }
  template <element T>
  void gatherv(device_span<const T> in, device_span<T> out, std::span<const std::size_t> counts,
               int root, stream_ref stream = {}) {
    device_buffers();
    this->template vector_impl<detail::collective::gatherv, T>(host_view(in), host_view(out),
                                                               counts, root, false, stream.handle);
  }
  template <element T>
  void scatterv(device_span<const T> in, device_span<T> out, std::span<const std::size_t> counts,
                int root, stream_ref stream = {}) {
    device_buffers();
    this->template vector_impl<detail::collective::scatterv, T>(host_view(in), host_view(out),
                                                                counts, root, false, stream.handle);
  }
  template <element T>
  void all_to_allv(device_span<const T> in, std::span<const std::size_t> send_counts,
                   device_span<T> out, std::span<const std::size_t> recv_counts,
                   stream_ref stream = {}) {
    device_buffers();
    this->template all_to_allv_impl<T>(host_view(in), send_counts, host_view(out), recv_counts,
                                       false, stream.handle);
  }
  template <element T>
  [[nodiscard]] work all_to_allv_async(device_span<const T> in,
                                       std::span<const std::size_t> send_counts, device_span<T> out,
                                       std::span<const std::size_t> recv_counts,
                                       stream_ref stream = {}) {
    device_buffers();
    return this->template all_to_allv_impl<T>(host_view(in), send_counts, host_view(out),
                                              recv_counts, true, stream.handle);
  }
  /// Returns once every rank has entered the barrier and the work before it on `stream` is done.
  void barrier(stream_ref stream) {
    device_buffers();
    this->barrier_impl(false, stream.handle);
  }
  template <element T>
  void send(device_span<const T> data, int dst, std::uint64_t tag = 0, stream_ref stream = {}) {
    device_buffers();
    this->p2p_impl(detail::collective::send, std::as_bytes(host_view(data)), {}, dst, tag,
                   dtype_of<T>, stream.handle);
  }
  template <element T>
  void recv(device_span<T> data, int src, std::uint64_t tag = 0, stream_ref stream = {}) {
    device_buffers();
    this->p2p_impl(detail::collective::recv, {}, std::as_writable_bytes(host_view(data)), src, tag,
                   dtype_of<T>, stream.handle);
  }

 private:
  static constexpr bool on_device =
      std::is_same_v<typename Transport::memory_space, cuda_device_memory>;
  /// Host spans on a device transport: a compile error that says what to pass instead.
  static constexpr void host_buffers() noexcept {
    static_assert(!on_device,
                  "tutti: this communicator's transport (tutti::nccl) works on GPU memory: pass "
                  "tutti::device_span<T>(device_pointer, count), not std::span (host memory)");
  }
  static constexpr void device_buffers() noexcept {
    static_assert(on_device,
                  "tutti: tutti::device_span is GPU memory; this communicator's transport works on "
                  "host memory: pass std::span");
  }
  /// The same pointer and count as a std::span, for the byte-level machinery (which never
  /// dereferences device memory on the host).
  template <class T>
  static std::span<T> host_view(device_span<T> d) noexcept {
    return {d.data(), d.size()};
  }
};

}  // namespace tutti

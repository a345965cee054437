#pragma once
/// \file
/// tutti::communicator<Transport, Algorithm>: every collective, blocking and async, in place and
/// out of place, on host memory (std::span) and GPU memory (tutti::device_span), with argument
/// checks, sequence numbers and cross-rank fingerprint checks.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "tutti/algorithm/automatic.hpp"
#include "tutti/core/device_span.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/ops.hpp"
#include "tutti/core/options.hpp"
#include "tutti/core/types.hpp"
#include "tutti/detail/communicator_base.hpp"
#include "tutti/detail/communicator_batch.hpp"
#include "tutti/detail/communicator_buffers.hpp"
#include "tutti/detail/communicator_split.hpp"
#include "tutti/detail/objects.hpp"
#include "tutti/transport/concepts.hpp"
#include "tutti/work.hpp"

namespace tutti::inline v0 {

/// split's color for a rank that takes part in the call but joins no sub-communicator (any
/// negative color does; MPI_UNDEFINED, NCCL_SPLIT_NOCOLOR).
inline constexpr int no_color = -1;

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
  /// Where the buffers live: host_memory, or cuda_device_memory (tutti::nccl).
  using memory_space = typename Transport::memory_space;
  /// The buffer type of this memory space: std::span<T>, or tutti::device_span<T>.
  template <class T>
  using span_type = detail::span_in<memory_space, T>;
  /// The stream argument: tutti::stream_ref (a cudaStream_t) on device memory; on host memory
  /// only `{}` (a stream there is a compile error that says why, not silently ignored).
  using stream_type = detail::stream_in<memory_space>;

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

  // ---- sub-communicators --------------------------------------------------------------------
  /// Splits this communicator as MPI_Comm_split does: the ranks that pass the same `color`
  /// form a communicator, ranked by `key`, ties by rank here; a rank whose color is negative
  /// (tutti::no_color) takes part and gets none. Collective: every rank calls it, in the same
  /// order among this communicator's calls. It needs nothing but this communicator (over gloo,
  /// the child meets through this world's store; over shm, the child's segment name travels
  /// through this communicator; over nccl, ncclCommSplit). The child is a full communicator
  /// with its own sequence numbers, checks and deadline (`child_opts`), running `A` (by
  /// default this communicator's policy); it lives on its own (destroy either in any order).
  /// A rank that dies is named by every communicator that contains it; an error inside a child
  /// breaks that child only (see docs/groups.md).
  template <class A = Algorithm>
  [[nodiscard]] std::optional<communicator<Transport, A>> split(int color, int key,
                                                                const options& child_opts)
    requires splittable<Transport>
  {
    return detail::split_child<communicator<Transport, A>>(*this, {color < 0 ? -1 : color, key, 0},
                                                           {}, child_opts, splits_);
  }
  template <class A = Algorithm>
  [[nodiscard]] std::optional<communicator<Transport, A>> split(int color, int key = 0)
    requires splittable<Transport>
  {
    return split<A>(color, key, opts());
  }
  /// The communicator of the ranks `ranks` (each in [0, size()), none twice), ranked in that
  /// order; empty on the ranks not listed. Collective: every rank passes the same list (a
  /// rank that passes another raises errc::mismatch, as do all the others).
  template <class A = Algorithm>
  [[nodiscard]] std::optional<communicator<Transport, A>> group(std::span<const int> ranks,
                                                                const options& child_opts)
    requires splittable<Transport>
  {
    return detail::split_child<communicator<Transport, A>>(
        *this, detail::group_request(ranks, rank()), ranks, child_opts, splits_);
  }
  template <class A = Algorithm>
  [[nodiscard]] std::optional<communicator<Transport, A>> group(std::span<const int> ranks)
    requires splittable<Transport>
  {
    return group<A>(ranks, opts());
  }

  // Every collective below is written once for both memory spaces: `In`, `Out` and `Buf` are
  // std::span<T> on a host-memory transport and device_span<T> on a device one (span_type<T>);
  // a buffer of the other space is a compile error that says what to pass. The element type T
  // is the buffers' (an input may be const or not). `stream` (device transports: a
  // cudaStream_t, default the transport's own) orders the call on the GPU; a host-memory
  // communicator takes only `{}` there. Each `_async` form returns a work handle at once; its
  // buffers must stay alive and untouched until the handle is done (see tutti::work).

  // ---- all_reduce -------------------------------------------------------------------------
  /// Reduces `buf` across ranks in place; every rank gets the result.
  template <detail::writable_buffer Buf, class Op>
  void all_reduce(Buf buf, Op op, stream_type stream = {}) {
    this->all_reduce_impl(view(buf), view(buf), op, false, handle(stream));
  }
  template <detail::writable_buffer Buf, class Op>
  [[nodiscard]] work all_reduce_async(Buf buf, Op op, stream_type stream = {}) {
    return this->all_reduce_impl(view(buf), view(buf), op, true, handle(stream));
  }
  /// Out-of-place: `out` (same size as `in`) receives the result; `in` is unchanged.
  template <detail::buffer In, detail::writable_buffer Out, class Op>
  void all_reduce(In in, Out out, Op op, stream_type stream = {}) {
    this->all_reduce_impl(view(in, out), view(out), op, false, handle(stream));
  }
  template <detail::buffer In, detail::writable_buffer Out, class Op>
  [[nodiscard]] work all_reduce_async(In in, Out out, Op op, stream_type stream = {}) {
    return this->all_reduce_impl(view(in, out), view(out), op, true, handle(stream));
  }

  // ---- reduce -----------------------------------------------------------------------------
  /// Reduces to `root`: `out` (size of `in`) receives the result on root and is not touched
  /// elsewhere (it may be empty there).
  template <detail::buffer In, detail::writable_buffer Out, class Op>
  void reduce(In in, Out out, Op op, int root, stream_type stream = {}) {
    this->reduce_impl(view(in, out), view(out), op, root, false, handle(stream));
  }
  template <detail::buffer In, detail::writable_buffer Out, class Op>
  [[nodiscard]] work reduce_async(In in, Out out, Op op, int root, stream_type stream = {}) {
    return this->reduce_impl(view(in, out), view(out), op, root, true, handle(stream));
  }
  /// In place: root's `buf` receives the result; other ranks' `buf` is not changed.
  template <detail::writable_buffer Buf, class Op>
  void reduce(Buf buf, Op op, int root, stream_type stream = {}) {
    this->reduce_impl(view(buf), view(buf), op, root, false, handle(stream));
  }
  template <detail::writable_buffer Buf, class Op>
  [[nodiscard]] work reduce_async(Buf buf, Op op, int root, stream_type stream = {}) {
    return this->reduce_impl(view(buf), view(buf), op, root, true, handle(stream));
  }

  // ---- broadcast --------------------------------------------------------------------------
  /// Copies root's `buf` into every rank's `buf`.
  template <detail::writable_buffer Buf>
  void broadcast(Buf buf, int root, stream_type stream = {}) {
    this->broadcast_impl(view(buf), root, false, handle(stream));
  }
  template <detail::writable_buffer Buf>
  [[nodiscard]] work broadcast_async(Buf buf, int root, stream_type stream = {}) {
    return this->broadcast_impl(view(buf), root, true, handle(stream));
  }

  // ---- all_gather -------------------------------------------------------------------------
  /// `out` (size() * in.size()) receives every rank's `in`, in rank order.
  template <detail::buffer In, detail::writable_buffer Out>
  void all_gather(In in, Out out, stream_type stream = {}) {
    this->all_gather_impl(view(in, out), view(out), false, handle(stream));
  }
  template <detail::buffer In, detail::writable_buffer Out>
  [[nodiscard]] work all_gather_async(In in, Out out, stream_type stream = {}) {
    return this->all_gather_impl(view(in, out), view(out), true, handle(stream));
  }
  /// In place: `buf` holds size() blocks; this rank's block is its input.
  template <detail::writable_buffer Buf>
  void all_gather(Buf buf, stream_type stream = {}) {
    this->all_gather_in_place(view(buf), false, handle(stream));
  }
  template <detail::writable_buffer Buf>
  [[nodiscard]] work all_gather_async(Buf buf, stream_type stream = {}) {
    return this->all_gather_in_place(view(buf), true, handle(stream));
  }

  // ---- gather / scatter -------------------------------------------------------------------
  /// Root's `out` (size() * in.size()) receives every rank's `in`; `out` may be empty elsewhere.
  template <detail::buffer In, detail::writable_buffer Out>
  void gather(In in, Out out, int root, stream_type stream = {}) {
    this->gather_impl(view(in, out), view(out), root, false, handle(stream));
  }
  template <detail::buffer In, detail::writable_buffer Out>
  [[nodiscard]] work gather_async(In in, Out out, int root, stream_type stream = {}) {
    return this->gather_impl(view(in, out), view(out), root, true, handle(stream));
  }
  /// Every rank's `out` receives its block of root's `in` (size() * out.size()); `in` may be
  /// empty off the root.
  template <detail::buffer In, detail::writable_buffer Out>
  void scatter(In in, Out out, int root, stream_type stream = {}) {
    this->scatter_impl(view(in, out), view(out), root, false, handle(stream));
  }
  template <detail::buffer In, detail::writable_buffer Out>
  [[nodiscard]] work scatter_async(In in, Out out, int root, stream_type stream = {}) {
    return this->scatter_impl(view(in, out), view(out), root, true, handle(stream));
  }

  // ---- reduce_scatter ---------------------------------------------------------------------
  /// Reduces `in` (size() * out.size()) across ranks; rank r's `out` receives block r.
  template <detail::buffer In, detail::writable_buffer Out, class Op>
  void reduce_scatter(In in, Out out, Op op, stream_type stream = {}) {
    this->reduce_scatter_impl(view(in, out), view(out), op, false, handle(stream));
  }
  template <detail::buffer In, detail::writable_buffer Out, class Op>
  [[nodiscard]] work reduce_scatter_async(In in, Out out, Op op, stream_type stream = {}) {
    return this->reduce_scatter_impl(view(in, out), view(out), op, true, handle(stream));
  }
  /// In place: `buf` holds size() blocks; block rank() receives this rank's result (the
  /// other blocks are left unspecified).
  template <detail::writable_buffer Buf, class Op>
  void reduce_scatter(Buf buf, Op op, stream_type stream = {}) {
    this->reduce_scatter_in_place(view(buf), op, false, handle(stream));
  }
  template <detail::writable_buffer Buf, class Op>
  [[nodiscard]] work reduce_scatter_async(Buf buf, Op op, stream_type stream = {}) {
    return this->reduce_scatter_in_place(view(buf), op, true, handle(stream));
  }

  // ---- all_to_all -------------------------------------------------------------------------
  /// Block j of this rank's `in` goes to rank j, arriving as block rank() of its `out`.
  template <detail::buffer In, detail::writable_buffer Out>
  void all_to_all(In in, Out out, stream_type stream = {}) {
    this->all_to_all_impl(view(in, out), view(out), false, handle(stream));
  }
  template <detail::buffer In, detail::writable_buffer Out>
  [[nodiscard]] work all_to_all_async(In in, Out out, stream_type stream = {}) {
    return this->all_to_all_impl(view(in, out), view(out), true, handle(stream));
  }
  /// In place: `buf` holds size() blocks, sent and then overwritten by the blocks received
  /// (policies and backends without an in-place form work from a staging copy).
  template <detail::writable_buffer Buf>
  void all_to_all(Buf buf, stream_type stream = {}) {
    this->all_to_all_impl(view(buf), view(buf), false, handle(stream));
  }
  template <detail::writable_buffer Buf>
  [[nodiscard]] work all_to_all_async(Buf buf, stream_type stream = {}) {
    return this->all_to_all_impl(view(buf), view(buf), true, handle(stream));
  }

  // ---- v-variants: per-rank counts, blocks laid out back to back in rank order ------------
  // The counts are copied before the call returns; only the buffers must outlive a work.

  /// `counts[r]` elements from rank r; every rank passes the same `counts`.
  template <detail::buffer In, detail::writable_buffer Out>
  void all_gatherv(In in, Out out, std::span<const std::size_t> counts, stream_type stream = {}) {
    this->template vector_impl<all_gatherv_k>(view(in, out), view(out), counts, -1, false,
                                              handle(stream));
  }
  template <detail::buffer In, detail::writable_buffer Out>
  [[nodiscard]] work all_gatherv_async(In in, Out out, std::span<const std::size_t> counts,
                                       stream_type stream = {}) {
    return this->template vector_impl<all_gatherv_k>(view(in, out), view(out), counts, -1, true,
                                                     handle(stream));
  }
  /// Root's `out` receives `counts[r]` elements from each rank r; `out` may be empty elsewhere.
  template <detail::buffer In, detail::writable_buffer Out>
  void gatherv(In in, Out out, std::span<const std::size_t> counts, int root,
               stream_type stream = {}) {
    this->template vector_impl<gatherv_k>(view(in, out), view(out), counts, root, false,
                                          handle(stream));
  }
  template <detail::buffer In, detail::writable_buffer Out>
  [[nodiscard]] work gatherv_async(In in, Out out, std::span<const std::size_t> counts, int root,
                                   stream_type stream = {}) {
    return this->template vector_impl<gatherv_k>(view(in, out), view(out), counts, root, true,
                                                 handle(stream));
  }
  /// Rank r's `out` receives `counts[r]` elements of root's `in`; `in` may be empty elsewhere.
  template <detail::buffer In, detail::writable_buffer Out>
  void scatterv(In in, Out out, std::span<const std::size_t> counts, int root,
                stream_type stream = {}) {
    this->template vector_impl<scatterv_k>(view(in, out), view(out), counts, root, false,
                                           handle(stream));
  }
  template <detail::buffer In, detail::writable_buffer Out>
  [[nodiscard]] work scatterv_async(In in, Out out, std::span<const std::size_t> counts, int root,
                                    stream_type stream = {}) {
    return this->template vector_impl<scatterv_k>(view(in, out), view(out), counts, root, true,
                                                  handle(stream));
  }
  /// `send_counts[j]` elements go to rank j; `recv_counts[j]` arrive from rank j. Rank i's
  /// send_counts[j] must equal rank j's recv_counts[i].
  template <detail::buffer In, detail::writable_buffer Out>
  void all_to_allv(In in, std::span<const std::size_t> send_counts, Out out,
                   std::span<const std::size_t> recv_counts, stream_type stream = {}) {
    this->all_to_allv_impl(view(in, out), send_counts, view(out), recv_counts, false,
                           handle(stream));
  }
  template <detail::buffer In, detail::writable_buffer Out>
  [[nodiscard]] work all_to_allv_async(In in, std::span<const std::size_t> send_counts, Out out,
                                       std::span<const std::size_t> recv_counts,
                                       stream_type stream = {}) {
    return this->all_to_allv_impl(view(in, out), send_counts, view(out), recv_counts, true,
                                  handle(stream));
  }

  // ---- barrier, send, recv ----------------------------------------------------------------
  /// Returns once every rank has entered the barrier (device: and the work before it on
  /// `stream` is done).
  void barrier(stream_type stream = {}) { this->barrier_impl(false, handle(stream)); }
  [[nodiscard]] work barrier_async(stream_type stream = {}) {
    return this->barrier_impl(true, handle(stream));
  }

  /// Sends `data` to rank `dst`; matched with the `recv` (or `irecv`) of the same tag on `dst`,
  /// in posting order. Blocks until `data` may be reused; takes no sequence number.
  template <detail::buffer Buf>
  void send(Buf data, int dst, std::uint64_t tag = 0, stream_type stream = {}) {
    this->p2p_impl(detail::outgoing<memory_space>(data, dst, tag), handle(stream));
  }
  template <detail::writable_buffer Buf>
  void recv(Buf data, int src, std::uint64_t tag = 0, stream_type stream = {}) {
    this->p2p_impl(detail::incoming<memory_space>(data, src, tag), handle(stream));
  }

  // ---- payloads whose size only the sender knows (host memory) -----------------------------
  // Each runs two of this communicator's collectives (the sizes, then the bytes) and counts as
  // them: every rank makes the call, in the same order as its other collectives. `C` is a
  // std::string or a std::vector<T> of a trivially copyable T, the same on every rank (a rank
  // whose type differs raises errc::mismatch naming the sender).

  /// Ranks other than `root` get root's `data` (resized to it); root's is unchanged.
  template <byte_container C>
  void broadcast_object(C& data, int root)
    requires std::is_same_v<memory_space, host_memory>
  {
    detail::broadcast_object(*this, data, root);
  }
  /// Every rank's `mine`, indexed by rank.
  template <byte_container C>
  [[nodiscard]] std::vector<C> all_gather_object(const C& mine)
    requires std::is_same_v<memory_space, host_memory>
  {
    return detail::all_gather_object(*this, mine);
  }
  /// On `root`, every rank's `mine` indexed by rank; elsewhere an empty vector.
  template <byte_container C>
  [[nodiscard]] std::vector<C> gather_object(const C& mine, int root)
    requires std::is_same_v<memory_space, host_memory>
  {
    return detail::gather_object(*this, mine, root);
  }

  /// Posts a send of `data` to `dst` and returns at once (MPI_Isend, torch's isend). Messages
  /// between a pair match per tag in posting order, whatever mix of send, isend and batch
  /// posted them; a size or element type the two ends disagree on raises (or, over gloo,
  /// times out). Posting never waits for the peer, so ranks may post in any order; it does
  /// wait for this communicator's queued async collectives first. `data` must stay untouched
  /// until the work is done. Host memory: the bytes move while this rank waits for the work
  /// (or for any later call) or polls done(), on the thread that makes the communicator's
  /// calls. tutti::nccl issues the message on the stream at once, as NCCL does: two ranks that
  /// each isend before they irecv must put both in one batch() there.
  template <detail::buffer Buf>
  [[nodiscard]] work isend(Buf data, int dst, std::uint64_t tag = 0, stream_type stream = {}) {
    const detail::p2p_msg m = detail::outgoing<memory_space>(data, dst, tag);
    return this->p2p_async(std::span<const detail::p2p_msg>(&m, 1), handle(stream));
  }
  /// Posts a receive into `data` from `src` and returns at once (MPI_Irecv, torch's irecv).
  template <detail::writable_buffer Buf>
  [[nodiscard]] work irecv(Buf data, int src, std::uint64_t tag = 0, stream_type stream = {}) {
    const detail::p2p_msg m = detail::incoming<memory_space>(data, src, tag);
    return this->p2p_async(std::span<const detail::p2p_msg>(&m, 1), handle(stream));
  }

  /// A batch of sends and receives that are posted together and complete together (torch's
  /// batch_isend_irecv, ncclGroupStart/End): `comm.batch().send(a, 1).recv(b, 1).start()`
  /// returns one work; `run()` also waits for it. No order of messages in the ranks' batches
  /// can deadlock, on any transport. This communicator must outlive the builder.
  using batch_builder = detail::batch_builder<communicator>;
  [[nodiscard]] batch_builder batch(stream_type stream = {}) {
    return batch_builder(*this, handle(stream));
  }

 private:
  friend batch_builder;

  std::uint64_t splits_ = 0;  // splits so far: each child's id, the same on every rank

  /// `b` as the std::span the machinery works on; a compile error with a sentence when it is
  /// not in this transport's memory space.
  template <class B>
  static auto view(B b) noexcept {
    return detail::view<memory_space>(b);
  }
  /// An input beside output `Out`: the same checks, and the same element type as the output.
  template <class In, class Out>
  static auto view(In in, Out) noexcept {
    detail::check_same_elements<In, Out>();
    return detail::view<memory_space>(in);
  }
  static void* handle(stream_type s) noexcept { return detail::stream_handle(s); }
  static constexpr auto all_gatherv_k = detail::collective::all_gatherv;
  static constexpr auto gatherv_k = detail::collective::gatherv;
  static constexpr auto scatterv_k = detail::collective::scatterv;
};

}  // namespace tutti::inline v0

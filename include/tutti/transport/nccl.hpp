#pragma once
/// \file
/// tutti::nccl: one GPU per process, through NVIDIA's NCCL. Collectives take
/// tutti::device_span (GPU memory) and an optional cudaStream_t; they are ordered on that stream
/// like NCCL's own calls. A blocking call returns once its work on the stream has finished; an
/// async call returns at once with a tutti::work that completes through a CUDA event.
/// tutti::native (and tutti::automatic, which picks it) runs NCCL's collectives; tutti's own
/// policies (ring, tree, recursive_halving) run over grouped ncclSend/ncclRecv and reduce with
/// device kernels from tutti/transport/nccl.cuh, which one .cu file of the program must include.
/// Needs the tutti::nccl CMake component (option TUTTI_WITH_NCCL; NCCL and the CUDA runtime).
///
/// Failure handling: the communicator is non-blocking (ncclConfig_t::blocking = 0), so
/// initialisation and every call return at once; every wait polls ncclCommGetAsyncError and the
/// CUDA event against the call's deadline (options::timeout, TUTTI_TIMEOUT). A failed or hung
/// call aborts the NCCL communicator (ncclCommAbort) and raises tutti::error naming the
/// collective and its sequence number; every later call raises at once.
///
/// What NCCL cannot check: a call whose arguments differ between ranks (count, type, op, root)
/// hangs until the deadline or, where the transfers happen to line up, corrupts data (NCCL's own
/// behaviour, nccl#1417). With TUTTI_NCCL_CHECK=1 every collective first all-gathers its
/// fingerprint and raises errc::mismatch naming both sides (one small NCCL call and a host
/// synchronisation per collective: for debugging, off by default).

#if !__has_include(<nccl.h>) || !__has_include(<cuda_runtime.h>)
#error \
    "tutti/transport/nccl.hpp needs NCCL and the CUDA runtime: link the tutti::nccl CMake component (configure tutti with -DTUTTI_WITH_NCCL=ON)"
#else

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "tutti/bootstrap/env.hpp"
#include "tutti/bootstrap/rendezvous.hpp"
#include "tutti/bootstrap/store.hpp"
#include "tutti/core/device_span.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/options.hpp"
#include "tutti/detail/call.hpp"
#include "tutti/detail/nccl/buckets.hpp"
#include "tutti/detail/nccl/device.hpp"
#include "tutti/detail/nccl/init.hpp"
#include "tutti/detail/nccl/native.hpp"
#include "tutti/detail/nccl/p2p.hpp"
#include "tutti/detail/nccl/state.hpp"
#include "tutti/detail/nccl/types.hpp"
#include "tutti/detail/split.hpp"
#include "tutti/detail/wait.hpp"
#include "tutti/transport/concepts.hpp"

namespace tutti::inline v0 {

/// The NCCL transport: this process's rank on one GPU. Normally built by
/// communicator<nccl, ...>::from_env() or from_url(). Its machinery lives in detail/nccl/:
/// state.hpp (the communicator, its waits and typed errors), types.hpp (type and op mapping),
/// init.hpp (creating the communicator), p2p.hpp (grouped messages, the call check),
/// native.hpp (NCCL's collectives), device.hpp (device memory for tutti's own policies).
class nccl {
 public:
  using memory_space = cuda_device_memory;
  /// A posted point-to-point message (tutti's own policies and send/recv).
  struct request {
    std::uint64_t id = 0;  ///< 0: nothing to wait for
  };
  /// NCCL runs avg itself (ncclAvg): tutti::native must not divide again.
  static constexpr bool native_avg = true;

  // ---- joining a world ------------------------------------------------------------------

  /// This rank's endpoint, from the launcher's environment (torchrun, Open MPI, MPICH, Slurm,
  /// tutti::spawn): GPU LOCAL_RANK modulo the number of visible GPUs; rank 0's ncclUniqueId
  /// reaches the others through the store at MASTER_ADDR:MASTER_PORT (rank 0 serves it), or,
  /// when every rank is on this host and no such store is set, through a file private to this
  /// user (bootstrap/rendezvous.hpp).
  [[nodiscard]] static nccl from_env(const options& opts = {}) {
    const bootstrap::rendezvous r = bootstrap::rendezvous_from_env(
        bootstrap::world_from_env(), "nccl", opts,
        "tutti::nccl across hosts needs a store: set MASTER_ADDR and MASTER_PORT (rank 0 serves "
        "it), or use communicator<nccl>::from_url with tcp://");
    nccl t = connect(r.st, r.key, r.rank, r.size, r.local_rank, opts);
    r.remove_file();  // every rank has read the id by now
    return t;
  }

  /// This rank's endpoint, meeting the others through the store an init URL names
  /// (`tcp://host:port`, `file:///path`, `env://`); GPU = the launcher's local rank (LOCAL_RANK,
  /// OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID ...; 0 without a launcher) modulo the number of
  /// visible GPUs.
  [[nodiscard]] static nccl from_url(std::string_view url, int rank, int size,
                                     const options& opts = {}) {
    const bootstrap::rendezvous r = bootstrap::rendezvous_from_url(url, rank, size, "nccl", opts);
    return connect(r.st, r.key, r.rank, r.size, r.local_rank, opts);
  }

  /// Joins the world of `size` ranks: rank 0 creates the ncclUniqueId and publishes it in `st`
  /// under `key`; every rank takes GPU `local_rank` modulo the visible GPUs and creates its
  /// non-blocking NCCL communicator, bounded by opts.timeout.
  [[nodiscard]] static nccl connect(const std::shared_ptr<bootstrap::store>& st,
                                    const std::string& key, int rank, int size, int local_rank,
                                    const options& opts = {}) {
    return nccl(detail::nccl_init(*st, key, rank, size, local_rank, opts));
  }

  /// This rank's communicator in the child `p` plans (communicator::split): ncclCommSplit on
  /// this one, which every parent rank calls (NCCL orders a color's ranks by key, then parent
  /// rank, as the plan does), on the same GPU; empty for a rank that joins no child.
  [[nodiscard]] std::optional<nccl> split(const detail::split_plan& p,
                                          const detail::split_exchange&, const options& opts) {
    auto child = detail::nccl_split(*s_, p, opts);
    if (!child) return std::nullopt;
    return nccl(std::move(child));
  }

  /// The GPUs this host's ranks may use, counted WITHOUT initialising CUDA (a CUDA context
  /// does not survive fork(), so a parent that forks ranks, as tutti::spawn does, must not call
  /// the CUDA runtime): one per entry of /proc/driver/nvidia/gpus, capped by the number of
  /// entries in CUDA_VISIBLE_DEVICES when it is set (empty hides every GPU). 0 without a GPU.
  [[nodiscard]] static int local_gpus() noexcept { return detail::nccl_local_gpus(); }

  // ---- what a communicator asks of every transport ----------------------------------------

  [[nodiscard]] int rank() const noexcept { return s_->rank; }
  [[nodiscard]] int size() const noexcept { return s_->size; }
  /// The CUDA device this rank runs on.
  [[nodiscard]] int device() const noexcept { return s_->device; }
  /// The communicator's own stream (collectives given no stream run on it).
  [[nodiscard]] cudaStream_t stream() const noexcept { return s_->stream; }
  /// The NCCL communicator, for calls tutti does not wrap (benchmarks against raw NCCL).
  [[nodiscard]] ncclComm_t handle() const noexcept { return s_->comm; }

  /// With TUTTI_NCCL_CHECK=1: all-gathers the call's fingerprint and raises errc::mismatch
  /// naming both sides where ranks disagree. Otherwise nothing: see the file comment.
  void publish(const detail::call& c) {
    s_->check_usable(c.name_str(), c.seq);
    if (s_->check_calls && c.compared()) detail::nccl_check_fingerprints(*s_, c);
  }

  /// Posts a message to `peer`; it is issued, grouped with every other posted message, at the
  /// next wait. NCCL matches messages between a pair in posting order: send/recv tags are not
  /// supported (tag 0 only).
  [[nodiscard]] request isend(int peer, std::span<const std::byte> out, const detail::call& c,
                              detail::space sp, std::uint64_t tag) {
    return {detail::nccl_post(*s_, true, peer, const_cast<std::byte*>(out.data()), out.size(), c,
                              sp, tag)};
  }
  [[nodiscard]] request irecv(int peer, std::span<std::byte> in, const detail::call& c,
                              detail::space sp, std::uint64_t tag) {
    return {detail::nccl_post(*s_, false, peer, in.data(), in.size(), c, sp, tag)};
  }

  /// Issues every posted message now, in one NCCL group, without waiting for the GPU
  /// (communicator::isend, irecv and batch: their work waits for an event recorded after).
  void flush(const detail::call& c, detail::clock::time_point deadline) {
    detail::nccl_flush(*s_, c, deadline);
  }

  /// Issues every posted message in one NCCL group. Inside a collective that is all: what
  /// follows on the stream runs after the transfers. A user's send or recv also waits for the
  /// GPU to finish it.
  void wait(request& r, const detail::call& c, detail::clock::time_point deadline) {
    if (r.id == 0) return;
    if (r.id > s_->issued) detail::nccl_flush(*s_, c, deadline);
    r.id = 0;
    if (c.fp.coll == detail::collective::send || c.fp.coll == detail::collective::recv)
      complete(record(c), c, deadline);
  }

  // ---- stream order: what the communicator does around every call -------------------------

  /// Records an event after everything `c` enqueued; complete() waits for it.
  [[nodiscard]] cudaEvent_t record(const detail::call& c) { return s_->record_after(c); }
  /// Waits for `ev` with `c`'s deadline, polling NCCL's asynchronous errors; on an error or
  /// the deadline aborts the communicator and raises.
  void complete(cudaEvent_t ev, const detail::call& c, detail::clock::time_point deadline) {
    const detail::device_guard on(s_->device);  // also on the progress thread
    s_->wait_event(ev, c.name_str(), c.seq, deadline);
  }

  // ---- NCCL's own collectives (tutti::native): detail/nccl/native.hpp ----------------------

  void native_all_reduce(const detail::call& c, const std::byte* in, std::byte* out, std::size_t n,
                         detail::clock::time_point d) {
    detail::nccl_native_all_reduce(*s_, c, in, out, n, d);
  }
  void native_reduce(const detail::call& c, const std::byte* in, std::byte* out, std::size_t n,
                     int root, detail::clock::time_point d) {
    detail::nccl_native_reduce(*s_, c, in, out, n, root, d);
  }
  void native_reduce_scatter(const detail::call& c, const std::byte* in, std::byte* out,
                             std::size_t n, detail::clock::time_point d) {
    detail::nccl_native_reduce_scatter(*s_, c, in, out, n, d);
  }
  void native_broadcast(const detail::call& c, std::byte* buf, std::size_t n, int root,
                        detail::clock::time_point d) {
    detail::nccl_native_broadcast(*s_, c, buf, n, root, d);
  }
  void native_all_gather(const detail::call& c, const std::byte* in, std::byte* out, std::size_t n,
                         detail::clock::time_point d) {
    detail::nccl_native_all_gather(*s_, c, in, out, n, d);
  }
  void native_gather(const detail::call& c, const std::byte* in, std::byte* out, std::size_t n,
                     int root, detail::clock::time_point d) {
    detail::nccl_native_gather(*s_, c, in, out, n, root, d);
  }
  void native_scatter(const detail::call& c, const std::byte* in, std::byte* out, std::size_t n,
                      int root, detail::clock::time_point d) {
    detail::nccl_native_scatter(*s_, c, in, out, n, root, d);
  }
  void native_all_to_all(const detail::call& c, const std::byte* in, std::byte* out, std::size_t n,
                         detail::clock::time_point d) {
    detail::nccl_native_all_to_all(*s_, c, in, out, n, d);
  }
  /// Per-pair counts (elements): one group of ncclSend/ncclRecv.
  void native_all_to_allv(const detail::call& c, const std::byte* in,
                          std::span<const std::size_t> sc, std::byte* out,
                          std::span<const std::size_t> rc, detail::clock::time_point d) {
    detail::nccl_native_all_to_allv(*s_, c, in, sc, out, rc, d);
  }
  /// An all-reduce of one word on the GPU (NCCL has no barrier).
  void native_barrier(const detail::call& c, detail::clock::time_point d) {
    detail::nccl_native_barrier(*s_, c, d);
  }

  // ---- device memory for tutti's own policies: detail/nccl/device.hpp ----------------------

  /// dst = src on the GPU, ordered on the call's stream.
  void device_copy(const detail::call& c, void* dst, const void* src, std::size_t bytes) {
    detail::nccl_device_copy(*s_, c, dst, src, bytes);
  }
  /// d = a op b over `n` elements, with the kernels tutti/transport/nccl.cuh registered.
  void device_reduce(const detail::call& c, void* d, const void* a, const void* b, std::size_t n) {
    detail::nccl_device_reduce(*s_, c, d, a, b, n);
  }
  /// avg's final division on the GPU.
  void device_finish(const detail::call& c, void* x, std::size_t n) {
    detail::nccl_device_finish(*s_, c, x, n);
  }
  /// Device scratch of at least `bytes`, valid for the call (stream-ordered reuse).
  [[nodiscard]] std::byte* device_scratch(const detail::call& c, std::size_t bytes, bool staging) {
    return detail::nccl_device_scratch(*s_, c, bytes, staging);
  }

 private:
  explicit nccl(std::shared_ptr<detail::nccl_state> s) noexcept : s_(std::move(s)) {}

  std::shared_ptr<detail::nccl_state> s_;
};

}  // namespace tutti::inline v0

#endif

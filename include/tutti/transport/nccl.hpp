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
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "tutti/bootstrap/env.hpp"
#include "tutti/bootstrap/file_store.hpp"
#include "tutti/bootstrap/store.hpp"
#include "tutti/bootstrap/url.hpp"
#include "tutti/core/device_span.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/options.hpp"
#include "tutti/detail/call.hpp"
#include "tutti/detail/device_reduce.hpp"
#include "tutti/detail/wait.hpp"
#include "tutti/transport/concepts.hpp"

namespace tutti::inline v0 {

namespace detail {

/// NCCL's type for a reduction over tutti type `t`, or -1 where NCCL has none (16-bit
/// integers, long double). bool and char reduce as bytes (min and max only: see `reducible`).
[[nodiscard]] inline int nccl_type_of(dtype t) noexcept {
  switch (t) {
    case dtype::int8:
      return ncclInt8;
    case dtype::uint8:
    case dtype::boolean:
      return ncclUint8;
    case dtype::character:
      return std::is_signed_v<char> ? ncclInt8 : ncclUint8;
    case dtype::int32:
      return ncclInt32;
    case dtype::uint32:
      return ncclUint32;
    case dtype::int64:
      return ncclInt64;
    case dtype::uint64:
      return ncclUint64;
    case dtype::float16:
      return ncclFloat16;
    case dtype::bfloat16:
      return ncclBfloat16;
    case dtype::float32:
      return ncclFloat32;
    case dtype::float64:
      return ncclFloat64;
    default:
      return -1;
  }
}

/// NCCL's op for tutti op `o`, or -1 for the bitwise ops (NCCL has none).
[[nodiscard]] inline int nccl_op_of(op_kind o) noexcept {
  switch (o) {
    case op_kind::sum:
      return ncclSum;
    case op_kind::prod:
      return ncclProd;
    case op_kind::min:
      return ncclMin;
    case op_kind::max:
      return ncclMax;
    case op_kind::avg:
      return ncclAvg;
    default:
      return -1;
  }
}

/// One point-to-point message waiting for the next ncclGroupStart/ncclGroupEnd.
struct nccl_p2p {
  bool send = false;
  int peer = -1;
  void* buf = nullptr;
  std::size_t bytes = 0;
  cudaStream_t stream = nullptr;
};

struct nccl_state {
  int rank = 0;
  int size = 1;
  int device = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;  ///< the communicator's own stream
  std::chrono::milliseconds timeout{};
  bool check_calls = false;  ///< TUTTI_NCCL_CHECK: all-gather every fingerprint first

  std::atomic<bool> failed{false};  ///< set once: the communicator is aborted
  std::mutex failure_mu;
  std::string failure;        ///< why, for every later call
  std::mutex comm_mu;         ///< held around every NCCL call on comm once it exists, and its abort
  bool comm_aborted = false;  ///< under comm_mu

  std::mutex events_mu;
  std::vector<cudaEvent_t> free_events;

  std::vector<nccl_p2p> pending;  ///< posted, not yet issued (caller's thread only)
  std::uint64_t posted = 0;       ///< messages posted so far; request ids count from 1
  std::uint64_t issued = 0;       ///< messages issued (grouped) so far

  void* scratch = nullptr;  ///< device scratch for tutti's own policies (stream-ordered)
  std::size_t scratch_bytes = 0;
  void* staging = nullptr;
  std::size_t staging_bytes = 0;
  void* small = nullptr;  ///< 64 device bytes: barrier's word, zero-byte messages' byte
  /// The stream of the last call that used scratch or staging, and an event after that call:
  /// a call on another stream waits for it before reusing them.
  cudaStream_t scratch_stream = nullptr;
  cudaEvent_t scratch_done = nullptr;
  bool scratch_in_use = false;  ///< this call took scratch: record scratch_done after it
  /// Outgrown scratch, freed with the communicator: a message posted into it may still be
  /// waiting for its group when the buffer is outgrown, so it is never freed mid-call.
  std::vector<void*> retired;

  nccl_state() = default;
  nccl_state(const nccl_state&) = delete;
  nccl_state& operator=(const nccl_state&) = delete;

  /// Waits (bounded by the timeout) for this rank's queued work, then frees everything. A
  /// healthy communicator is finalised; one that fails or does not settle in time is aborted.
  ~nccl_state() {
    if (cudaSetDevice(device) != cudaSuccess) return;  // the context is gone: nothing to free
    const auto deadline = clock::now() + timeout;
    bool healthy = !failed.load();
    if (stream != nullptr && healthy) {
      while (cudaStreamQuery(stream) == cudaErrorNotReady) {
        clear_not_ready();
        if (clock::now() >= deadline) {
          healthy = false;
          break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
    if (comm != nullptr && !comm_aborted) {
      if (healthy) {
        const ncclResult_t f = ncclCommFinalize(comm);  // ncclInProgress: non-blocking
        healthy = (f == ncclSuccess || f == ncclInProgress) && settle(deadline);
      }
      if (healthy)
        (void)ncclCommDestroy(comm);
      else
        (void)ncclCommAbort(comm);
    }
    retired.insert(retired.end(), {scratch, staging, small});
    for (void* p : retired)
      if (p != nullptr) (void)cudaFree(p);
    for (cudaEvent_t e : free_events) (void)cudaEventDestroy(e);
    if (scratch_done != nullptr) (void)cudaEventDestroy(scratch_done);
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
  }

  /// Polls the communicator until it leaves ncclInProgress; false on an error or the deadline.
  [[nodiscard]] bool settle(clock::time_point deadline) noexcept {
    for (int i = 0;; ++i) {
      ncclResult_t st = ncclSuccess;
      if (locked([&] { return ncclCommGetAsyncError(comm, &st); }) != ncclSuccess) return false;
      if (st == ncclSuccess) return true;
      if (st != ncclInProgress || clock::now() >= deadline) return false;
      pause(i);
    }
  }

  /// Spin briefly, then sleep: ranks may outnumber cores.
  static void pause(int i) noexcept {
    if (i < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(i < 1024 ? 20 : 200));
    }
  }

  /// Runs one NCCL call on the communicator under comm_mu (NCCL forbids concurrent calls on one
  /// communicator: the progress thread polls it, and may abort it, while the caller enqueues);
  /// ncclInvalidUsage, without calling, once it is aborted (its memory may be gone).
  template <class F>
  ncclResult_t locked(F&& f) noexcept {
    std::lock_guard lock(comm_mu);
    if (comm == nullptr || comm_aborted) return ncclInvalidUsage;
    return f();
  }

  /// A cudaEventQuery/cudaStreamQuery that answered cudaErrorNotReady may leave it as the
  /// thread's last error: clear it (and only it), so that no later check reports it.
  static void clear_not_ready() noexcept {
    if (cudaPeekAtLastError() == cudaErrorNotReady) static_cast<void>(cudaGetLastError());
  }

  cudaEvent_t take_event() {
    {
      std::lock_guard lock(events_mu);
      if (!free_events.empty()) {
        cudaEvent_t e = free_events.back();
        free_events.pop_back();
        return e;
      }
    }
    cudaEvent_t e = nullptr;
    const cudaError_t r = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    if (r != cudaSuccess) throw_cuda(r, "cudaEventCreateWithFlags", "", 0);
    return e;
  }
  void give_event(cudaEvent_t e) noexcept {
    std::lock_guard lock(events_mu);
    free_events.push_back(e);
  }

  /// Aborts the NCCL communicator (once) and records why; later calls raise with it.
  void abort(const std::string& why) noexcept {
    {
      std::lock_guard lock(failure_mu);
      if (failure.empty()) failure = why;
    }
    failed.store(true);
    std::lock_guard lock(comm_mu);
    if (comm != nullptr && !comm_aborted) {
      (void)ncclCommAbort(comm);
      comm_aborted = true;
    }
  }

  [[noreturn]] void throw_cuda(cudaError_t r, const char* fn, const std::string& what,
                               std::uint64_t seq) {
    const std::string why = std::string(fn) + ": " + cudaGetErrorName(r) + " (" +
                            cudaGetErrorString(r) + ") on GPU " + std::to_string(device);
    abort(why);
    throw error(errc::transport_failure, what, seq, rank, -1, why);
  }
  [[noreturn]] void throw_nccl(ncclResult_t r, const char* fn, const std::string& what,
                               std::uint64_t seq) {
    check_usable(what, seq);  // aborted meanwhile (by another thread): raise its reason
    std::string why = std::string(fn) + ": " + ncclGetErrorString(r);
    {
      std::lock_guard lock(comm_mu);
      if (comm != nullptr && !comm_aborted) {
        const char* last = ncclGetLastError(comm);
        if (last != nullptr && *last != '\0') why += std::string(" (") + last + ")";
      }
    }
    abort(why);
    throw error(r == ncclRemoteError ? errc::peer_lost : errc::transport_failure, what, seq, rank,
                -1, why);
  }
  [[noreturn]] void throw_timeout(const std::string& what, std::uint64_t seq, const char* stage) {
    const std::string why = std::string("no progress within the timeout of ") +
                            std::to_string(timeout.count()) + " ms (" + stage +
                            "); the NCCL communicator was aborted. A peer may have died, stopped "
                            "or called a different collective";
    abort(why);
    throw error(errc::timeout, what, seq, rank, -1, why);
  }

  /// Raises if an earlier call broke the communicator.
  void check_usable(const std::string& what, std::uint64_t seq) {
    if (!failed.load(std::memory_order_acquire)) return;
    std::lock_guard lock(failure_mu);
    throw error(errc::aborted, what, seq, rank, -1,
                "communicator unusable after an earlier error: " + failure);
  }

  /// An NCCL call's result: success, or ncclInProgress polled to completion by `deadline`.
  void settle_or_throw(ncclResult_t r, const char* fn, const std::string& what, std::uint64_t seq,
                       clock::time_point deadline) {
    if (r == ncclSuccess) return;
    if (r != ncclInProgress) throw_nccl(r, fn, what, seq);
    for (int i = 0;; ++i) {
      ncclResult_t st = ncclSuccess;
      const ncclResult_t q = locked([&] { return ncclCommGetAsyncError(comm, &st); });
      if (q != ncclSuccess) throw_nccl(q, "ncclCommGetAsyncError", what, seq);
      if (st == ncclSuccess) return;
      if (st != ncclInProgress) throw_nccl(st, fn, what, seq);
      if (clock::now() >= deadline) throw_timeout(what, seq, fn);
      pause(i);
    }
  }

  /// Waits for `ev` (recorded after a call's work), polling NCCL's asynchronous error and the
  /// deadline; the event goes back to the pool either way.
  void wait_event(cudaEvent_t ev, const std::string& what, std::uint64_t seq,
                  clock::time_point deadline) {
    struct give_back {
      nccl_state* s;
      cudaEvent_t e;
      ~give_back() { s->give_event(e); }
    } guard{this, ev};
    for (int i = 0;; ++i) {
      const cudaError_t q = cudaEventQuery(ev);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) throw_cuda(q, "cudaEventQuery", what, seq);
      clear_not_ready();
      check_usable(what, seq);
      ncclResult_t st = ncclSuccess;
      const ncclResult_t g = locked([&] { return ncclCommGetAsyncError(comm, &st); });
      if (g != ncclSuccess) throw_nccl(g, "ncclCommGetAsyncError", what, seq);
      if (st != ncclSuccess && st != ncclInProgress) throw_nccl(st, "NCCL", what, seq);
      if (clock::now() >= deadline) throw_timeout(what, seq, "waiting for the GPU");
      pause(i);
    }
  }

  /// Device memory of at least `bytes` in `slot`, stream-ordered on `s`.
  void* grow(void*& slot, std::size_t& have, std::size_t bytes, cudaStream_t s,
             const std::string& what, std::uint64_t seq) {
    if (have >= bytes) return slot;
    const std::size_t want = std::max({bytes, 2 * have, std::size_t{4096}});
    void* fresh = nullptr;
    const cudaError_t r = cudaMallocAsync(&fresh, want, s);
    if (r != cudaSuccess) throw_cuda(r, "cudaMallocAsync", what, seq);
    if (slot != nullptr) retired.push_back(slot);
    slot = fresh;
    have = want;
    return slot;
  }
};

/// Makes the communicator's GPU current for the calling thread, and restores the previous one.
class device_guard {
 public:
  explicit device_guard(int device) noexcept {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != device)
      switched_ = cudaSetDevice(device) == cudaSuccess;
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;
  ~device_guard() {
    if (switched_) (void)cudaSetDevice(previous_);
  }

 private:
  int previous_ = -1;
  bool switched_ = false;
};

}  // namespace detail

/// The NCCL transport: this process's rank on one GPU. Normally built by
/// communicator<nccl, ...>::from_env() or from_url().
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
  /// user.
  [[nodiscard]] static nccl from_env(const options& opts = {}) {
    const bootstrap::world_info w = bootstrap::world_from_env();
    const std::string key = next_key();
    if (!w.master_addr.empty() && w.master_port > 0 && !w.agent_store)
      return connect(bootstrap::env_store(w.rank, opts.timeout, opts.store_token), key, w.rank,
                     w.size, w.local_rank, opts);
    if (w.local_size != w.size)
      throw error(errc::invalid_argument, "", 0, w.rank, -1,
                  "tutti::nccl across hosts needs a store: set MASTER_ADDR and MASTER_PORT "
                  "(rank 0 serves it), or use communicator<nccl>::from_url with tcp://");
    const std::string path = bootstrap::private_dir() + "/" + bootstrap::local_job_key() +
                             ".nccl." + key.substr(std::string_view("tutti/nccl/").size());
    auto st = std::make_shared<bootstrap::file_store>(path, opts.timeout);
    nccl t = connect(st, key, w.rank, w.size, w.local_rank, opts);
    if (w.rank == 0) (void)::unlink(path.c_str());  // every rank has read the id by now
    return t;
  }

  /// This rank's endpoint, meeting the others through the store an init URL names
  /// (`tcp://host:port`, `file:///path`, `env://`); GPU = the launcher's local rank (LOCAL_RANK,
  /// OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID ...; 0 without a launcher) modulo the number of
  /// visible GPUs.
  [[nodiscard]] static nccl from_url(std::string_view url, int rank, int size,
                                     const options& opts = {}) {
    const auto u = bootstrap::parse_init_url(url);
    auto st = bootstrap::make_store(u, rank, opts.timeout, opts.store_token);
    return connect(st, next_key(), rank, size, launcher_local_rank(), opts);
  }

  /// Joins the world of `size` ranks: rank 0 creates the ncclUniqueId and publishes it in `st`
  /// under `key`; every rank takes GPU `local_rank` modulo the visible GPUs and creates its
  /// non-blocking NCCL communicator, bounded by opts.timeout.
  [[nodiscard]] static nccl connect(const std::shared_ptr<bootstrap::store>& st,
                                    const std::string& key, int rank, int size, int local_rank,
                                    const options& opts = {}) {
    if (size < 1 || rank < 0 || rank >= size)
      throw error(errc::invalid_argument, "", 0, rank, -1,
                  "tutti::nccl: rank " + std::to_string(rank) + " is not in a world of " +
                      std::to_string(size));
    int devices = 0;
    if (const cudaError_t r = cudaGetDeviceCount(&devices); r != cudaSuccess || devices < 1)
      throw error(errc::invalid_argument, "", 0, rank, -1,
                  std::string("tutti::nccl: no CUDA device (") +
                      (r != cudaSuccess ? cudaGetErrorString(r) : "none visible") + ")");
    auto s = std::make_shared<detail::nccl_state>();
    s->rank = rank;
    s->size = size;
    s->device = (local_rank < 0 ? 0 : local_rank) % devices;
    s->timeout = opts.timeout;
    s->check_calls = detail::env_string("TUTTI_NCCL_CHECK") == "1";
    const auto deadline = detail::clock::now() + opts.timeout;
    if (const cudaError_t r = cudaSetDevice(s->device); r != cudaSuccess)
      s->throw_cuda(r, "cudaSetDevice", "", 0);
    // A blocking stream: work on it starts after what the caller queued on the legacy default
    // stream (a kernel<<<>>> or cudaMemcpy without a stream), as the caller's program order
    // says; a non-blocking stream would let NCCL read the buffer before that work wrote it.
    if (const cudaError_t r = cudaStreamCreateWithFlags(&s->stream, cudaStreamDefault);
        r != cudaSuccess)
      s->throw_cuda(r, "cudaStreamCreateWithFlags", "", 0);
    if (const cudaError_t r = cudaEventCreateWithFlags(&s->scratch_done, cudaEventDisableTiming);
        r != cudaSuccess)
      s->throw_cuda(r, "cudaEventCreateWithFlags", "", 0);
    if (const cudaError_t r = cudaMalloc(&s->small, 64); r != cudaSuccess)
      s->throw_cuda(r, "cudaMalloc", "", 0);

    ncclUniqueId id{};
    const std::string id_key = key + "/unique_id";
    if (rank == 0) {
      if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
        s->throw_nccl(r, "ncclGetUniqueId", "", 0);
      st->set(id_key, std::as_bytes(std::span(id.internal)));
    } else {
      const auto bytes = st->get(id_key, opts.timeout);
      if (bytes.size() != sizeof(id.internal))
        throw error(errc::transport_failure, "", 0, rank, 0,
                    "tutti::nccl: the store holds a unique id of " + std::to_string(bytes.size()) +
                        " bytes, not " + std::to_string(sizeof(id.internal)));
      std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
    }

    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t r = ncclCommInitRankConfig(&s->comm, size, id, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) s->throw_nccl(r, "ncclCommInitRankConfig", "", 0);
    s->settle_or_throw(r, "ncclCommInitRankConfig", "", 0, deadline);
    if (detail::debug_info())
      std::fprintf(stderr, "tutti[nccl] rank %d/%d: GPU %d, NCCL %d\n", rank, size, s->device,
                   NCCL_VERSION_CODE);
    return nccl(std::move(s));
  }

  /// The GPUs this host's ranks may use, counted WITHOUT initialising CUDA (a CUDA context
  /// does not survive fork(), so a parent that forks ranks, as tutti::spawn does, must not call
  /// the CUDA runtime): one per entry of /proc/driver/nvidia/gpus, capped by the number of
  /// entries in CUDA_VISIBLE_DEVICES when it is set (empty hides every GPU). 0 without a GPU.
  [[nodiscard]] static int local_gpus() noexcept {
    int n = 0;
    std::error_code ec;
    for (std::filesystem::directory_iterator it("/proc/driver/nvidia/gpus", ec), end;
         !ec && it != end; it.increment(ec))
      ++n;
    if (const char* env = std::getenv("CUDA_VISIBLE_DEVICES")) {
      int listed = 0;
      std::string_view rest(env);
      while (!rest.empty()) {
        const auto comma = rest.find(',');
        if (!rest.substr(0, comma).empty()) ++listed;
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
      }
      n = std::min(n, listed);
    }
    return n;
  }

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
    if (s_->check_calls && c.compared()) check_fingerprints(c);
  }

  /// Posts a message to `peer`; it is issued, grouped with every other posted message, at the
  /// next wait. NCCL matches messages between a pair in posting order: send/recv tags are not
  /// supported (tag 0 only).
  [[nodiscard]] request isend(int peer, std::span<const std::byte> out, const detail::call& c,
                              detail::space sp, std::uint64_t tag) {
    return post(true, peer, const_cast<std::byte*>(out.data()), out.size(), c, sp, tag);
  }
  [[nodiscard]] request irecv(int peer, std::span<std::byte> in, const detail::call& c,
                              detail::space sp, std::uint64_t tag) {
    return post(false, peer, in.data(), in.size(), c, sp, tag);
  }

  /// Issues every posted message in one NCCL group. Inside a collective that is all: what
  /// follows on the stream runs after the transfers. A user's send or recv also waits for the
  /// GPU to finish it.
  void wait(request& r, const detail::call& c, detail::clock::time_point deadline) {
    if (r.id == 0) return;
    if (r.id > s_->issued) flush(c, deadline);
    r.id = 0;
    if (c.fp.coll == detail::collective::send || c.fp.coll == detail::collective::recv)
      complete(record(c), c, deadline);
  }

  // ---- stream order: what the communicator does around every call -------------------------

  /// Records an event after everything `c` enqueued; complete() waits for it.
  [[nodiscard]] cudaEvent_t record(const detail::call& c) {
    const detail::device_guard on(s_->device);
    if (s_->scratch_in_use) {
      s_->scratch_in_use = false;
      if (const cudaError_t r = cudaEventRecord(s_->scratch_done, stream_of(c)); r != cudaSuccess)
        s_->throw_cuda(r, "cudaEventRecord", c.name_str(), c.seq);
    }
    return record_on(stream_of(c), c);
  }
  /// Waits for `ev` with `c`'s deadline, polling NCCL's asynchronous errors; on an error or
  /// the deadline aborts the communicator and raises.
  void complete(cudaEvent_t ev, const detail::call& c, detail::clock::time_point deadline) {
    const detail::device_guard on(s_->device);  // also on the progress thread
    s_->wait_event(ev, c.name_str(), c.seq, deadline);
  }

  // ---- NCCL's own collectives (tutti::native) ---------------------------------------------

  void native_all_reduce(const detail::call& c, const std::byte* in, std::byte* out, std::size_t n,
                         detail::clock::time_point d) {
    const auto red = reduction(c);
    const ncclDataType_t type = red.first;
    const ncclRedOp_t op = red.second;
    run(c, d, "ncclAllReduce",
        [&](cudaStream_t s) { return ncclAllReduce(in, out, n, type, op, s_->comm, s); });
  }
  void native_reduce(const detail::call& c, const std::byte* in, std::byte* out, std::size_t n,
                     int root, detail::clock::time_point d) {
    const auto red = reduction(c);
    const ncclDataType_t type = red.first;
    const ncclRedOp_t op = red.second;
    run(c, d, "ncclReduce",
        [&](cudaStream_t s) { return ncclReduce(in, out, n, type, op, root, s_->comm, s); });
  }
  void native_reduce_scatter(const detail::call& c, const std::byte* in, std::byte* out,
                             std::size_t n, detail::clock::time_point d) {
    const auto red = reduction(c);
    const ncclDataType_t type = red.first;
    const ncclRedOp_t op = red.second;
    run(c, d, "ncclReduceScatter",
        [&](cudaStream_t s) { return ncclReduceScatter(in, out, n, type, op, s_->comm, s); });
  }
  void native_broadcast(const detail::call& c, std::byte* buf, std::size_t n, int root,
                        detail::clock::time_point d) {
    run(c, d, "ncclBroadcast", [&](cudaStream_t s) {
      return ncclBroadcast(buf, buf, n * c.elem_size, ncclUint8, root, s_->comm, s);
    });
  }
  void native_all_gather(const detail::call& c, const std::byte* in, std::byte* out, std::size_t n,
                         detail::clock::time_point d) {
    run(c, d, "ncclAllGather", [&](cudaStream_t s) {
      return ncclAllGather(in, out, n * c.elem_size, ncclUint8, s_->comm, s);
    });
  }
  void native_gather(const detail::call& c, const std::byte* in, std::byte* out, std::size_t n,
                     int root, detail::clock::time_point d) {
    const std::size_t bytes = n * c.elem_size;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
    run(c, d, "ncclGather",
        [&](cudaStream_t s) { return ncclGather(in, out, bytes, ncclUint8, root, s_->comm, s); });
#else
    run(c, d, "ncclGather (grouped ncclSend/ncclRecv)", [&](cudaStream_t s) {
      return grouped([&] {
        if (rank() == root)
          for (int q = 0; q < size(); ++q)
            if (auto r = ncclRecv(out + static_cast<std::size_t>(q) * bytes, bytes, ncclUint8, q,
                                  s_->comm, s);
                r != ncclSuccess && r != ncclInProgress)
              return r;
        return ncclSend(in, bytes, ncclUint8, root, s_->comm, s);
      });
    });
#endif
  }
  void native_scatter(const detail::call& c, const std::byte* in, std::byte* out, std::size_t n,
                      int root, detail::clock::time_point d) {
    const std::size_t bytes = n * c.elem_size;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
    run(c, d, "ncclScatter",
        [&](cudaStream_t s) { return ncclScatter(in, out, bytes, ncclUint8, root, s_->comm, s); });
#else
    run(c, d, "ncclScatter (grouped ncclSend/ncclRecv)", [&](cudaStream_t s) {
      return grouped([&] {
        if (rank() == root)
          for (int q = 0; q < size(); ++q)
            if (auto r = ncclSend(in + static_cast<std::size_t>(q) * bytes, bytes, ncclUint8, q,
                                  s_->comm, s);
                r != ncclSuccess && r != ncclInProgress)
              return r;
        return ncclRecv(out, bytes, ncclUint8, root, s_->comm, s);
      });
    });
#endif
  }
  void native_all_to_all(const detail::call& c, const std::byte* in, std::byte* out, std::size_t n,
                         detail::clock::time_point d) {
    const std::size_t bytes = n * c.elem_size;
    in = apart(c, in, bytes * static_cast<std::size_t>(size()), out,
               bytes * static_cast<std::size_t>(size()));
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
    run(c, d, "ncclAlltoAll",
        [&](cudaStream_t s) { return ncclAlltoAll(in, out, bytes, ncclUint8, s_->comm, s); });
#else
    run(c, d, "ncclAlltoAll (grouped ncclSend/ncclRecv)", [&](cudaStream_t s) {
      return grouped([&] {
        for (int q = 0; q < size(); ++q) {
          const auto at = static_cast<std::size_t>(q) * bytes;
          if (auto r = ncclSend(in + at, bytes, ncclUint8, q, s_->comm, s);
              r != ncclSuccess && r != ncclInProgress)
            return r;
          if (auto r = ncclRecv(out + at, bytes, ncclUint8, q, s_->comm, s);
              r != ncclSuccess && r != ncclInProgress)
            return r;
        }
        return ncclSuccess;
      });
    });
#endif
  }
  /// Per-pair counts (elements): one group of ncclSend/ncclRecv, as NCCL's documentation shows
  /// for all-to-allv.
  void native_all_to_allv(const detail::call& c, const std::byte* in,
                          std::span<const std::size_t> sc, std::byte* out,
                          std::span<const std::size_t> rc, detail::clock::time_point d) {
    std::size_t in_bytes = 0, out_bytes = 0;
    for (const std::size_t k : sc) in_bytes += k * c.elem_size;
    for (const std::size_t k : rc) out_bytes += k * c.elem_size;
    in = apart(c, in, in_bytes, out, out_bytes);
    run(c, d, "all_to_allv (grouped ncclSend/ncclRecv)", [&](cudaStream_t s) {
      return grouped([&] {
        std::size_t sat = 0, rat = 0;
        for (int q = 0; q < size(); ++q) {
          const auto qi = static_cast<std::size_t>(q);
          const std::size_t sb = sc[qi] * c.elem_size, rb = rc[qi] * c.elem_size;
          if (sb != 0)
            if (auto r = ncclSend(in + sat, sb, ncclUint8, q, s_->comm, s);
                r != ncclSuccess && r != ncclInProgress)
              return r;
          if (rb != 0)
            if (auto r = ncclRecv(out + rat, rb, ncclUint8, q, s_->comm, s);
                r != ncclSuccess && r != ncclInProgress)
              return r;
          sat += sb;
          rat += rb;
        }
        return ncclSuccess;
      });
    });
  }
  /// An all-reduce of one word on the GPU (NCCL has no barrier): the communicator's wait for
  /// its event returns once every rank has reached the barrier.
  void native_barrier(const detail::call& c, detail::clock::time_point d) {
    run(c, d, "ncclAllReduce (barrier)", [&](cudaStream_t s) {
      return ncclAllReduce(s_->small, s_->small, 1, ncclInt32, ncclSum, s_->comm, s);
    });
  }

  // ---- device memory for tutti's own policies ---------------------------------------------

  /// dst = src on the GPU, ordered on the call's stream.
  void device_copy(const detail::call& c, void* dst, const void* src, std::size_t bytes) {
    if (bytes == 0 || dst == src) return;
    const detail::device_guard on(s_->device);
    const cudaError_t r = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_of(c));
    if (r != cudaSuccess) s_->throw_cuda(r, "cudaMemcpyAsync", c.name_str(), c.seq);
  }
  /// d = a op b over `n` elements, with the kernels tutti/transport/nccl.cuh registered.
  void device_reduce(const detail::call& c, void* d, const void* a, const void* b, std::size_t n) {
    if (n == 0) return;
    const auto fn = detail::device_reducer_table().find(c.fp.op, c.fp.type);
    if (fn == nullptr) no_kernel(c);
    const detail::device_guard on(s_->device);  // a launch goes to the current device's stream
    if (const int r = fn(d, a, b, n, stream_of(c)); r != 0)
      s_->throw_cuda(static_cast<cudaError_t>(r), "device reduction kernel", c.name_str(), c.seq);
  }
  /// avg's final division on the GPU.
  void device_finish(const detail::call& c, void* x, std::size_t n) {
    if (c.fp.op != op_kind::avg || n == 0) return;
    const auto fn = detail::device_reducer_table().find_divide(c.fp.type);
    if (fn == nullptr) no_kernel(c);
    const detail::device_guard on(s_->device);
    if (const int r = fn(x, n, size(), stream_of(c)); r != 0)
      s_->throw_cuda(static_cast<cudaError_t>(r), "device division kernel", c.name_str(), c.seq);
  }
  /// Device scratch of at least `bytes`, valid for the call (stream-ordered reuse).
  /// Calls on different streams share it: a call on a stream other than the last user's waits
  /// (on the GPU) for that call to finish first.
  [[nodiscard]] std::byte* device_scratch(const detail::call& c, std::size_t bytes, bool staging) {
    const detail::device_guard on(s_->device);
    const cudaStream_t st = stream_of(c);
    if (s_->scratch_stream != nullptr && s_->scratch_stream != st && !s_->scratch_in_use)
      if (const cudaError_t r = cudaStreamWaitEvent(st, s_->scratch_done, 0); r != cudaSuccess)
        s_->throw_cuda(r, "cudaStreamWaitEvent", c.name_str(), c.seq);
    s_->scratch_stream = st;
    s_->scratch_in_use = true;
    return static_cast<std::byte*>(
        staging ? s_->grow(s_->staging, s_->staging_bytes, bytes, st, c.name_str(), c.seq)
                : s_->grow(s_->scratch, s_->scratch_bytes, bytes, st, c.name_str(), c.seq));
  }

 private:
  explicit nccl(std::shared_ptr<detail::nccl_state> s) noexcept : s_(std::move(s)) {}

  [[nodiscard]] cudaStream_t stream_of(const detail::call& c) const noexcept {
    return c.stream != nullptr ? static_cast<cudaStream_t>(c.stream) : s_->stream;
  }

  [[noreturn]] void no_kernel(const detail::call& c) const {
    throw error(errc::invalid_argument, c.name_str(), c.seq, rank(), -1,
                detail::device_reducer_table().filled
                    ? "no device kernel reduces " + std::string(name(c.fp.type)) + " with " +
                          std::string(name(c.fp.op))
                    : "tutti's own policies on tutti::nccl reduce with device kernels: include "
                      "<tutti/transport/nccl.cuh> in a .cu file of this program (compiled by "
                      "nvcc), or use tutti::native");
  }

  /// NCCL's (type, op) for a reduction, or errc::invalid_argument where NCCL has none.
  [[nodiscard]] std::pair<ncclDataType_t, ncclRedOp_t> reduction(const detail::call& c) const {
    const int type = detail::nccl_type_of(c.fp.type);
    const int op = detail::nccl_op_of(c.fp.op);
    if (type < 0 || op < 0)
      throw error(errc::invalid_argument, c.name_str(), c.seq, rank(), -1,
                  std::string("NCCL has no ") +
                      (type < 0 ? "reduction over " + std::string(name(c.fp.type))
                                : std::string(name(c.fp.op)) + " reduction") +
                      ": use a wider type, or tutti::ring / tree / recursive_halving with the "
                      "kernels of <tutti/transport/nccl.cuh>");
    return {static_cast<ncclDataType_t>(type), static_cast<ncclRedOp_t>(op)};
  }

  /// `in`, or a copy of it in staging where it overlaps `out`: NCCL's all-to-all (and the
  /// grouped sends and receives) have no in-place form.
  [[nodiscard]] const std::byte* apart(const detail::call& c, const std::byte* in,
                                       std::size_t in_bytes, const std::byte* out,
                                       std::size_t out_bytes) {
    const auto a = reinterpret_cast<std::uintptr_t>(in);
    const auto b = reinterpret_cast<std::uintptr_t>(out);
    if (in_bytes == 0 || out_bytes == 0 || a + in_bytes <= b || b + out_bytes <= a) return in;
    std::byte* copy = device_scratch(c, in_bytes, true);
    device_copy(c, copy, in, in_bytes);
    return copy;
  }

  /// Runs one NCCL enqueue on the call's stream and settles ncclInProgress by the deadline.
  template <class Enqueue>
  void run(const detail::call& c, detail::clock::time_point d, const char* fn, Enqueue&& enqueue) {
    s_->check_usable(c.name_str(), c.seq);
    const detail::device_guard on(s_->device);
    const cudaStream_t st = stream_of(c);
    s_->settle_or_throw(s_->locked([&] { return enqueue(st); }), fn, c.name_str(), c.seq, d);
  }

  /// ncclGroupStart; body (NCCL calls); ncclGroupEnd. Returns the first failure, or
  /// ncclGroupEnd's result (ncclInProgress on a non-blocking communicator).
  template <class Body>
  static ncclResult_t grouped(Body&& body) {
    if (const ncclResult_t r = ncclGroupStart(); r != ncclSuccess) return r;
    const ncclResult_t inner = body();
    const ncclResult_t end = ncclGroupEnd();
    return inner != ncclSuccess && inner != ncclInProgress ? inner : end;
  }

  request post(bool send, int peer, std::byte* buf, std::size_t bytes, const detail::call& c,
               detail::space sp, std::uint64_t tag) {
    s_->check_usable(c.name_str(), c.seq);
    if (sp == detail::space::p2p && tag != 0)
      throw error(errc::invalid_argument, c.name_str(), c.seq, rank(), peer,
                  "tutti::nccl matches send and recv in posting order, as NCCL does: tags are "
                  "not supported (pass tag 0)");
    // A zero-byte message still orders its two ranks (a dissemination barrier is made of them):
    // it travels as one byte of the communicator's own, sent from and received into bytes
    // nobody reads.
    if (bytes == 0) {
      buf = static_cast<std::byte*>(s_->small) + (send ? 32 : 48);
      bytes = 1;
    }
    s_->pending.push_back({send, peer, buf, bytes, stream_of(c)});
    return {++s_->posted};
  }

  void flush(const detail::call& c, detail::clock::time_point deadline) {
    if (s_->pending.empty()) return;
    const detail::device_guard on(s_->device);
    const ncclResult_t r = s_->locked([&] {
      return grouped([&] {
        for (const auto& m : s_->pending) {
          const ncclResult_t e =
              m.send ? ncclSend(m.buf, m.bytes, ncclUint8, m.peer, s_->comm, m.stream)
                     : ncclRecv(m.buf, m.bytes, ncclUint8, m.peer, s_->comm, m.stream);
          if (e != ncclSuccess && e != ncclInProgress) return e;
        }
        return ncclSuccess;
      });
    });
    s_->issued = s_->posted;
    s_->pending.clear();
    s_->settle_or_throw(r, "ncclGroupEnd (ncclSend/ncclRecv)", c.name_str(), c.seq, deadline);
  }

  /// TUTTI_NCCL_CHECK: every rank's (head, count) through ncclAllGather, compared on the host.
  void check_fingerprints(const detail::call& c) {
    const auto deadline = detail::clock::now() + s_->timeout;
    const detail::device_guard on(s_->device);
    const std::uint64_t mine[2] = {c.fp.packed_head(), c.fp.count};
    std::vector<std::uint64_t> all(2 * static_cast<std::size_t>(size()));
    std::uint64_t* dev = nullptr;
    const std::size_t bytes = all.size() * sizeof(std::uint64_t);
    if (auto r = cudaMallocAsync(reinterpret_cast<void**>(&dev), bytes + sizeof mine, s_->stream);
        r != cudaSuccess)
      s_->throw_cuda(r, "cudaMallocAsync", c.name_str(), c.seq);
    std::uint64_t* dev_mine = dev + all.size();
    if (auto r = cudaMemcpyAsync(dev_mine, mine, sizeof mine, cudaMemcpyHostToDevice, s_->stream);
        r != cudaSuccess)
      s_->throw_cuda(r, "cudaMemcpyAsync", c.name_str(), c.seq);
    s_->settle_or_throw(s_->locked([&] {
      return ncclAllGather(dev_mine, dev, sizeof mine, ncclUint8, s_->comm, s_->stream);
    }),
                        "ncclAllGather (fingerprints)", c.name_str(), c.seq, deadline);
    if (auto r = cudaMemcpyAsync(all.data(), dev, bytes, cudaMemcpyDeviceToHost, s_->stream);
        r != cudaSuccess)
      s_->throw_cuda(r, "cudaMemcpyAsync", c.name_str(), c.seq);
    (void)cudaFreeAsync(dev, s_->stream);
    s_->wait_event(record_on(s_->stream, c), c.name_str(), c.seq, deadline);
    for (int q = 0; q < size(); ++q) {
      const auto at = 2 * static_cast<std::size_t>(q);
      const detail::fingerprint theirs = detail::fingerprint::unpack(all[at], all[at + 1]);
      if (theirs != c.fp) {
        const std::string why = "rank " + std::to_string(rank()) + " called " + c.fp.describe() +
                                ", rank " + std::to_string(q) + " called " + theirs.describe();
        s_->abort(why);
        throw error(errc::mismatch, c.name_str(), c.seq, rank(), q, why);
      }
    }
  }
  /// An event recorded on `s` (the device is current), for `c`'s errors.
  [[nodiscard]] cudaEvent_t record_on(cudaStream_t s, const detail::call& c) {
    cudaEvent_t ev = s_->take_event();
    if (const cudaError_t r = cudaEventRecord(ev, s); r != cudaSuccess) {
      s_->give_event(ev);
      s_->throw_cuda(r, "cudaEventRecord", c.name_str(), c.seq);
    }
    return ev;
  }

  /// The launcher's local rank (as from_env reads it), 0 where there is no launcher.
  [[nodiscard]] static int launcher_local_rank() {
    try {
      return bootstrap::world_from_env().local_rank;
    } catch (const error&) {
      return 0;  // from_url names the world itself: no launcher needed
    }
  }

  [[nodiscard]] static std::string next_key() {
    static std::atomic<unsigned> generation{0};
    return "tutti/nccl/" + std::to_string(generation.fetch_add(1));
  }

  std::shared_ptr<detail::nccl_state> s_;
};

}  // namespace tutti::inline v0

#endif

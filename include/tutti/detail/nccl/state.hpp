#pragma once
/// \file
/// tutti::nccl's communicator state: the NCCL communicator, its stream, events and device
/// scratch, and its typed errors. Every CUDA or NCCL failure becomes a tutti::error
/// (transport_failure; peer_lost for ncclRemoteError; timeout when nothing moved by the
/// deadline; aborted for every call after the first failure), and the first one aborts the
/// NCCL communicator (ncclCommAbort) so that no rank waits on it for ever.

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tutti/core/error.hpp"
#include "tutti/detail/call.hpp"
#include "tutti/detail/wait.hpp"

namespace tutti::inline v0::detail {

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
  /// Where ncclCommSplit on this communicator writes the child's handle: NCCL stores it when
  /// the split's job ends, after a non-blocking ncclCommSplit has returned, so the cell must
  /// outlive the call (nccl_split reads it once this communicator settles).
  ncclComm_t split_child = nullptr;
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
      // NCCL's asynchronous error (a peer gone, a network failure) every 16th poll: it takes
      // comm_mu, which the caller's thread needs to enqueue its next call meanwhile.
      if (i % 16 == 15) {
        ncclResult_t st = ncclSuccess;
        const ncclResult_t g = locked([&] { return ncclCommGetAsyncError(comm, &st); });
        if (g != ncclSuccess) throw_nccl(g, "ncclCommGetAsyncError", what, seq);
        if (st != ncclSuccess && st != ncclInProgress) throw_nccl(st, "NCCL", what, seq);
        if (clock::now() >= deadline) throw_timeout(what, seq, "waiting for the GPU");
      }
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

  // ---- issuing work on a call's stream ----------------------------------------------------

  /// The stream `c` is ordered on: the caller's, or the communicator's own.
  [[nodiscard]] cudaStream_t stream_for(const call& c) const noexcept {
    return c.stream != nullptr ? static_cast<cudaStream_t>(c.stream) : stream;
  }

  /// An event recorded on `s` (the device is current), for `c`'s errors.
  [[nodiscard]] cudaEvent_t record_on(cudaStream_t s, const call& c) {
    cudaEvent_t ev = take_event();
    if (const cudaError_t r = cudaEventRecord(ev, s); r != cudaSuccess) {
      give_event(ev);
      throw_cuda(r, "cudaEventRecord", c.name_str(), c.seq);
    }
    return ev;
  }

  /// An event after everything `c` enqueued on its stream; first, where `c` used scratch,
  /// scratch_done after it (a later call on another stream waits for it).
  [[nodiscard]] cudaEvent_t record_after(const call& c) {
    const device_guard on(device);
    const cudaStream_t st = stream_for(c);
    if (scratch_in_use) {
      scratch_in_use = false;
      if (const cudaError_t r = cudaEventRecord(scratch_done, st); r != cudaSuccess)
        throw_cuda(r, "cudaEventRecord", c.name_str(), c.seq);
    }
    return record_on(st, c);
  }

  /// Runs one NCCL enqueue on `c`'s stream and settles ncclInProgress by the deadline.
  template <class Enqueue>
  void run(const call& c, clock::time_point d, const char* fn, Enqueue&& enqueue) {
    check_usable(c.name_str(), c.seq);
    const device_guard on(device);
    const cudaStream_t st = stream_for(c);
    settle_or_throw(locked([&] { return enqueue(st); }), fn, c.name_str(), c.seq, d);
  }
};

/// ncclGroupStart; body (NCCL calls); ncclGroupEnd. Returns the first failure, or
/// ncclGroupEnd's result (ncclInProgress on a non-blocking communicator).
template <class Body>
ncclResult_t nccl_grouped(Body&& body) {
  if (const ncclResult_t r = ncclGroupStart(); r != ncclSuccess) return r;
  const ncclResult_t inner = body();
  const ncclResult_t end = ncclGroupEnd();
  return inner != ncclSuccess && inner != ncclInProgress ? inner : end;
}

}  // namespace tutti::inline v0::detail

#pragma once
/// \file
/// Creating tutti::nccl's communicator: rank 0's ncclUniqueId through a store, one GPU per rank,
/// a non-blocking NCCL communicator bounded by the timeout; and counting this host's GPUs
/// without initialising CUDA.

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "tutti/bootstrap/store.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/options.hpp"
#include "tutti/detail/nccl/state.hpp"
#include "tutti/detail/split.hpp"
#include "tutti/detail/wait.hpp"

namespace tutti::inline v0::detail {

/// A state for rank `rank` of `size` on CUDA device `device`: its stream, event and small
/// buffer made, no NCCL communicator yet.
[[nodiscard]] inline std::shared_ptr<nccl_state> nccl_prepare(int rank, int size, int device,
                                                              const options& opts) {
  auto s = std::make_shared<nccl_state>();
  s->rank = rank;
  s->size = size;
  s->device = device;
  s->timeout = opts.timeout;
  s->check_calls = env_string("TUTTI_NCCL_CHECK") == "1";
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
  return s;
}

/// Joins the world of `size` ranks: rank 0 creates the ncclUniqueId and publishes it in `st`
/// under `key`/unique_id; every rank takes GPU `local_rank` modulo the visible GPUs and creates
/// its non-blocking NCCL communicator, bounded by opts.timeout.
[[nodiscard]] inline std::shared_ptr<nccl_state> nccl_init(bootstrap::store& st,
                                                           const std::string& key, int rank,
                                                           int size, int local_rank,
                                                           const options& opts) {
  if (size < 1 || rank < 0 || rank >= size)
    throw error(errc::invalid_argument, "", 0, rank, -1,
                "tutti::nccl: rank " + std::to_string(rank) + " is not in a world of " +
                    std::to_string(size));
  int devices = 0;
  if (const cudaError_t r = cudaGetDeviceCount(&devices); r != cudaSuccess || devices < 1)
    throw error(errc::invalid_argument, "", 0, rank, -1,
                std::string("tutti::nccl: no CUDA device (") +
                    (r != cudaSuccess ? cudaGetErrorString(r) : "none visible") + ")");
  const auto deadline = clock::now() + opts.timeout;
  auto s = nccl_prepare(rank, size, (local_rank < 0 ? 0 : local_rank) % devices, opts);

  ncclUniqueId id{};
  const std::string id_key = key + "/unique_id";
  if (rank == 0) {
    if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
      s->throw_nccl(r, "ncclGetUniqueId", "", 0);
    st.set(id_key, std::as_bytes(std::span(id.internal)));
  } else {
    const auto bytes = st.get(id_key, opts.timeout);
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
  // Polled whatever it answered: a non-blocking initialisation may still run after ncclSuccess.
  s->settle_or_throw(ncclInProgress, "ncclCommInitRankConfig", "", 0, deadline);
  if (debug_info())
    std::fprintf(stderr, "tutti[nccl] rank %d/%d: GPU %d, NCCL %d\n", rank, size, s->device,
                 NCCL_VERSION_CODE);
  return s;
}

/// This rank's communicator in the child of color `p.color` (negative: none) ordered by
/// `p.key` (communicator::split), through ncclCommSplit on `parent` (which every parent rank
/// calls, members or not: NCCL_SPLIT_NOCOLOR for the others), on the parent's GPU,
/// non-blocking and bounded by opts.timeout. NCCL orders a color's ranks by key, then parent
/// rank, and says the child's rank and size. Null for a rank that joins no child.
///
/// A non-blocking ncclCommSplit returns while its job still runs (NCCL 2.28 answers ncclSuccess
/// then, not ncclInProgress) and writes the child's handle only when the job ends, which the
/// parent's asynchronous state reports: the parent is always polled until it settles, and the
/// handle read from the parent's state after that, then the child polled in turn.
[[nodiscard]] inline std::shared_ptr<nccl_state> nccl_split(nccl_state& parent, const split_plan& p,
                                                            const options& opts) {
  const auto deadline = clock::now() + opts.timeout;
  std::shared_ptr<nccl_state> s;
  if (p.joins()) s = nccl_prepare(-1, 0, parent.device, opts);
  const device_guard on(parent.device);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const int color = p.joins() ? static_cast<int>(p.color) : NCCL_SPLIT_NOCOLOR;
  const ncclResult_t r = parent.locked([&] {
    parent.split_child = nullptr;
    return ncclCommSplit(parent.comm, color, static_cast<int>(p.key), &parent.split_child, &config);
  });
  if (r != ncclSuccess && r != ncclInProgress) parent.throw_nccl(r, "ncclCommSplit", "", 0);
  parent.settle_or_throw(ncclInProgress, "ncclCommSplit", "", 0, deadline);
  {
    const std::lock_guard lock(parent.comm_mu);
    const ncclComm_t child = std::atomic_ref(parent.split_child).load(std::memory_order_acquire);
    parent.split_child = nullptr;
    if (s) s->comm = child;
  }
  if (!s) return s;
  if (s->comm == nullptr)
    throw error(errc::transport_failure, "", 0, parent.rank, -1,
                "tutti::nccl: ncclCommSplit settled without a communicator for color " +
                    std::to_string(p.color));
  // The child's state destroys (or aborts) it from here on, even if it never settles.
  s->settle_or_throw(ncclInProgress, "ncclCommSplit", "", 0, deadline);
  if (const ncclResult_t q = ncclCommUserRank(s->comm, &s->rank); q != ncclSuccess)
    s->throw_nccl(q, "ncclCommUserRank", "", 0);
  if (const ncclResult_t q = ncclCommCount(s->comm, &s->size); q != ncclSuccess)
    s->throw_nccl(q, "ncclCommCount", "", 0);
  return s;
}

/// The GPUs this host's ranks may use, counted WITHOUT initialising CUDA (a CUDA context
/// does not survive fork(), so a parent that forks ranks, as tutti::spawn does, must not call
/// the CUDA runtime): one per entry of /proc/driver/nvidia/gpus, capped by the number of
/// entries in CUDA_VISIBLE_DEVICES when it is set (empty hides every GPU). 0 without a GPU.
[[nodiscard]] inline int nccl_local_gpus() noexcept {
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

}  // namespace tutti::inline v0::detail

#pragma once
/// \file
/// NCCL's own collectives (tutti::native on tutti::nccl), enqueued on the call's stream:
/// reductions through NCCL's type and op (detail/nccl/types.hpp), everything else as bytes;
/// gather, scatter and all-to-all as grouped ncclSend/ncclRecv where NCCL is older than 2.28,
/// all-to-allv always; barrier as an all-reduce of one word.

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <span>

#include "tutti/detail/call.hpp"
#include "tutti/detail/nccl/device.hpp"
#include "tutti/detail/nccl/state.hpp"
#include "tutti/detail/nccl/types.hpp"
#include "tutti/detail/wait.hpp"

namespace tutti::inline v0::detail {

inline void nccl_native_all_reduce(nccl_state& s, const call& c, const std::byte* in,
                                   std::byte* out, std::size_t n, clock::time_point d) {
  const auto red = nccl_reduction(c, s.rank);
  const ncclDataType_t type = red.first;
  const ncclRedOp_t op = red.second;
  s.run(c, d, "ncclAllReduce",
        [&](cudaStream_t on) { return ncclAllReduce(in, out, n, type, op, s.comm, on); });
}
inline void nccl_native_reduce(nccl_state& s, const call& c, const std::byte* in, std::byte* out,
                               std::size_t n, int root, clock::time_point d) {
  const auto red = nccl_reduction(c, s.rank);
  const ncclDataType_t type = red.first;
  const ncclRedOp_t op = red.second;
  s.run(c, d, "ncclReduce",
        [&](cudaStream_t on) { return ncclReduce(in, out, n, type, op, root, s.comm, on); });
}
inline void nccl_native_reduce_scatter(nccl_state& s, const call& c, const std::byte* in,
                                       std::byte* out, std::size_t n, clock::time_point d) {
  const auto red = nccl_reduction(c, s.rank);
  const ncclDataType_t type = red.first;
  const ncclRedOp_t op = red.second;
  s.run(c, d, "ncclReduceScatter",
        [&](cudaStream_t on) { return ncclReduceScatter(in, out, n, type, op, s.comm, on); });
}
inline void nccl_native_broadcast(nccl_state& s, const call& c, std::byte* buf, std::size_t n,
                                  int root, clock::time_point d) {
  s.run(c, d, "ncclBroadcast", [&](cudaStream_t on) {
    return ncclBroadcast(buf, buf, n * c.elem_size, ncclUint8, root, s.comm, on);
  });
}
inline void nccl_native_all_gather(nccl_state& s, const call& c, const std::byte* in,
                                   std::byte* out, std::size_t n, clock::time_point d) {
  s.run(c, d, "ncclAllGather", [&](cudaStream_t on) {
    return ncclAllGather(in, out, n * c.elem_size, ncclUint8, s.comm, on);
  });
}
inline void nccl_native_gather(nccl_state& s, const call& c, const std::byte* in, std::byte* out,
                               std::size_t n, int root, clock::time_point d) {
  const std::size_t bytes = n * c.elem_size;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
  s.run(c, d, "ncclGather",
        [&](cudaStream_t on) { return ncclGather(in, out, bytes, ncclUint8, root, s.comm, on); });
#else
  s.run(c, d, "ncclGather (grouped ncclSend/ncclRecv)", [&](cudaStream_t on) {
    return nccl_grouped([&] {
      if (s.rank == root)
        for (int q = 0; q < s.size; ++q)
          if (auto r = ncclRecv(out + static_cast<std::size_t>(q) * bytes, bytes, ncclUint8, q,
                                s.comm, on);
              r != ncclSuccess && r != ncclInProgress)
            return r;
      return ncclSend(in, bytes, ncclUint8, root, s.comm, on);
    });
  });
#endif
}
inline void nccl_native_scatter(nccl_state& s, const call& c, const std::byte* in, std::byte* out,
                                std::size_t n, int root, clock::time_point d) {
  const std::size_t bytes = n * c.elem_size;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
  s.run(c, d, "ncclScatter",
        [&](cudaStream_t on) { return ncclScatter(in, out, bytes, ncclUint8, root, s.comm, on); });
#else
  s.run(c, d, "ncclScatter (grouped ncclSend/ncclRecv)", [&](cudaStream_t on) {
    return nccl_grouped([&] {
      if (s.rank == root)
        for (int q = 0; q < s.size; ++q)
          if (auto r = ncclSend(in + static_cast<std::size_t>(q) * bytes, bytes, ncclUint8, q,
                                s.comm, on);
              r != ncclSuccess && r != ncclInProgress)
            return r;
      return ncclRecv(out, bytes, ncclUint8, root, s.comm, on);
    });
  });
#endif
}
inline void nccl_native_all_to_all(nccl_state& s, const call& c, const std::byte* in,
                                   std::byte* out, std::size_t n, clock::time_point d) {
  const std::size_t bytes = n * c.elem_size;
  in = nccl_apart(s, c, in, bytes * static_cast<std::size_t>(s.size), out,
                  bytes * static_cast<std::size_t>(s.size));
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
  s.run(c, d, "ncclAlltoAll",
        [&](cudaStream_t on) { return ncclAlltoAll(in, out, bytes, ncclUint8, s.comm, on); });
#else
  s.run(c, d, "ncclAlltoAll (grouped ncclSend/ncclRecv)", [&](cudaStream_t on) {
    return nccl_grouped([&] {
      for (int q = 0; q < s.size; ++q) {
        const auto at = static_cast<std::size_t>(q) * bytes;
        if (auto r = ncclSend(in + at, bytes, ncclUint8, q, s.comm, on);
            r != ncclSuccess && r != ncclInProgress)
          return r;
        if (auto r = ncclRecv(out + at, bytes, ncclUint8, q, s.comm, on);
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
inline void nccl_native_all_to_allv(nccl_state& s, const call& c, const std::byte* in,
                                    std::span<const std::size_t> sc, std::byte* out,
                                    std::span<const std::size_t> rc, clock::time_point d) {
  std::size_t in_bytes = 0, out_bytes = 0;
  for (const std::size_t k : sc) in_bytes += k * c.elem_size;
  for (const std::size_t k : rc) out_bytes += k * c.elem_size;
  in = nccl_apart(s, c, in, in_bytes, out, out_bytes);
  s.run(c, d, "all_to_allv (grouped ncclSend/ncclRecv)", [&](cudaStream_t on) {
    return nccl_grouped([&] {
      std::size_t sat = 0, rat = 0;
      for (int q = 0; q < s.size; ++q) {
        const auto qi = static_cast<std::size_t>(q);
        const std::size_t sb = sc[qi] * c.elem_size, rb = rc[qi] * c.elem_size;
        if (sb != 0)
          if (auto r = ncclSend(in + sat, sb, ncclUint8, q, s.comm, on);
              r != ncclSuccess && r != ncclInProgress)
            return r;
        if (rb != 0)
          if (auto r = ncclRecv(out + rat, rb, ncclUint8, q, s.comm, on);
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
inline void nccl_native_barrier(nccl_state& s, const call& c, clock::time_point d) {
  s.run(c, d, "ncclAllReduce (barrier)", [&](cudaStream_t on) {
    return ncclAllReduce(s.small, s.small, 1, ncclInt32, ncclSum, s.comm, on);
  });
}

}  // namespace tutti::inline v0::detail

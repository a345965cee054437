#pragma once
/// \file
/// tutti::nccl's point-to-point messages and call check: a message is posted (queued on the
/// caller's thread) and issued, grouped with every other posted one, in one
/// ncclGroupStart/ncclGroupEnd at the next wait; NCCL matches a pair's messages in posting
/// order, so tags are not supported. TUTTI_NCCL_CHECK's fingerprint all-gather lives here too.

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tutti/core/error.hpp"
#include "tutti/detail/call.hpp"
#include "tutti/detail/nccl/state.hpp"
#include "tutti/detail/wait.hpp"

namespace tutti::inline v0::detail {

/// Queues a message to or from `peer`; returns its id (ids count from 1). A zero-byte message
/// travels as one byte of the communicator's own.
inline std::uint64_t nccl_post(nccl_state& s, bool send, int peer, std::byte* buf,
                               std::size_t bytes, const call& c, space sp, std::uint64_t tag) {
  s.check_usable(c.name_str(), c.seq);
  if (sp == space::p2p && tag != 0)
    throw error(errc::invalid_argument, c.name_str(), c.seq, s.rank, peer,
                "tutti::nccl matches send and recv in posting order, as NCCL does: tags are "
                "not supported (pass tag 0)");
  // A zero-byte message still orders its two ranks (a dissemination barrier is made of them):
  // it travels as one byte of the communicator's own, sent from and received into bytes
  // nobody reads.
  if (bytes == 0) {
    buf = static_cast<std::byte*>(s.small) + (send ? 32 : 48);
    bytes = 1;
  }
  s.pending.push_back({send, peer, buf, bytes, s.stream_for(c)});
  return ++s.posted;
}

/// Issues every posted message in one NCCL group on the caller's thread, and settles the group
/// by `deadline`.
inline void nccl_flush(nccl_state& s, const call& c, clock::time_point deadline) {
  if (s.pending.empty()) return;
  const device_guard on(s.device);
  const ncclResult_t r = s.locked([&] {
    return nccl_grouped([&] {
      for (const auto& m : s.pending) {
        const ncclResult_t e = m.send
                                   ? ncclSend(m.buf, m.bytes, ncclUint8, m.peer, s.comm, m.stream)
                                   : ncclRecv(m.buf, m.bytes, ncclUint8, m.peer, s.comm, m.stream);
        if (e != ncclSuccess && e != ncclInProgress) return e;
      }
      return ncclSuccess;
    });
  });
  s.issued = s.posted;
  s.pending.clear();
  s.settle_or_throw(r, "ncclGroupEnd (ncclSend/ncclRecv)", c.name_str(), c.seq, deadline);
}

/// TUTTI_NCCL_CHECK: every rank's (head, count) through ncclAllGather, compared on the host.
inline void nccl_check_fingerprints(nccl_state& s, const call& c) {
  const auto deadline = clock::now() + s.timeout;
  const device_guard on(s.device);
  const std::uint64_t mine[2] = {c.fp.packed_head(), c.fp.count};
  std::vector<std::uint64_t> all(2 * static_cast<std::size_t>(s.size));
  std::uint64_t* dev = nullptr;
  const std::size_t bytes = all.size() * sizeof(std::uint64_t);
  if (auto r = cudaMallocAsync(reinterpret_cast<void**>(&dev), bytes + sizeof mine, s.stream);
      r != cudaSuccess)
    s.throw_cuda(r, "cudaMallocAsync", c.name_str(), c.seq);
  std::uint64_t* dev_mine = dev + all.size();
  if (auto r = cudaMemcpyAsync(dev_mine, mine, sizeof mine, cudaMemcpyHostToDevice, s.stream);
      r != cudaSuccess)
    s.throw_cuda(r, "cudaMemcpyAsync", c.name_str(), c.seq);
  s.settle_or_throw(s.locked([&] {
    return ncclAllGather(dev_mine, dev, sizeof mine, ncclUint8, s.comm, s.stream);
  }),
                    "ncclAllGather (fingerprints)", c.name_str(), c.seq, deadline);
  if (auto r = cudaMemcpyAsync(all.data(), dev, bytes, cudaMemcpyDeviceToHost, s.stream);
      r != cudaSuccess)
    s.throw_cuda(r, "cudaMemcpyAsync", c.name_str(), c.seq);
  (void)cudaFreeAsync(dev, s.stream);
  s.wait_event(s.record_on(s.stream, c), c.name_str(), c.seq, deadline);
  for (int q = 0; q < s.size; ++q) {
    const auto at = 2 * static_cast<std::size_t>(q);
    const fingerprint theirs = fingerprint::unpack(all[at], all[at + 1]);
    if (theirs != c.fp) {
      const std::string why = "rank " + std::to_string(s.rank) + " called " + c.fp.describe() +
                              ", rank " + std::to_string(q) + " called " + theirs.describe();
      s.abort(why);
      throw error(errc::mismatch, c.name_str(), c.seq, s.rank, q, why);
    }
  }
}

}  // namespace tutti::inline v0::detail

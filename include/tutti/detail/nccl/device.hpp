#pragma once
/// \file
/// tutti::nccl's device memory for tutti's own policies (ring, tree, recursive_halving): copies
/// and reductions on the GPU, ordered on the call's stream, with the kernels
/// tutti/transport/nccl.cuh registers, and the scratch they reuse across calls.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "tutti/core/error.hpp"
#include "tutti/core/ops.hpp"
#include "tutti/core/types.hpp"
#include "tutti/detail/call.hpp"
#include "tutti/detail/device_reduce.hpp"
#include "tutti/detail/nccl/state.hpp"

namespace tutti::inline v0::detail {

/// Raises errc::invalid_argument for a reduction no registered device kernel does: none of
/// that (type, op), or no kernels at all (nccl.cuh is in no .cu file of the program).
[[noreturn]] inline void nccl_no_kernel(const nccl_state& s, const call& c) {
  throw error(errc::invalid_argument, c.name_str(), c.seq, s.rank, -1,
              device_reducer_table().filled
                  ? "no device kernel reduces " + std::string(name(c.fp.type)) + " with " +
                        std::string(name(c.fp.op))
                  : "tutti's own policies on tutti::nccl reduce with device kernels: include "
                    "<tutti/transport/nccl.cuh> in a .cu file of this program (compiled by "
                    "nvcc), or use tutti::native");
}

/// dst = src on the GPU, ordered on the call's stream.
inline void nccl_device_copy(nccl_state& s, const call& c, void* dst, const void* src,
                             std::size_t bytes) {
  if (bytes == 0 || dst == src) return;
  const device_guard on(s.device);
  const cudaError_t r = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s.stream_for(c));
  if (r != cudaSuccess) s.throw_cuda(r, "cudaMemcpyAsync", c.name_str(), c.seq);
}
/// d = a op b over `n` elements, with the kernels tutti/transport/nccl.cuh registered.
inline void nccl_device_reduce(nccl_state& s, const call& c, void* d, const void* a, const void* b,
                               std::size_t n) {
  if (n == 0) return;
  const auto fn = device_reducer_table().find(c.fp.op, c.fp.type);
  if (fn == nullptr) nccl_no_kernel(s, c);
  const device_guard on(s.device);  // a launch goes to the current device's stream
  if (const int r = fn(d, a, b, n, s.stream_for(c)); r != 0)
    s.throw_cuda(static_cast<cudaError_t>(r), "device reduction kernel", c.name_str(), c.seq);
}
/// avg's final division on the GPU.
inline void nccl_device_finish(nccl_state& s, const call& c, void* x, std::size_t n) {
  if (c.fp.op != op_kind::avg || n == 0) return;
  const auto fn = device_reducer_table().find_divide(c.fp.type);
  if (fn == nullptr) nccl_no_kernel(s, c);
  const device_guard on(s.device);
  if (const int r = fn(x, n, s.size, s.stream_for(c)); r != 0)
    s.throw_cuda(static_cast<cudaError_t>(r), "device division kernel", c.name_str(), c.seq);
}
/// Device scratch of at least `bytes`, valid for the call (stream-ordered reuse).
/// Calls on different streams share it: a call on a stream other than the last user's waits
/// (on the GPU) for that call to finish first.
[[nodiscard]] inline std::byte* nccl_device_scratch(nccl_state& s, const call& c, std::size_t bytes,
                                                    bool staging) {
  const device_guard on(s.device);
  const cudaStream_t st = s.stream_for(c);
  if (s.scratch_stream != nullptr && s.scratch_stream != st && !s.scratch_in_use)
    if (const cudaError_t r = cudaStreamWaitEvent(st, s.scratch_done, 0); r != cudaSuccess)
      s.throw_cuda(r, "cudaStreamWaitEvent", c.name_str(), c.seq);
  s.scratch_stream = st;
  s.scratch_in_use = true;
  return static_cast<std::byte*>(
      staging ? s.grow(s.staging, s.staging_bytes, bytes, st, c.name_str(), c.seq)
              : s.grow(s.scratch, s.scratch_bytes, bytes, st, c.name_str(), c.seq));
}

/// `in`, or a copy of it in staging where it overlaps `out`: NCCL's all-to-all (and the
/// grouped sends and receives) have no in-place form.
[[nodiscard]] inline const std::byte* nccl_apart(nccl_state& s, const call& c, const std::byte* in,
                                                 std::size_t in_bytes, const std::byte* out,
                                                 std::size_t out_bytes) {
  const auto a = reinterpret_cast<std::uintptr_t>(in);
  const auto b = reinterpret_cast<std::uintptr_t>(out);
  if (in_bytes == 0 || out_bytes == 0 || a + in_bytes <= b || b + out_bytes <= a) return in;
  std::byte* copy = nccl_device_scratch(s, c, in_bytes, true);
  nccl_device_copy(s, c, copy, in, in_bytes);
  return copy;
}

}  // namespace tutti::inline v0::detail

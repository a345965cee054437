#pragma once
/// \file
/// tutti::bucketer over tutti::nccl: buckets in GPU memory, filled, cleared and written back
/// with asynchronous copies on the communicator's CUDA stream, so that they are ordered with
/// the bucket all-reduces on that stream (detail/bucket_memory.hpp has the host side).

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>

#include "tutti/core/error.hpp"
#include "tutti/detail/bucket_memory.hpp"

namespace tutti::inline v0::detail {

[[noreturn]] inline void bucket_cuda_failed(const char* what, cudaError_t e) {
  throw error(errc::transport_failure, "bucketer", 0, -1, -1,
              std::string(what) + " failed: " + cudaGetErrorString(e));
}

/// Zeroed GPU memory, freed with the object.
class device_bytes {
 public:
  device_bytes() = default;
  explicit device_bytes(std::size_t n) : n_(n) {
    if (n == 0) return;
    if (const cudaError_t e = cudaMalloc(&p_, n); e != cudaSuccess) {
      p_ = nullptr;
      bucket_cuda_failed("cudaMalloc", e);
    }
    if (const cudaError_t e = cudaMemset(p_, 0, n); e != cudaSuccess)
      bucket_cuda_failed("cudaMemset", e);
  }
  device_bytes(device_bytes&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  device_bytes& operator=(device_bytes&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  device_bytes(const device_bytes&) = delete;
  device_bytes& operator=(const device_bytes&) = delete;
  ~device_bytes() { release(); }

  [[nodiscard]] std::byte* data() const noexcept { return static_cast<std::byte*>(p_); }
  [[nodiscard]] std::size_t size() const noexcept { return n_; }

 private:
  void release() noexcept {
    if (p_ != nullptr) (void)cudaFree(p_);  // waits for the device: queued copies finish first
    p_ = nullptr;
  }
  void* p_ = nullptr;
  std::size_t n_ = 0;
};

template <>
struct bucket_memory<true> {
  using bytes = device_bytes;
  [[nodiscard]] static bytes allocate(std::size_t n, void* /*stream*/) { return bytes(n); }
  static void copy(void* dst, const void* src, std::size_t n, void* stream) {
    if (n == 0) return;
    if (const cudaError_t e =
            cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, static_cast<cudaStream_t>(stream));
        e != cudaSuccess)
      bucket_cuda_failed("cudaMemcpyAsync", e);
  }
  static void zero(void* dst, std::size_t n, void* stream) {
    if (n == 0) return;
    if (const cudaError_t e = cudaMemsetAsync(dst, 0, n, static_cast<cudaStream_t>(stream));
        e != cudaSuccess)
      bucket_cuda_failed("cudaMemsetAsync", e);
  }
  /// Copies between host and device memory and waits for it (small exchanges: which
  /// gradients were used, who trains, the ready order).
  static void copy_now(void* dst, const void* src, std::size_t n, void* stream) {
    copy(dst, src, n, stream);
    if (const cudaError_t e = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
        e != cudaSuccess)
      bucket_cuda_failed("cudaStreamSynchronize", e);
  }
};

}  // namespace tutti::inline v0::detail

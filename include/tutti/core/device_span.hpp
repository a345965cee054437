#pragma once
/// \file
/// tutti::device_span<T>: a view of `count` elements of T in GPU memory, and
/// tutti::stream_ref: the CUDA stream a device collective runs on. Neither needs CUDA headers;
/// communicators over device-memory transports (tutti::nccl) take these instead of std::span,
/// so a host buffer handed to an NCCL communicator is a compile error, not a crash.

#include <cstddef>
#include <type_traits>

struct CUstream_st;  // CUDA's stream type: cudaStream_t is CUstream_st*

namespace tutti::inline v0 {

/// A non-owning view of device memory (cudaMalloc, cudaMallocAsync, ncclMemAlloc...). tutti
/// never dereferences it on the host.
template <class T>
class device_span {
 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;

  constexpr device_span() noexcept = default;
  constexpr device_span(T* data, std::size_t count) noexcept : data_(data), size_(count) {}
  /// device_span<T> converts to device_span<const T>.
  template <class U>
    requires std::is_convertible_v<U (*)[], T (*)[]>
  constexpr device_span(device_span<U> other) noexcept  // NOLINT(google-explicit-constructor)
      : data_(other.data()), size_(other.size()) {}

  [[nodiscard]] constexpr T* data() const noexcept { return data_; }
  [[nodiscard]] constexpr std::size_t size() const noexcept { return size_; }
  [[nodiscard]] constexpr std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  [[nodiscard]] constexpr bool empty() const noexcept { return size_ == 0; }
  /// `count` elements from `offset` (the caller keeps them within the view).
  [[nodiscard]] constexpr device_span subspan(std::size_t offset,
                                              std::size_t count) const noexcept {
    return {data_ + offset, count};
  }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

/// The CUDA stream a device collective is ordered on: converts from a cudaStream_t. The default
/// (null) means the communicator's own stream; a work handle or a blocking call completes when
/// the collective's work on that stream has finished.
struct stream_ref {
  void* handle = nullptr;
  constexpr stream_ref() noexcept = default;
  constexpr stream_ref(CUstream_st* s) noexcept  // NOLINT(google-explicit-constructor)
      : handle(static_cast<void*>(s)) {}
};

}  // namespace tutti::inline v0

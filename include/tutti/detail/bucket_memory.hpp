#pragma once
/// \file
/// Where tutti::bucketer keeps its buckets and how it moves bytes in and out of them:
/// bucket_memory<false> on the host (this file); bucket_memory<true> in GPU memory, on the
/// communicator's CUDA stream (detail/nccl/buckets.hpp, which tutti/transport/nccl.hpp
/// includes). And what it records of each gradient (bucket_slot) and bucket (bucket_state).

#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <vector>

#include "tutti/core/types.hpp"
#include "tutti/work.hpp"

namespace tutti::inline v0::detail {

/// 64-byte aligned, zero-initialised bytes.
class aligned_bytes {
 public:
  aligned_bytes() = default;
  explicit aligned_bytes(std::size_t n)
      : p_(n == 0 ? nullptr : static_cast<std::byte*>(::operator new(n, align))), n_(n) {
    if (n_ != 0) std::memset(p_.get(), 0, n_);
  }
  [[nodiscard]] std::byte* data() const noexcept { return p_.get(); }
  [[nodiscard]] std::size_t size() const noexcept { return n_; }

 private:
  static constexpr std::align_val_t align{64};
  struct release {
    void operator()(std::byte* p) const noexcept { ::operator delete(p, align); }
  };
  std::unique_ptr<std::byte, release> p_;
  std::size_t n_ = 0;
};

template <bool Device>
struct bucket_memory;

template <>
struct bucket_memory<false> {
  using bytes = aligned_bytes;
  [[nodiscard]] static bytes allocate(std::size_t n, void* /*stream*/) { return bytes(n); }
  static void copy(void* dst, const void* src, std::size_t n, void* /*stream*/) noexcept {
    if (n != 0) std::memcpy(dst, src, n);
  }
  static void zero(void* dst, std::size_t n, void* /*stream*/) noexcept {
    if (n != 0) std::memset(dst, 0, n);
  }
};

/// A registered gradient: its element type and count, and where it lives.
struct bucket_slot {
  dtype type;
  std::size_t elem;
  std::size_t count;
  void* external;  // null: owned by the bucket
  std::size_t bucket = 0;
  std::size_t offset = 0;  // bytes into the bucket
};

/// A bucket: its gradients, its bytes (on the GPU where `Device`), and its all-reduce in flight.
template <bool Device>
struct bucket_state {
  dtype type = dtype::float32;
  std::size_t elem = 0;
  std::size_t count = 0;
  std::size_t bytes = 0;
  std::vector<std::size_t> grads;
  typename bucket_memory<Device>::bytes storage;
  typename bucket_memory<Device>::bytes wire;  // the 16-bit copy a compressed bucket all-reduces
  std::size_t pending = 0;                     // gradients not yet ready this iteration
  tutti::work work;
  std::exception_ptr error;
  bool divide_after = false;  // summed: divide by the active ranks once reduced
};

}  // namespace tutti::inline v0::detail

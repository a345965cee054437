#pragma once
/// \file
/// What a collective's buffer argument is: std::span<T> (host memory) or tutti::device_span<T>
/// (GPU memory). tutti::communicator writes every collective once over these; the checks here
/// tie a buffer to the transport's memory space, with a sentence where they do not match.

#include <cstddef>
#include <span>
#include <type_traits>

#include "tutti/core/device_span.hpp"
#include "tutti/core/types.hpp"
#include "tutti/transport/concepts.hpp"

namespace tutti::inline v0::detail {

template <class B>
struct buffer_traits {
  static constexpr bool is_buffer = false;
};
template <class T, std::size_t Extent>
struct buffer_traits<std::span<T, Extent>> {
  static constexpr bool is_buffer = true;
  using element_type = T;
  using memory_space = host_memory;
};
template <class T>
struct buffer_traits<device_span<T>> {
  static constexpr bool is_buffer = true;
  using element_type = T;
  using memory_space = cuda_device_memory;
};

/// A view of elements in some memory space: std::span<T> or tutti::device_span<T> of a
/// tutti::element T (const or not).
template <class B>
concept buffer = buffer_traits<B>::is_buffer && element<typename buffer_traits<B>::element_type>;

/// A buffer a collective may write: its elements are not const.
template <class B>
concept writable_buffer = buffer<B> && !std::is_const_v<typename buffer_traits<B>::element_type>;

/// The element type of buffer B, without const: what the fingerprint and the reduction see.
template <buffer B>
using value_of = std::remove_const_t<typename buffer_traits<B>::element_type>;

/// A collective's input beside an output std::span<T>: T is deduced from the output alone, so
/// a std::span<T> (not const) passes as an input too.
template <class T>
using input_span = std::type_identity_t<std::span<const T>>;

/// The buffer type of memory space `Space` for elements T.
template <class Space, class T>
using span_in =
    std::conditional_t<std::is_same_v<Space, cuda_device_memory>, device_span<T>, std::span<T>>;

/// A host-memory communicator's stand-in for the CUDA stream argument: `{}` (the default) is
/// all it takes; a stream handed to it is a compile error that says why, not silently ignored.
struct no_stream {
  constexpr no_stream() noexcept = default;
  template <class S>
    requires std::is_convertible_v<S, stream_ref>
  constexpr no_stream(S) noexcept {  // NOLINT(google-explicit-constructor): to say why not
    static_assert(!std::is_convertible_v<S, stream_ref>,
                  "tutti: this communicator's transport works on host memory, where collectives "
                  "run in the calling thread or on the progress thread, not on a CUDA stream: "
                  "leave out the stream argument");
  }
};

/// The stream argument of a collective in memory space `Space`.
template <class Space>
using stream_in =
    std::conditional_t<std::is_same_v<Space, cuda_device_memory>, stream_ref, no_stream>;

/// Checks at compile time that buffer B lives in `Space`, the transport's memory space.
template <class Space, class B>
constexpr void check_space() noexcept {
  constexpr bool device_comm = std::is_same_v<Space, cuda_device_memory>;
  constexpr bool device_buf =
      std::is_same_v<typename buffer_traits<B>::memory_space, cuda_device_memory>;
  static_assert(!device_comm || device_buf,
                "tutti: this communicator's transport (tutti::nccl) works on GPU memory: pass "
                "tutti::device_span<T>(device_pointer, count), not std::span (host memory)");
  static_assert(device_comm || !device_buf,
                "tutti: tutti::device_span is GPU memory; this communicator's transport works on "
                "host memory: pass std::span");
}

/// Checks that a collective's input and output hold the same element type.
template <class In, class Out>
constexpr void check_same_elements() noexcept {
  static_assert(std::is_same_v<value_of<In>, value_of<Out>>,
                "tutti: a collective's input and output buffers must hold the same element type; "
                "convert the data first (tutti::half and tutti::bfloat16 convert from float)");
}

/// Buffer B of `Space` as a std::span of its elements: the pointer and count the byte-level
/// machinery works on (which never dereferences device memory on the host).
template <class Space, class B>
[[nodiscard]] constexpr std::span<typename buffer_traits<B>::element_type> view(B b) noexcept {
  check_space<Space, B>();
  return {b.data(), b.size()};
}

/// The cudaStream_t a collective is ordered on (null: the transport's own, or host memory).
[[nodiscard]] constexpr void* stream_handle(stream_ref s) noexcept { return s.handle; }
[[nodiscard]] constexpr void* stream_handle(no_stream) noexcept { return nullptr; }

}  // namespace tutti::inline v0::detail

#pragma once
/// \file
/// Reduce kernels: contiguous loops the compiler vectorizes, one per (op, element type).
/// Element types enter the byte-moving code only here, through a type-erased `reducer`.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "tutti/core/convert16.hpp"
#include "tutti/core/ops.hpp"
#include "tutti/core/types.hpp"

namespace tutti::inline v0::detail {

template <class T>
inline constexpr bool is_float16 = std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;

/// The type arithmetic runs in: float for 16-bit floats, an unsigned type of at least 32 bits
/// for integer sum and product (wrap-around instead of undefined overflow), T otherwise.
template <op_kind K, class T>
using compute_t = std::conditional_t<
    is_float16<T>, float,
    std::conditional_t<
        std::is_integral_v<T> && !std::is_same_v<T, bool> &&
            (K == op_kind::sum || K == op_kind::prod || K == op_kind::avg),
        std::conditional_t<(sizeof(T) < 4), std::uint32_t,
                           std::make_unsigned_t<std::conditional_t<
                               std::is_integral_v<T> && !std::is_same_v<T, bool>, T, int>>>,
        T>>;

template <op_kind K, class C>
[[nodiscard]] constexpr C combine(C a, C b) noexcept {
  if constexpr (K == op_kind::sum || K == op_kind::avg)
    return static_cast<C>(a + b);
  else if constexpr (K == op_kind::prod)
    return static_cast<C>(a * b);
  else if constexpr (K == op_kind::min)
    return b < a ? b : a;
  else if constexpr (K == op_kind::max)
    return a < b ? b : a;
  else if constexpr (K == op_kind::band)
    return static_cast<C>(a & b);
  else if constexpr (K == op_kind::bor)
    return static_cast<C>(a | b);
  else
    return static_cast<C>(a ^ b);
}

/// d[i] = a[i] op b[i]. `d` may alias `a` or `b` exactly (element for element), never partly.
template <op_kind K, class T>
void reduce_kernel(T* d, const T* a, const T* b, std::size_t n) noexcept {
  using c = compute_t<K, T>;
  if constexpr (is_float16<T>) {
    // Through float in blocks: the block converters give exactly the bits of element-wise
    // T(float) conversions, and the loop, combine included, is built for the best ISA the CPU
    // has (see combine_via_float).
    combine_via_float(d, a, b, n, [](float x, float y) { return combine<K, float>(x, y); });
  } else if (d == a) {
    T* __restrict out = d;
    const T* __restrict in = b;
    for (std::size_t i = 0; i < n; ++i)
      out[i] = static_cast<T>(combine<K, c>(static_cast<c>(out[i]), static_cast<c>(in[i])));
  } else {
    for (std::size_t i = 0; i < n; ++i)
      d[i] = static_cast<T>(combine<K, c>(static_cast<c>(a[i]), static_cast<c>(b[i])));
  }
}

/// x[i] = x[i] / divisor, for avg: integer division for integers, through float for 16-bit.
template <class T>
void divide_kernel(T* x, std::size_t n, int divisor) noexcept {
  if constexpr (is_float16<T>) {
    const auto div = static_cast<float>(divisor);
    combine_via_float(x, x, static_cast<const T*>(nullptr), n, [div](float v) { return v / div; });
  } else if constexpr (std::is_floating_point_v<T>) {
    const auto div = static_cast<T>(divisor);
    for (std::size_t i = 0; i < n; ++i) x[i] = x[i] / div;
  } else {
    // Divide in a 64-bit type: the world size need not fit in T (int8 at 128 ranks).
    using wide = std::conditional_t<std::is_signed_v<T>, long long, unsigned long long>;
    const auto div = static_cast<wide>(divisor);
    for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<T>(static_cast<wide>(x[i]) / div);
  }
}

/// A type-erased reduction: what byte-moving code needs to combine two buffers.
struct reducer {
  void (*combine_fn)(void* d, const void* a, const void* b, std::size_t n) noexcept = nullptr;
  void (*divide_fn)(void* x, std::size_t n, int divisor) noexcept = nullptr;
  std::size_t elem_size = 1;
  op_kind op = op_kind::none;

  /// d = a op b over `n` elements.
  void operator()(void* d, const void* a, const void* b, std::size_t n) const noexcept {
    if (n != 0) combine_fn(d, a, b, n);
  }
  /// Applies avg's final division by the world size; a no-op for every other op.
  void finish(void* x, std::size_t n, int world) const noexcept {
    if (op == op_kind::avg && n != 0) divide_fn(x, n, world);
  }
};

template <op_kind K, class T>
[[nodiscard]] constexpr reducer make_reducer() noexcept {
  reducer r;
  r.combine_fn = [](void* d, const void* a, const void* b, std::size_t n) noexcept {
    reduce_kernel<K, T>(static_cast<T*>(d), static_cast<const T*>(a), static_cast<const T*>(b), n);
  };
  if constexpr (K == op_kind::avg)
    r.divide_fn = [](void* x, std::size_t n, int divisor) noexcept {
      divide_kernel<T>(static_cast<T*>(x), n, divisor);
    };
  r.elem_size = sizeof(T);
  r.op = K;
  return r;
}

}  // namespace tutti::inline v0::detail

#pragma once
/// \file
/// CUDA kernels behind tutti/detail/device_reduce.hpp's table: d = a op b and avg's division,
/// one kernel per (op, element type) that tutti::reducible admits, with the exact arithmetic of
/// the host kernels in tutti/core/reduce.hpp (integer sum and product wrap around, 16-bit
/// floats go through float and round to nearest even, integer avg divides with truncation).
/// Results are bitwise identical to the host kernels for every input that is not a NaN; NaN
/// payloads may differ (the GPU returns its canonical NaN, as NCCL's kernels do). The
/// arithmetic uses the explicitly rounded intrinsics (__fadd_rn, __fdiv_rn, ...), so
/// --use_fast_math cannot turn it into contractions or approximate division; -ftz=true would
/// still flush float subnormals.
///
/// Only nvcc compiles this header; include it through tutti/transport/nccl.cuh.
///
/// Design: the kernels are bound by memory bandwidth. Each thread moves 16-byte vectors, four
/// per operand per loop trip (all loads issued before any store, so enough bytes are in
/// flight to saturate HBM), over a grid-stride loop on a grid of
/// `sm_count * blocks_per_sm` blocks of `block_threads` threads (full occupancy, cached per
/// device). The vector path needs d, a and b to share their offset modulo 16 bytes: the few
/// elements before the first 16-byte boundary and after the last whole vector are done one
/// by one in the same launch. Pointers with different offsets take an element-wise
/// grid-stride loop (still coalesced, only slower for small elements).

#ifndef __CUDACC__
#error \
    "tutti/detail/cuda_reduce.cuh holds CUDA kernels: include it (through tutti/transport/nccl.cuh) only from .cu files compiled by nvcc"
#else

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "tutti/core/ops.hpp"
#include "tutti/core/reduce.hpp"
#include "tutti/core/types.hpp"
#include "tutti/detail/device_reduce.hpp"

namespace tutti::inline v0::detail::cuda {

/// Launch shape: 256 threads, 8 blocks per SM (2048 threads: full occupancy on sm_80/sm_90).
inline constexpr int block_threads = 256;
inline constexpr int blocks_per_sm = 8;
/// 16-byte vectors in flight per operand and thread in one loop trip.
inline constexpr int unroll = 4;
inline constexpr std::size_t vector_bytes = 16;

template <class... Ts>
struct type_list {};

/// The element types with a device form (every tutti element type but long double).
using device_element_types =
    type_list<std::int8_t, std::uint8_t, std::int16_t, std::uint16_t, std::int32_t, std::uint32_t,
              std::int64_t, std::uint64_t, half, bfloat16, float, double, bool, char>;

/// How a tutti element type is stored on the device: 16-bit floats as their raw bits.
template <class T>
using storage_t = std::conditional_t<is_float16<T>, std::uint16_t, T>;

/// Sixteen bytes of elements, loaded and stored as one vector.
template <class S>
struct alignas(vector_bytes) pack {
  static constexpr int size = static_cast<int>(vector_bytes / sizeof(S));
  S v[size];
};

/// Exact conversions between a 16-bit float's bits and float (CUDA's round-to-nearest-even
/// narrowing, the same rounding as tutti::half and tutti::bfloat16).
template <class T>
struct float16_codec;

template <>
struct float16_codec<half> {
  __device__ static float widen(std::uint16_t b) { return __half2float(__ushort_as_half(b)); }
  __device__ static std::uint16_t narrow(float f) { return __half_as_ushort(__float2half_rn(f)); }
  // Two at a time: one cvt.rn.f16x2.f32 on sm_80 and later.
  __device__ static void narrow2(float lo, float hi, std::uint16_t& out_lo, std::uint16_t& out_hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    out_lo = __half_as_ushort(__low2half(h));
    out_hi = __half_as_ushort(__high2half(h));
  }
};

template <>
struct float16_codec<bfloat16> {
  __device__ static float widen(std::uint16_t b) {
    return __bfloat162float(__ushort_as_bfloat16(b));
  }
  __device__ static std::uint16_t narrow(float f) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
  }
  __device__ static void narrow2(float lo, float hi, std::uint16_t& out_lo, std::uint16_t& out_hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    out_lo = __bfloat16_as_ushort(__low2bfloat16(h));
    out_hi = __bfloat16_as_ushort(__high2bfloat16(h));
  }
};

/// `combine<K>` of core/reduce.hpp in device code: the same expressions, with IEEE-rounded
/// intrinsics for float and double sum and product.
template <op_kind K, class C>
__device__ __forceinline__ C device_combine(C a, C b) {
  if constexpr ((K == op_kind::sum || K == op_kind::avg) && std::is_same_v<C, float>)
    return __fadd_rn(a, b);
  else if constexpr ((K == op_kind::sum || K == op_kind::avg) && std::is_same_v<C, double>)
    return __dadd_rn(a, b);
  else if constexpr (K == op_kind::prod && std::is_same_v<C, float>)
    return __fmul_rn(a, b);
  else if constexpr (K == op_kind::prod && std::is_same_v<C, double>)
    return __dmul_rn(a, b);
  else if constexpr (K == op_kind::sum || K == op_kind::avg)
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

/// d = a op b, element by element and sixteen bytes at a time.
template <op_kind K, class T>
struct combine_op {
  using storage = storage_t<T>;
  static constexpr bool binary = true;

  __device__ __forceinline__ storage operator()(storage a, storage b) const {
    if constexpr (is_float16<T>) {
      using codec = float16_codec<T>;
      return codec::narrow(device_combine<K, float>(codec::widen(a), codec::widen(b)));
    } else {
      using c = compute_t<K, T>;
      return static_cast<T>(device_combine<K, c>(static_cast<c>(a), static_cast<c>(b)));
    }
  }

  __device__ __forceinline__ pack<storage> operator()(const pack<storage>& a,
                                                      const pack<storage>& b) const {
    pack<storage> r;
    if constexpr (is_float16<T>) {
      using codec = float16_codec<T>;
#pragma unroll
      for (int i = 0; i < pack<storage>::size; i += 2)
        codec::narrow2(device_combine<K, float>(codec::widen(a.v[i]), codec::widen(b.v[i])),
                       device_combine<K, float>(codec::widen(a.v[i + 1]), codec::widen(b.v[i + 1])),
                       r.v[i], r.v[i + 1]);
    } else {
#pragma unroll
      for (int i = 0; i < pack<storage>::size; ++i) r.v[i] = (*this)(a.v[i], b.v[i]);
    }
    return r;
  }
};

/// x = x / divisor, avg's final step, exactly like core/reduce.hpp's divide_kernel.
template <class T>
struct divide_op {
  using storage = storage_t<T>;
  static constexpr bool binary = false;
  int divisor;

  __device__ __forceinline__ storage operator()(storage x, storage /*unused*/ = {}) const {
    if constexpr (is_float16<T>) {
      using codec = float16_codec<T>;
      return codec::narrow(__fdiv_rn(codec::widen(x), static_cast<float>(divisor)));
    } else if constexpr (std::is_same_v<T, float>) {
      return __fdiv_rn(x, static_cast<float>(divisor));
    } else if constexpr (std::is_same_v<T, double>) {
      return __ddiv_rn(x, static_cast<double>(divisor));
    } else {
      // The host divides in 64 bits; for a positive divisor and T of at most 32 bits the
      // 32-bit division gives the same quotient and is several times cheaper on the GPU.
      if constexpr (sizeof(T) <= 4) {
        if (divisor > 0) {
          if constexpr (std::is_signed_v<T>)
            return static_cast<T>(static_cast<int>(x) / divisor);
          else
            return static_cast<T>(static_cast<unsigned>(x) / static_cast<unsigned>(divisor));
        }
      }
      using wide = std::conditional_t<std::is_signed_v<T>, long long, unsigned long long>;
      return static_cast<T>(static_cast<wide>(x) / static_cast<wide>(divisor));
    }
  }

  __device__ __forceinline__ pack<storage> operator()(const pack<storage>& x,
                                                      const pack<storage>& /*unused*/) const {
    pack<storage> r;
#pragma unroll
    for (int i = 0; i < pack<storage>::size; ++i) r.v[i] = (*this)(x.v[i]);
    return r;
  }
};

/// d[i] = op(a[i], b[i]) for i < n (b unused for a unary op). Elements [0, head) and those
/// after the last whole vector go one by one; the rest as 16-byte vectors, which requires
/// d + head, a + head and b + head to be 16-byte aligned (the launcher passes head == n
/// otherwise). d may alias a or b exactly: each element is read and then written by the same
/// thread, and no other thread touches it.
template <class Op>
__global__ void __launch_bounds__(block_threads)
    elementwise_kernel(typename Op::storage* d, const typename Op::storage* a,
                       const typename Op::storage* b, std::size_t n, std::size_t head, Op op) {
  using storage = typename Op::storage;
  using vec = pack<storage>;
  constexpr auto per_vec = static_cast<std::size_t>(vec::size);

  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t vectors = (n - head) / per_vec;
  const std::size_t tail = head + vectors * per_vec;

  auto scalar = [&](std::size_t i) {
    if constexpr (Op::binary)
      d[i] = op(a[i], b[i]);
    else
      d[i] = op(a[i]);
  };
  for (std::size_t i = tid; i < head; i += stride) scalar(i);
  for (std::size_t i = tail + tid; i < n; i += stride) scalar(i);

  vec* dv = reinterpret_cast<vec*>(d + head);
  const vec* av = reinterpret_cast<const vec*>(a + head);
  const vec* bv = Op::binary ? reinterpret_cast<const vec*>(b + head) : av;
  std::size_t i = tid;
  for (; i + (unroll - 1) * stride < vectors; i += unroll * stride) {
    vec x[unroll];
    vec y[unroll];
#pragma unroll
    for (int u = 0; u < unroll; ++u) {
      x[u] = av[i + u * stride];
      if constexpr (Op::binary) y[u] = bv[i + u * stride];
    }
#pragma unroll
    for (int u = 0; u < unroll; ++u) dv[i + u * stride] = op(x[u], Op::binary ? y[u] : x[u]);
  }
  for (; i < vectors; i += stride) {
    const vec x = av[i];
    dv[i] = op(x, Op::binary ? bv[i] : x);
  }
}

/// The grid for the current device: full occupancy, SM count looked up once per device.
[[nodiscard]] inline unsigned max_blocks() noexcept {
  constexpr int max_devices = 64;
  static std::atomic<int> sm_counts[max_devices]{};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= max_devices) {
    static_cast<void>(cudaGetLastError());  // leave no error behind for the launch's check
    return 132U * blocks_per_sm;
  }
  int sms = sm_counts[device].load(std::memory_order_relaxed);
  if (sms == 0) {
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        sms <= 0) {
      static_cast<void>(cudaGetLastError());
      sms = 132;
    }
    sm_counts[device].store(sms, std::memory_order_relaxed);
  }
  return static_cast<unsigned>(sms) * blocks_per_sm;
}

[[nodiscard]] inline std::uintptr_t address(const void* p) noexcept {
  return reinterpret_cast<std::uintptr_t>(p);
}

/// Launches `op` over n elements; returns the launch's cudaError_t as an int.
template <class Op>
[[nodiscard]] int launch(Op op, void* d, const void* a, const void* b, std::size_t n,
                         void* stream) noexcept {
  if (n == 0) return 0;
  using storage = typename Op::storage;
  constexpr std::size_t per_vec = vector_bytes / sizeof(storage);
  const std::uintptr_t offset = address(d) % vector_bytes;
  const bool vectorizable = offset % sizeof(storage) == 0 && address(a) % vector_bytes == offset &&
                            (!Op::binary || address(b) % vector_bytes == offset);
  std::size_t head = n;
  if (vectorizable) head = offset == 0 ? 0 : std::min(n, (vector_bytes - offset) / sizeof(storage));
  // One thread per vector (or per element on the element-wise path), at most a full grid.
  const std::size_t items = vectorizable ? std::max<std::size_t>((n - head) / per_vec, 1) : n;
  const std::size_t wanted = (items + block_threads - 1) / block_threads;
  const auto blocks = static_cast<unsigned>(std::min<std::size_t>(wanted, max_blocks()));
  // cudaGetLastError reports the thread's last error, not the launch's: drop an earlier one (a
  // cudaErrorNotReady from polling an event, a caller's failed call) so it is not taken for it.
  static_cast<void>(cudaGetLastError());
  elementwise_kernel<Op><<<blocks, block_threads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<storage*>(d), static_cast<const storage*>(a),
      static_cast<const storage*>(Op::binary ? b : a), n, head, op);
  return static_cast<int>(cudaGetLastError());
}

/// A device_combine_fn: d = a op b for op K on element type T.
template <op_kind K, class T>
int launch_combine(void* d, const void* a, const void* b, std::size_t n, void* stream) noexcept {
  return launch(combine_op<K, T>{}, d, a, b, n, stream);
}

/// A device_divide_fn: x /= divisor on element type T.
template <class T>
int launch_divide(void* x, std::size_t n, int divisor, void* stream) noexcept {
  return launch(divide_op<T>{divisor}, x, x, nullptr, n, stream);
}

template <op_kind K, class T>
void fill_pair(device_reducers& r) noexcept {
  if constexpr (op_accepts<K, T>()) {
    r.combine[static_cast<std::size_t>(K)][static_cast<std::size_t>(dtype_of<T>)] =
        &launch_combine<K, T>;
    if constexpr (K == op_kind::avg)
      r.divide[static_cast<std::size_t>(dtype_of<T>)] = &launch_divide<T>;
  }
}

template <op_kind K, class... Ts>
void fill_op(device_reducers& r, type_list<Ts...> /*unused*/) noexcept {
  (fill_pair<K, Ts>(r), ...);
}

// op_kind::none is 0; the reductions are 1 .. op_kind_count - 1.
template <std::size_t... I>
void fill_ops(device_reducers& r, std::index_sequence<I...> /*unused*/) noexcept {
  (fill_op<static_cast<op_kind>(I + 1)>(r, device_element_types{}), ...);
}

}  // namespace tutti::inline v0::detail::cuda

namespace tutti::inline v0::detail {

/// Registers a kernel for every (op, element type) pair that tutti::reducible admits and the
/// device can hold (all but long double), and the division for avg; sets `filled`.
inline void fill_device_reducers(device_reducers& r) noexcept {
  cuda::fill_ops(r, std::make_index_sequence<op_kind_count - 1>{});
  r.filled = true;
}

}  // namespace tutti::inline v0::detail

#endif  // __CUDACC__

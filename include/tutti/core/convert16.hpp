#pragma once

/// \file
/// Block conversions between the 16-bit float types (`half`, `bfloat16`) and `float`, and the
/// loop the reduce kernels run them in. Every function here gives bit for bit the results of
/// the scalar conversions in `half.hpp` and `bfloat16.hpp` (round to nearest, ties to even;
/// NaNs made quiet with sign and high payload kept; subnormals exact; overflow to infinity),
/// whatever the rounding mode and the flush-to-zero / denormals-are-zero settings.
///
/// Layers:
/// - `*_lane`: one element, branch-free, so that GCC and Clang vectorize loops over them at the
///   baseline ISA (SSE2 on x86-64) or any other; `constexpr`.
/// - `portable::convert_to_float` / `portable::convert_from_float`: loops over the lanes.
/// - `convert_to_float` / `convert_from_float`: the block converters to call. On x86-64 with
///   GCC or Clang they pick, once, at run time, the best `simd_level` the CPU has: F16C for
///   `half`, AVX2 or AVX-512 builds of the portable loops for `bfloat16`; elsewhere the
///   portable loops.
/// - `combine_via_float`: `d[i] = T(op(float(a[i]), float(b[i])))` in blocks through float
///   arrays, the whole loop (conversions and `op`) built for that level.
///
/// Unlike the scalar conversions, the block conversions may set floating-point status flags
/// (inexact; invalid for signaling NaNs), as the arithmetic around them does anyway; results
/// never depend on them.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "tutti/core/bfloat16.hpp"
#include "tutti/core/half.hpp"

#if defined(__GNUC__) || defined(__clang__)
// Inlines a loop into its caller even at -O1, so that it is vectorized for the caller's ISA.
#define TUTTI_DETAIL_ALWAYS_INLINE __attribute__((always_inline)) inline
#else
#define TUTTI_DETAIL_ALWAYS_INLINE inline
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define TUTTI_DETAIL_X86_DISPATCH 1
#define TUTTI_DETAIL_TARGET_AVX2 __attribute__((target("avx2,f16c")))
#define TUTTI_DETAIL_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c")))
#else
#define TUTTI_DETAIL_X86_DISPATCH 0
#endif

namespace tutti::inline v0::detail {

// The lanes below are written for auto-vectorization:
// - the half lanes, which use floating-point operations, select between their cases with bit
//   masks rather than `?:`, `&&` or `||`: those become branches, and GCC (which by default
//   does not speculate floating-point operations, as they might trap) then neither turns them
//   back into selects nor vectorizes;
// - the 16-bit value sits in the high half of a 32-bit lane until the very end, so the compiler
//   cannot narrow the arithmetic to 16-bit lanes, which would cost a repacking of every
//   intermediate (SSE2 has no cheap 32 -> 16 bit pack).

/// All ones if `c`, else zero.
[[nodiscard]] constexpr std::uint32_t lane_mask(bool c) noexcept {
  return 0U - static_cast<std::uint32_t>(c);
}

/// `a` where `mask` is set, `b` elsewhere.
[[nodiscard]] constexpr std::uint32_t lane_select(std::uint32_t mask, std::uint32_t a,
                                                  std::uint32_t b) noexcept {
  return (a & mask) | (b & ~mask);
}

/// binary16 bits `h` (in the low 16 bits) -> binary32 bits; the same result as
/// `binary16_to_binary32_bits`, without branches.
[[nodiscard]] constexpr std::uint32_t half_to_float_lane(std::uint32_t h) noexcept {
  const std::uint32_t x = (h & 0xFFFFU) << 16;
  const std::uint32_t sign = x & 0x80000000U;
  const std::uint32_t em = x & 0x7FFF0000U;  // exponent and mantissa
  const auto sem = static_cast<std::int32_t>(em);
  // Normal: rebias the exponent (15 -> 127). Infinity and NaN: all-ones exponent, quiet bit set
  // for NaNs (a no-op for quiet ones), payload kept.
  const std::uint32_t normal = (em >> 3) + (112U << 23);
  const std::uint32_t special =
      (em >> 3) | 0x7F800000U | (lane_mask(sem > 0x7C000000) & 0x00400000U);
  // Subnormal or zero: |h| = (em >> 16) * 2^-24 = em * 2^-40, computed exactly in float
  // arithmetic (em has at most 15 significant bits, so it converts exactly; the scaling by a
  // power of two is exact and the result, if not zero, is a normal float), so neither the
  // rounding mode nor flush-to-zero can affect it.
  const std::uint32_t sub = std::bit_cast<std::uint32_t>(static_cast<float>(sem) * 0x1p-40F);
  return sign | lane_select(lane_mask(sem >= 0x7C000000), special,
                            lane_select(lane_mask(sem >= 0x04000000), normal, sub));
}

/// binary32 bits `f` -> binary16 bits, rounding to nearest, ties to even; the same result as
/// `binary32_to_binary16_bits`, without branches or per-lane variable shifts.
[[nodiscard]] constexpr std::uint16_t float_to_half_lane(std::uint32_t f) noexcept {
  // Every candidate result is formed in bits 16 to 31 (with junk below); the last step shifts
  // the chosen one down.
  const std::uint32_t sign = f & 0x80000000U;
  const std::uint32_t a = f & 0x7FFFFFFFU;
  const auto sa = static_cast<std::int32_t>(a);  // a < 2^31: signed compares are exact
  // NaN: quiet, with the high 9 payload bits kept.
  const std::uint32_t nan = 0x7E000000U | ((a << 3) & 0x03FF0000U);
  // Normal half (2^-14 <= a < 2^16): rebias the exponent (127 -> 15) and round off 13 bits
  // (<< 3 is >> 13 into the high half; the sum is below 2^28 in this range). The carry from
  // rounding may bump the exponent, up to infinity (0x7C00). Wraps (harmlessly, the value is
  // not selected) outside this range.
  const std::uint32_t normal = (a - (112U << 23) + 0xFFFU + ((a >> 13) & 1U)) << 3;
  // Subnormal half or zero (a < 2^-14): the result is |f| / 2^-24 rounded to an integer. The
  // scaling is exact (a power of two; float subnormals scale to normals, or read as zero under
  // denormals-are-zero, and both round to zero), truncation and the remainder are exact, and
  // the tie-to-even decision is made on the exact remainder: no step depends on the rounding
  // mode. Other inputs are replaced by zero first, keeping the conversion to int in range.
  const std::uint32_t is_small = lane_mask(sa < 0x38800000);
  const float y = std::bit_cast<float>(a & is_small) * 0x1p24F;  // in [0, 1024)
  const auto t = static_cast<std::int32_t>(y);
  const auto kept = static_cast<std::uint32_t>(t);
  // rest in [0, 1) (or -0): as an integer its bit pattern orders like its value, so adding the
  // parity of `kept` makes an exact tie (0x3F000000) round up only when `kept` is odd.
  const auto rest = std::bit_cast<std::uint32_t>(y - static_cast<float>(t));
  const auto up =
      static_cast<std::uint32_t>(static_cast<std::int32_t>(rest + (kept & 1U)) > 0x3F000000);
  const std::uint32_t sub = (kept + up) << 16;
  const std::uint32_t finite =
      lane_select(is_small, sub, lane_select(lane_mask(sa < 0x47800000), normal, 0x7C000000U));
  const std::uint32_t mag = lane_select(lane_mask(sa > 0x7F800000), nan, finite);
  return static_cast<std::uint16_t>((sign | mag) >> 16);
}

/// bfloat16 bits `b` (in the low 16 bits) -> binary32 bits; the same result as
/// `bfloat16_to_binary32_bits`, without branches.
[[nodiscard]] constexpr std::uint32_t bfloat16_to_float_lane(std::uint32_t b) noexcept {
  const std::uint32_t f = (b & 0xFFFFU) << 16;
  const bool nan = static_cast<std::int32_t>(f & 0x7FFFFFFFU) > 0x7F800000;
  return nan ? (f | 0x00400000U) : f;
}

/// binary32 bits `f` -> bfloat16 bits, rounding to nearest, ties to even; the same result as
/// `binary32_to_bfloat16_bits`, without branches.
[[nodiscard]] constexpr std::uint16_t float_to_bfloat16_lane(std::uint32_t f) noexcept {
  // Non-NaN: round off the low half (the carry may bump the exponent, up to infinity). NaN:
  // set the quiet bit and truncate, keeping sign and payload. Written as one sum rather than a
  // select between two results, which compilers narrow to 16 bits and repack.
  const std::uint32_t nan = lane_mask(static_cast<std::int32_t>(f & 0x7FFFFFFFU) > 0x7F800000);
  const std::uint32_t bias = ~nan & (0x7FFFU + ((f >> 16) & 1U));
  return static_cast<std::uint16_t>(((f | (nan & 0x00400000U)) + bias) >> 16);
}

namespace portable {

// The loops work in chunks of `chunk` elements through a local array: with a fixed trip count
// and no possible aliasing, GCC and Clang vectorize them at -O2 as well as -O3, with no
// run-time alias checks.
inline constexpr std::size_t chunk = 16;

[[nodiscard]] constexpr std::uint32_t lane_bits(float f) noexcept {
  return std::bit_cast<std::uint32_t>(f);
}
[[nodiscard]] constexpr std::uint32_t lane_bits(half h) noexcept { return h.to_bits(); }
[[nodiscard]] constexpr std::uint32_t lane_bits(bfloat16 b) noexcept { return b.to_bits(); }

/// dst[i] = Dst(lane(bits of src[i])) for i < n; the ranges must not overlap.
template <class Dst, class Src, class Lane>
TUTTI_DETAIL_ALWAYS_INLINE void map_lanes(const Src* src, Dst* dst, std::size_t n,
                                          Lane lane) noexcept {
  using out_bits = decltype(lane(std::uint32_t{}));
  const auto out = [](out_bits b) noexcept {
    if constexpr (std::is_same_v<Dst, float>)
      return std::bit_cast<float>(b);
    else
      return Dst::from_bits(b);
  };
  const std::size_t full = n - n % chunk;
  for (std::size_t i = 0; i < full; i += chunk) {
    out_bits tmp[chunk];
    for (std::size_t j = 0; j < chunk; ++j) tmp[j] = lane(lane_bits(src[i + j]));
    for (std::size_t j = 0; j < chunk; ++j) dst[i + j] = out(tmp[j]);
  }
  for (std::size_t i = full; i < n; ++i) dst[i] = out(lane(lane_bits(src[i])));
}

/// dst[i] = float(src[i]) for i < n (exact). The ranges must not overlap.
TUTTI_DETAIL_ALWAYS_INLINE void convert_to_float(const half* src, float* dst,
                                                 std::size_t n) noexcept {
  map_lanes(src, dst, n, [](std::uint32_t x) noexcept { return half_to_float_lane(x); });
}

/// dst[i] = half(src[i]) for i < n (nearest, ties to even). The ranges must not overlap.
TUTTI_DETAIL_ALWAYS_INLINE void convert_from_float(const float* src, half* dst,
                                                   std::size_t n) noexcept {
  map_lanes(src, dst, n, [](std::uint32_t x) noexcept { return float_to_half_lane(x); });
}

/// dst[i] = float(src[i]) for i < n (exact). The ranges must not overlap.
TUTTI_DETAIL_ALWAYS_INLINE void convert_to_float(const bfloat16* src, float* dst,
                                                 std::size_t n) noexcept {
  map_lanes(src, dst, n, [](std::uint32_t x) noexcept { return bfloat16_to_float_lane(x); });
}

/// dst[i] = bfloat16(src[i]) for i < n (nearest, ties to even). The ranges must not overlap.
TUTTI_DETAIL_ALWAYS_INLINE void convert_from_float(const float* src, bfloat16* dst,
                                                   std::size_t n) noexcept {
  map_lanes(src, dst, n, [](std::uint32_t x) noexcept { return float_to_bfloat16_lane(x); });
}

}  // namespace portable

/// Block size of `combine_via_float`: two float arrays of it live on the stack.
inline constexpr std::size_t via_float_block = 256;

/// One block of `combine_via_float` (m <= via_float_block), with converters `Cvt` (a type with
/// static `to_float` and `from_float`). `Op` is binary, or unary (then `b` is not read).
template <class Cvt, class T, class Op>
TUTTI_DETAIL_ALWAYS_INLINE void via_float_block_step(T* d, const T* a, const T* b, std::size_t m,
                                                     Op& op) noexcept {
  float fa[via_float_block];
  float fb[via_float_block];
  Cvt::to_float(a, fa, m);
  if constexpr (std::is_invocable_v<Op&, float, float>) {
    Cvt::to_float(b, fb, m);
    for (std::size_t j = 0; j < m; ++j) fa[j] = op(fa[j], fb[j]);
  } else {
    for (std::size_t j = 0; j < m; ++j) fa[j] = op(fa[j]);
  }
  Cvt::from_float(fa, d, m);
}

/// The loop of `combine_via_float`: whole blocks (constant trip counts, so no loop tails
/// inside), then the rest.
template <class Cvt, class T, class Op>
TUTTI_DETAIL_ALWAYS_INLINE void via_float_blocks(T* d, const T* a, const T* b, std::size_t n,
                                                 Op& op) noexcept {
  constexpr std::size_t block = via_float_block;
  const std::size_t full = n - n % block;
  const bool binary = std::is_invocable_v<Op&, float, float>;
  for (std::size_t i = 0; i < full; i += block)
    via_float_block_step<Cvt>(d + i, a + i, binary ? b + i : b, block, op);
  if (full < n) via_float_block_step<Cvt>(d + full, a + full, binary ? b + full : b, n - full, op);
}

/// What the 16-bit paths are built with, best last: `portable` is the lanes at the baseline
/// ISA; `f16c` adds the F16C converters for half; `avx2` and `avx512` build everything, the
/// float loop included, for those ISAs (with F16C for half).
enum class simd_level : unsigned char { portable, f16c, avx2, avx512 };

/// Converters for `via_float_blocks` at the portable level.
struct portable_converters {
  template <class T>
  TUTTI_DETAIL_ALWAYS_INLINE static void to_float(const T* s, float* d, std::size_t n) noexcept {
    portable::convert_to_float(s, d, n);
  }
  template <class T>
  TUTTI_DETAIL_ALWAYS_INLINE static void from_float(const float* s, T* d, std::size_t n) noexcept {
    portable::convert_from_float(s, d, n);
  }
};

#if TUTTI_DETAIL_X86_DISPATCH

namespace x86 {

/// The best `simd_level` this CPU (and OS) supports.
[[nodiscard]] inline simd_level detect_simd_level() noexcept {
  unsigned eax = 0;
  unsigned ebx = 0;
  unsigned ecx = 0;
  unsigned edx = 0;
  __builtin_cpu_init();  // in case this runs before the constructors that would do it
  // __builtin_cpu_supports also checks that the OS saves the wider registers; not every
  // compiler knows the "f16c" feature name, so that bit (CPUID.1:ECX.29) is read directly.
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & (1U << 29)) == 0 ||
      __builtin_cpu_supports("avx") == 0) {
    return simd_level::portable;
  }
  if (__builtin_cpu_supports("avx2") == 0) return simd_level::f16c;
  if (__builtin_cpu_supports("avx512f") == 0 || __builtin_cpu_supports("avx512bw") == 0 ||
      __builtin_cpu_supports("avx512vl") == 0) {
    return simd_level::avx2;
  }
  return simd_level::avx512;
}

// F16C conversions are exact (widening) or round as the immediate says (narrowing), ignore
// MXCSR's rounding mode and flush-to-zero, make NaNs quiet keeping sign and high payload, and
// handle subnormals: exactly the scalar conversions' results (the tests check every half and
// millions of floats, NaNs included). Tails use the lanes.

/// dst[i] = float(src[i]) for i < n, with F16C. Only call at level `f16c` or better.
__attribute__((target("f16c,avx"))) inline void f16c_to_float(const half* src, float* dst,
                                                              std::size_t n) noexcept {
  const std::size_t full = n - n % 8;
  for (std::size_t i = 0; i < full; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (std::size_t i = full; i < n; ++i)
    dst[i] = std::bit_cast<float>(half_to_float_lane(src[i].to_bits()));
}

/// dst[i] = half(src[i]) for i < n, with F16C. Only call at level `f16c` or better.
__attribute__((target("f16c,avx"))) inline void f16c_from_float(const float* src, half* dst,
                                                                std::size_t n) noexcept {
  const std::size_t full = n - n % 8;
  for (std::size_t i = 0; i < full; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (std::size_t i = full; i < n; ++i)
    dst[i] = half::from_bits(float_to_half_lane(std::bit_cast<std::uint32_t>(src[i])));
}

/// Converters at level `f16c` or better: F16C for half; for bfloat16 the portable loops,
/// inlined and so vectorized for the caller's ISA.
struct converters : portable_converters {
  using portable_converters::from_float;
  using portable_converters::to_float;
  TUTTI_DETAIL_ALWAYS_INLINE static void to_float(const half* s, float* d, std::size_t n) noexcept {
    f16c_to_float(s, d, n);
  }
  TUTTI_DETAIL_ALWAYS_INLINE static void from_float(const float* s, half* d,
                                                    std::size_t n) noexcept {
    f16c_from_float(s, d, n);
  }
};

// The same code built for AVX2 and for AVX-512. Only call at that level or better.

template <class T>
TUTTI_DETAIL_TARGET_AVX2 void to_float_avx2(const T* s, float* d, std::size_t n) noexcept {
  converters::to_float(s, d, n);
}
template <class T>
TUTTI_DETAIL_TARGET_AVX2 void from_float_avx2(const float* s, T* d, std::size_t n) noexcept {
  converters::from_float(s, d, n);
}
template <class T, class Op>
TUTTI_DETAIL_TARGET_AVX2 void via_float_avx2(T* d, const T* a, const T* b, std::size_t n,
                                             Op& op) noexcept {
  via_float_blocks<converters>(d, a, b, n, op);
}
template <class T>
TUTTI_DETAIL_TARGET_AVX512 void to_float_avx512(const T* s, float* d, std::size_t n) noexcept {
  converters::to_float(s, d, n);
}
template <class T>
TUTTI_DETAIL_TARGET_AVX512 void from_float_avx512(const float* s, T* d, std::size_t n) noexcept {
  converters::from_float(s, d, n);
}
template <class T, class Op>
TUTTI_DETAIL_TARGET_AVX512 void via_float_avx512(T* d, const T* a, const T* b, std::size_t n,
                                                 Op& op) noexcept {
  via_float_blocks<converters>(d, a, b, n, op);
}

}  // namespace x86

#endif

/// The best `simd_level` this build and CPU support; detected once.
[[nodiscard]] inline simd_level supported_simd_level() noexcept {
#if TUTTI_DETAIL_X86_DISPATCH
  static const simd_level level = x86::detect_simd_level();
  return level;
#else
  return simd_level::portable;
#endif
}

/// The block converters. dst[i] = float(src[i]) for i < n: exact, the bits of
/// `static_cast<float>(src[i])`. Built for `level`, which must be at most
/// `supported_simd_level()`. The ranges must not overlap.
template <class T>
  requires std::is_same_v<T, half> || std::is_same_v<T, bfloat16>
void convert_to_float(const T* src, float* dst, std::size_t n,
                      simd_level level = supported_simd_level()) noexcept {
#if TUTTI_DETAIL_X86_DISPATCH
  if (level == simd_level::avx512) return x86::to_float_avx512(src, dst, n);
  if (level == simd_level::avx2) return x86::to_float_avx2(src, dst, n);
  if (level == simd_level::f16c) return x86::converters::to_float(src, dst, n);
#endif
  static_cast<void>(level);
  portable::convert_to_float(src, dst, n);
}

/// dst[i] = T(src[i]) for i < n: nearest, ties to even, the bits of `T(src[i])`. Built for
/// `level`, which must be at most `supported_simd_level()`. The ranges must not overlap.
template <class T>
  requires std::is_same_v<T, half> || std::is_same_v<T, bfloat16>
void convert_from_float(const float* src, T* dst, std::size_t n,
                        simd_level level = supported_simd_level()) noexcept {
#if TUTTI_DETAIL_X86_DISPATCH
  if (level == simd_level::avx512) return x86::from_float_avx512(src, dst, n);
  if (level == simd_level::avx2) return x86::from_float_avx2(src, dst, n);
  if (level == simd_level::f16c) return x86::converters::from_float(src, dst, n);
#endif
  static_cast<void>(level);
  portable::convert_from_float(src, dst, n);
}

/// For i < n: d[i] = T(op(float(a[i]), float(b[i]))) if `op` takes two floats, or
/// d[i] = T(op(float(a[i]))) if it takes one (`b` is then not read). The conversions give the
/// scalar conversions' bits; `op` runs on blocks of floats, in a loop built for `level` (at
/// most `supported_simd_level()`). `d` may alias `a` or `b` exactly, never partly.
template <class T, class Op>
  requires std::is_same_v<T, half> || std::is_same_v<T, bfloat16>
void combine_via_float(T* d, const T* a, const T* b, std::size_t n, Op op,
                       simd_level level = supported_simd_level()) noexcept {
#if TUTTI_DETAIL_X86_DISPATCH
  if (level == simd_level::avx512) return x86::via_float_avx512(d, a, b, n, op);
  if (level == simd_level::avx2) return x86::via_float_avx2(d, a, b, n, op);
  if (std::is_same_v<T, half> && level == simd_level::f16c)
    return via_float_blocks<x86::converters>(d, a, b, n, op);
#endif
  static_cast<void>(level);
  via_float_blocks<portable_converters>(d, a, b, n, op);
}

}  // namespace tutti::inline v0::detail

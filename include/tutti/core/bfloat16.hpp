#pragma once

/// \file
/// `tutti::bfloat16`: the "brain floating point" 16-bit storage type (1 sign, 8 exponent and
/// 7 mantissa bits), i.e. the top 16 bits of an IEEE 754 binary32 `float`.
///
/// All conversions are implemented with integer operations on the bit patterns, so they are
/// `constexpr`, independent of the floating-point environment (narrowing always rounds to
/// nearest, ties to even) and never raise floating-point exceptions.

#include <bit>
#include <compare>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "tutti/core/half.hpp"  // detail::float16_storage

namespace tutti::inline v0 {

namespace detail {

/// float -> bfloat16 bits, rounding to nearest, ties to even. The exponent ranges agree, so for
/// non-NaN inputs this is a plain rounding of the low 16 bits; a carry out of the mantissa bumps
/// the exponent (up to infinity), and float subnormals land on bfloat16 subnormals.
[[nodiscard]] constexpr std::uint16_t binary32_to_bfloat16_bits(std::uint32_t f) noexcept {
  if ((f & 0x7F800000U) == 0x7F800000U && (f & 0x7FFFFFU) != 0) {
    return static_cast<std::uint16_t>((f >> 16) | 0x0040U);  // NaN: keep sign/payload, quiet
  }
  const std::uint32_t lsb = (f >> 16) & 1U;
  return static_cast<std::uint16_t>((f + 0x7FFFU + lsb) >> 16);
}

/// Exact bfloat16 -> float bits. NaNs are made quiet and keep sign and payload.
[[nodiscard]] constexpr std::uint32_t bfloat16_to_binary32_bits(std::uint16_t b) noexcept {
  const std::uint32_t f = static_cast<std::uint32_t>(b) << 16;
  const bool nan = (b & 0x7F80U) == 0x7F80U && (b & 0x007FU) != 0;
  return nan ? (f | 0x00400000U) : f;
}

}  // namespace detail

/// bfloat16 value: 1 sign, 8 exponent and 7 mantissa bits (the top half of a `float`).
///
/// A storage type: it converts exactly to `float`/`double` and is constructed from them with
/// round-to-nearest-even. Comparisons follow IEEE semantics (NaN is unordered, +0 == -0).
class bfloat16 : public detail::float16_storage<bfloat16, detail::bfloat16_format,
                                                &detail::binary32_to_bfloat16_bits,
                                                &detail::bfloat16_to_binary32_bits> {
 public:
  using float16_storage::float16_storage;
};

static_assert(sizeof(bfloat16) == 2 && std::is_trivially_copyable_v<bfloat16>);

}  // namespace tutti::inline v0

/// `std::numeric_limits` for `tutti::bfloat16`, following the conventions used for `float`.
/// `is_iec559` is false: bfloat16 is not one of the IEEE 754 interchange formats.
template <>
struct std::numeric_limits<tutti::bfloat16>
    : tutti::detail::float16_limits<tutti::bfloat16, tutti::detail::bfloat16_format, false, 2, 4,
                                    -37, 38> {};

#pragma once

/// \file
/// `tutti::half`: a 16-bit IEEE 754 binary16 storage type (1 sign, 5 exponent and 10 mantissa
/// bits) with exact widening and correctly rounded narrowing conversions.
///
/// All conversions are implemented with integer operations on the bit patterns, so they are
/// `constexpr`, independent of the floating-point environment (narrowing always rounds to
/// nearest, ties to even) and never raise floating-point exceptions.

#include <bit>
#include <compare>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace tutti::inline v0 {

namespace detail {

/// Layout of a binary floating-point interchange format.
template <class Bits, int ExpBits, int ManBits>
struct float_format {
  using bits_type = Bits;
  static constexpr int exp_bits = ExpBits;
  static constexpr int man_bits = ManBits;
  static constexpr int sign_shift = ExpBits + ManBits;
  static constexpr int bias = (1 << (ExpBits - 1)) - 1;
  static constexpr int exp_all_ones = (1 << ExpBits) - 1;
  /// Unbiased exponent of the smallest normal number.
  static constexpr int emin = 1 - bias;
  /// Unbiased exponent of the largest finite number.
  static constexpr int emax = bias;
  static constexpr Bits man_mask = static_cast<Bits>((Bits{1} << ManBits) - 1U);
  static constexpr Bits exp_mask = static_cast<Bits>(Bits{exp_all_ones} << ManBits);
  static constexpr Bits quiet_bit = static_cast<Bits>(Bits{1} << (ManBits - 1));
};

using binary16_format = float_format<std::uint16_t, 5, 10>;
using bfloat16_format = float_format<std::uint16_t, 8, 7>;
using binary32_format = float_format<std::uint32_t, 8, 23>;
using binary64_format = float_format<std::uint64_t, 11, 52>;

/// Rounds `sig >> shift` to nearest, ties to even (`1 <= shift <= 63`).
[[nodiscard]] constexpr std::uint64_t shift_right_round_even(std::uint64_t sig,
                                                             int shift) noexcept {
  const std::uint64_t kept = sig >> shift;
  const std::uint64_t rest = sig & ((std::uint64_t{1} << shift) - 1U);
  const std::uint64_t halfway = std::uint64_t{1} << (shift - 1);
  return (rest > halfway || (rest == halfway && (kept & 1U) != 0)) ? kept + 1U : kept;
}

/// Converts the bit pattern of a wider format `Src` to the narrower format `Dst`, rounding to
/// nearest with ties to even. NaNs keep their sign and the high bits of their payload and are
/// made quiet; overflow gives infinity; underflow gives subnormals or a signed zero.
template <class Dst, class Src>
[[nodiscard]] constexpr typename Dst::bits_type narrow_bits(typename Src::bits_type x) noexcept {
  static_assert(Src::man_bits > Dst::man_bits && Src::emin <= Dst::emin && Src::emax >= Dst::emax);
  using dst_bits = typename Dst::bits_type;
  constexpr int man_shift = Src::man_bits - Dst::man_bits;

  const auto sign = static_cast<dst_bits>((x >> Src::sign_shift) << Dst::sign_shift);
  const auto biased =
      static_cast<int>((x >> Src::man_bits) & static_cast<unsigned>(Src::exp_all_ones));
  const auto man = static_cast<std::uint64_t>(x & Src::man_mask);

  if (biased == Src::exp_all_ones) {
    if (man == 0) {
      return static_cast<dst_bits>(sign | Dst::exp_mask);  // infinity
    }
    const auto payload = static_cast<dst_bits>((man >> man_shift) & Dst::man_mask);
    return static_cast<dst_bits>(sign | Dst::exp_mask | Dst::quiet_bit | payload);
  }
  if (biased == 0 && man == 0) {
    return sign;
  }

  // |x| = sig * 2^(exp - Src::man_bits), with the leading bit of sig at position Src::man_bits
  // for normal numbers (subnormal sources have a smaller sig and exp == Src::emin).
  const int exp = (biased == 0 ? 1 : biased) - Src::bias;
  const std::uint64_t sig = biased == 0 ? man : (man | (std::uint64_t{1} << Src::man_bits));

  if (exp > Dst::emax) {
    return static_cast<dst_bits>(sign | Dst::exp_mask);
  }
  if (exp >= Dst::emin) {
    // Normal range of Dst (or a subnormal source whose exponent equals Dst::emin, which then
    // lands on a Dst subnormal). The rounded significand includes the implicit bit, so a carry
    // out of the mantissa correctly bumps the exponent, up to and including infinity.
    const std::uint64_t rounded = shift_right_round_even(sig, man_shift);
    const auto base = static_cast<std::uint64_t>(exp - Dst::emin) << Dst::man_bits;
    return static_cast<dst_bits>(sign | static_cast<dst_bits>(base + rounded));
  }
  // Subnormal range of Dst: the quantum is 2^(Dst::emin - Dst::man_bits).
  const int shift = man_shift + (Dst::emin - exp);
  if (shift > Src::man_bits + 1) {
    return sign;  // below half of the smallest subnormal: rounds to zero
  }
  // A carry into bit Dst::man_bits yields the smallest normal number, as it should.
  return static_cast<dst_bits>(sign | static_cast<dst_bits>(shift_right_round_even(sig, shift)));
}

/// float -> binary16 bits, rounding to nearest, ties to even. Same results as
/// `narrow_bits<binary16_format, binary32_format>`, with every case evaluated and the right one
/// selected. The per-lane variable shifts still keep compilers from vectorizing it at the
/// baseline ISA; array conversions use `detail::convert_from_float` (tutti/core/convert16.hpp),
/// which gives the same bits.
[[nodiscard]] constexpr std::uint16_t binary32_to_binary16_bits(std::uint32_t f) noexcept {
  const std::uint32_t sign = (f >> 16) & 0x8000U;
  const std::uint32_t a = f & 0x7FFFFFFFU;
  // NaN: quiet, with the high 9 payload bits kept.
  const std::uint32_t nan = 0x7E00U | ((a >> 13) & 0x3FFU);
  // Normal half (2^-14 <= a < 2^16): rebias the exponent (127 -> 15) and round off 13 bits;
  // the carry from rounding may bump the exponent, up to infinity (0x7C00).
  const std::uint32_t normal = (a - (112U << 23) + 0xFFFU + ((a >> 13) & 1U)) >> 13;
  // Subnormal half or zero (a < 2^-14): a = sig * 2^(e - 150) and the quantum is 2^-24, so
  // shift sig right by 126 - e; shifts past 24 (including float subnormals) round to zero.
  const std::uint32_t e = a >> 23;
  const std::uint32_t shift = (e < 102U || e > 112U) ? 31U : 126U - e;  // in [14, 24] or 31
  const std::uint32_t sig = (a & 0x7FFFFFU) | 0x800000U;
  const std::uint32_t kept = sig >> shift;
  const std::uint32_t rest = sig & ((1U << shift) - 1U);
  const std::uint32_t halfway = 1U << (shift - 1U);
  const std::uint32_t sub =
      kept + ((rest > halfway || (rest == halfway && (kept & 1U) != 0)) ? 1U : 0U);
  const std::uint32_t mag = a > 0x7F800000U    ? nan
                            : a >= 0x47800000U ? 0x7C00U  // >= 2^16 (or infinity)
                            : a >= 0x38800000U ? normal   // >= 2^-14
                                               : sub;
  return static_cast<std::uint16_t>(sign | mag);
}

/// Exact binary16 -> binary32 conversion. NaNs are made quiet and keep sign and payload.
[[nodiscard]] constexpr std::uint32_t binary16_to_binary32_bits(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000U) << 16;
  const std::uint32_t biased = (h >> 10) & 0x1FU;
  const std::uint32_t man = h & 0x3FFU;
  if (biased == 0x1FU) {
    return man == 0 ? (sign | 0x7F800000U) : (sign | 0x7FC00000U | (man << 13));
  }
  if (biased == 0) {
    if (man == 0) {
      return sign;
    }
    // Subnormal: |h| = man * 2^-24 with the leading bit at position p; always normal in float.
    const auto p = static_cast<std::uint32_t>(std::bit_width(man) - 1);
    return sign | ((p + 103U) << 23) | ((man << (23U - p)) & 0x7FFFFFU);
  }
  return sign | ((biased + 112U) << 23) | (man << 13);
}

/// Exact float -> double conversion whose NaN handling does not depend on the compiler.
[[nodiscard]] constexpr double float_to_double(float f) noexcept {
  const auto bits = std::bit_cast<std::uint32_t>(f);
  if ((bits & 0x7F800000U) == 0x7F800000U && (bits & 0x7FFFFFU) != 0) {
    const std::uint64_t sign = static_cast<std::uint64_t>(bits >> 31) << 63;
    const std::uint64_t payload = static_cast<std::uint64_t>(bits & 0x7FFFFFU) << 29;
    return std::bit_cast<double>(sign | 0x7FF8000000000000U | payload);
  }
  return static_cast<double>(f);
}

}  // namespace detail

namespace detail {

/// What `half` and `bfloat16` share: 16 bits of storage, exact widening to float and double,
/// correctly rounded narrowing (float through `FromFloat`, double directly, so there is no
/// double rounding) and IEEE comparisons.
template <class Derived, class Format, std::uint16_t (*FromFloat)(std::uint32_t) noexcept,
          std::uint32_t (*ToFloat)(std::uint16_t) noexcept>
class float16_storage {
 public:
  /// Positive zero.
  constexpr float16_storage() noexcept = default;

  /// Rounds `f` to the nearest value, ties to even. Values beyond the largest finite value
  /// (after rounding) become infinity; NaNs stay NaN (quiet, sign and high payload kept).
  explicit constexpr float16_storage(float f) noexcept
      : bits_(FromFloat(std::bit_cast<std::uint32_t>(f))) {}

  /// Rounds `d` directly to the nearest value, ties to even (no intermediate rounding to
  /// `float`, so there is no double-rounding error).
  explicit constexpr float16_storage(double d) noexcept
      : bits_(narrow_bits<Format, binary64_format>(std::bit_cast<std::uint64_t>(d))) {}

  /// Exact conversion to `float` (NaNs are returned quiet).
  explicit constexpr operator float() const noexcept {
    return std::bit_cast<float>(ToFloat(bits_));
  }

  /// Exact conversion to `double` (NaNs are returned quiet).
  explicit constexpr operator double() const noexcept {
    return float_to_double(static_cast<float>(*this));
  }

  /// The value with bit pattern `b`.
  [[nodiscard]] static constexpr Derived from_bits(std::uint16_t b) noexcept {
    Derived v;
    v.bits_ = b;
    return v;
  }

  /// The bit pattern of this value.
  [[nodiscard]] constexpr std::uint16_t to_bits() const noexcept { return bits_; }

  /// IEEE equality: false if either operand is NaN; +0 == -0.
  [[nodiscard]] friend constexpr bool operator==(Derived a, Derived b) noexcept {
    return static_cast<float>(a) == static_cast<float>(b);
  }

  /// IEEE ordering: `unordered` if either operand is NaN.
  [[nodiscard]] friend constexpr auto operator<=>(Derived a, Derived b) noexcept
      -> std::partial_ordering {
    return static_cast<float>(a) <=> static_cast<float>(b);
  }

 private:
  std::uint16_t bits_ = 0;
};

/// `std::numeric_limits` members of a 16-bit float type `T` in `Format`, derived from the
/// format's fields; the decimal figures (which need logarithms) are passed in.
template <class T, class Format, bool Iec559, int Digits10, int MaxDigits10, int MinExponent10,
          int MaxExponent10>
struct float16_limits {
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static constexpr bool has_signaling_NaN = true;
  static constexpr std::float_denorm_style has_denorm = std::denorm_present;
  static constexpr bool has_denorm_loss = false;
  static constexpr std::float_round_style round_style = std::round_to_nearest;
  static constexpr bool is_iec559 = Iec559;
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr int digits = Format::man_bits + 1;
  static constexpr int digits10 = Digits10;
  static constexpr int max_digits10 = MaxDigits10;
  static constexpr int radix = 2;
  static constexpr int min_exponent = Format::emin + 1;
  static constexpr int min_exponent10 = MinExponent10;
  static constexpr int max_exponent = Format::emax + 1;
  static constexpr int max_exponent10 = MaxExponent10;
  static constexpr bool traps = false;
  static constexpr bool tinyness_before = false;

  /// Smallest positive normal value, 2^emin.
  [[nodiscard]] static constexpr T min() noexcept { return bits(1U << Format::man_bits); }
  /// Largest finite value.
  [[nodiscard]] static constexpr T max() noexcept { return bits(max_bits); }
  /// Most negative finite value.
  [[nodiscard]] static constexpr T lowest() noexcept { return bits(sign | max_bits); }
  /// 2^-man_bits, the distance from 1 to the next representable value.
  [[nodiscard]] static constexpr T epsilon() noexcept {
    return bits(static_cast<unsigned>(Format::bias - Format::man_bits) << Format::man_bits);
  }
  /// 0.5, the largest rounding error of round-to-nearest in units of the last place.
  [[nodiscard]] static constexpr T round_error() noexcept {
    return bits(static_cast<unsigned>(Format::bias - 1) << Format::man_bits);
  }
  [[nodiscard]] static constexpr T infinity() noexcept { return bits(Format::exp_mask); }
  [[nodiscard]] static constexpr T quiet_NaN() noexcept {
    return bits(Format::exp_mask | Format::quiet_bit);
  }
  [[nodiscard]] static constexpr T signaling_NaN() noexcept {
    return bits(Format::exp_mask | (Format::quiet_bit >> 1U));
  }
  /// Smallest positive subnormal value, 2^(emin - man_bits).
  [[nodiscard]] static constexpr T denorm_min() noexcept { return bits(1U); }

 private:
  static constexpr unsigned sign = 1U << Format::sign_shift;
  static constexpr unsigned max_bits =
      (Format::exp_mask - (1U << Format::man_bits)) | Format::man_mask;
  static constexpr T bits(unsigned b) noexcept {
    return T::from_bits(static_cast<std::uint16_t>(b));
  }
};

}  // namespace detail

/// IEEE 754 binary16 ("half precision") value: 1 sign, 5 exponent and 10 mantissa bits.
///
/// A storage type: it converts exactly to `float`/`double` and is constructed from them with
/// round-to-nearest-even. Comparisons follow IEEE semantics (NaN is unordered, +0 == -0).
class half : public detail::float16_storage<half, detail::binary16_format,
                                            &detail::binary32_to_binary16_bits,
                                            &detail::binary16_to_binary32_bits> {
 public:
  using float16_storage::float16_storage;
};

static_assert(sizeof(half) == 2 && std::is_trivially_copyable_v<half>);

}  // namespace tutti::inline v0

/// `std::numeric_limits` for `tutti::half`, following the conventions used for `float`.
template <>
struct std::numeric_limits<tutti::half>
    : tutti::detail::float16_limits<tutti::half, tutti::detail::binary16_format, true, 3, 5, -4,
                                    4> {};

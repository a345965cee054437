// Tests for tutti::half and tutti::bfloat16.
//
// Every conversion is checked against reference code written independently of the headers: a
// decoder built on std::ldexp, and a rounding reference built on std::frexp / std::nearbyint
// in double precision (exact for all the inputs used here). Loops over many inputs count
// mismatches, report the first few in detail and then CHECK that the count is zero.
//
// The block converters used by the reduce kernels (tutti/core/convert16.hpp: portable,
// F16C where the CPU has it, and the dispatching entry points) are checked bit for bit against
// the scalar conversions, which the tests above tie to the reference.

#include <algorithm>
#include <bit>
#include <cfenv>
#include <cmath>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <doctest/doctest.h>

#include "tutti/core/bfloat16.hpp"
#include "tutti/core/convert16.hpp"
#include "tutti/core/half.hpp"
#include "tutti/core/reduce.hpp"

namespace {

using tutti::bfloat16;
using tutti::half;

// ---------------------------------------------------------------------------------------------
// Reference implementation (independent of the headers).

template <class T>
struct format;

template <>
struct format<half> {
  static constexpr int exp_bits = 5;
  static constexpr int man_bits = 10;
};

template <>
struct format<bfloat16> {
  static constexpr int exp_bits = 8;
  static constexpr int man_bits = 7;
};

template <class T>
struct ref {
  static constexpr int mb = format<T>::man_bits;
  static constexpr int eb = format<T>::exp_bits;
  static constexpr int bias = (1 << (eb - 1)) - 1;
  static constexpr int emin = 1 - bias;
  static constexpr int emax = bias;
  static constexpr unsigned exp_ones = (1U << eb) - 1U;
  static constexpr unsigned man_mask = (1U << mb) - 1U;
  static constexpr unsigned quiet = 1U << (mb - 1);
  static constexpr unsigned inf_bits = exp_ones << mb;
  static constexpr unsigned max_bits = inf_bits - 1U;

  static bool is_nan(unsigned b) { return ((b >> mb) & exp_ones) == exp_ones && (b & man_mask); }

  // Value of a finite (non-NaN, non-infinite) bit pattern.
  static double decode(unsigned b) {
    const unsigned e = (b >> mb) & exp_ones;
    const double m = b & man_mask;
    const double v = e == 0 ? std::ldexp(m, emin - mb)
                            : std::ldexp(m + std::ldexp(1.0, mb), static_cast<int>(e) - bias - mb);
    return (b & 0x8000U) ? -v : v;
  }

  // Rounds x to the format (nearest, ties to even) and returns the result as a double
  // (±inf on overflow, signed zero on underflow). x must not be NaN.
  static double round(double x) {
    if (x == 0 || std::isinf(x)) {
      return x;
    }
    const double a = std::fabs(x);
    int e = 0;
    static_cast<void>(std::frexp(a, &e));  // a in [2^(e-1), 2^e)
    const int quantum_exp = (e - 1 > emin ? e - 1 : emin) - mb;
    double r = std::ldexp(std::nearbyint(std::ldexp(a, -quantum_exp)), quantum_exp);
    if (r >= std::ldexp(1.0, emax + 1)) {
      r = std::numeric_limits<double>::infinity();
    }
    return std::copysign(r, x);
  }

  // Bit pattern of a value that is exactly representable (or ±inf, ±0).
  static unsigned encode(double v) {
    const unsigned sign = std::signbit(v) ? 0x8000U : 0U;
    const double a = std::fabs(v);
    if (std::isinf(a)) {
      return sign | inf_bits;
    }
    if (a == 0) {
      return sign;
    }
    int e = 0;
    static_cast<void>(std::frexp(a, &e));
    if (e - 1 < emin) {
      return sign | static_cast<unsigned>(std::ldexp(a, mb - emin));
    }
    const auto m = static_cast<unsigned>(std::ldexp(a, mb - (e - 1))) & man_mask;
    return sign | (static_cast<unsigned>(e - 1 + bias) << mb) | m;
  }

  static unsigned expected_bits(double x) { return encode(round(x)); }
};

// ---------------------------------------------------------------------------------------------
// Helpers.

std::string hex(std::uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string show(float f) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a (%s)", static_cast<double>(f),
                hex(std::bit_cast<std::uint32_t>(f)).c_str());
  return buf;
}

std::string show(double d) {
  char buf[80];
  std::snprintf(buf, sizeof buf, "%a (%s)", d, hex(std::bit_cast<std::uint64_t>(d)).c_str());
  return buf;
}

template <class T>
const char* type_name() {
  return std::is_same_v<T, half> ? "half" : "bfloat16";
}

// Counts a mismatch and reports the first few of them. `message` is a doctest stream expression
// (`a << b << ...`), evaluated only on failure, so it cannot be parenthesized.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define EXPECT_EQ_COUNTED(fails, got, want, message)                           \
  do {                                                                         \
    const auto got_ = (got);                                                   \
    const auto want_ = (want);                                                 \
    if (got_ != want_ && ++(fails) <= 8) {                                     \
      FAIL_CHECK(message << ": got " << hex(got_) << ", want " << hex(want_)); \
    }                                                                          \
  } while (false)
// NOLINTEND(bugprone-macro-parentheses)

struct splitmix64 {
  std::uint64_t state;
  std::uint64_t operator()() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
};

// Random float bits: fully random, or with the exponent near the 16-bit type's range, and often
// with trailing mantissa bits cleared so that ties and near-ties are frequent.
template <class T>
std::uint32_t random_float_bits(splitmix64& rng) {
  const std::uint64_t r = rng();
  auto bits = static_cast<std::uint32_t>(r);
  if ((r >> 32) & 1U) {
    const int span = ref<T>::emax - ref<T>::emin + ref<T>::mb + 6;
    const int exp = ref<T>::emin - ref<T>::mb - 3 + static_cast<int>((r >> 33) % span);
    const int biased = exp + 127 < 0 ? 0 : (exp + 127 > 255 ? 255 : exp + 127);
    bits = (bits & 0x807FFFFFU) | (static_cast<std::uint32_t>(biased) << 23);
  }
  if ((r >> 48) & 1U) {
    bits &= ~((1U << ((r >> 49) % 24)) - 1U);
  }
  return bits;
}

template <class T>
std::uint64_t random_double_bits(splitmix64& rng) {
  const std::uint64_t r = rng();
  std::uint64_t bits = rng();
  if (r & 1U) {
    const int span = ref<T>::emax - ref<T>::emin + ref<T>::mb + 6;
    const int exp = ref<T>::emin - ref<T>::mb - 3 + static_cast<int>((r >> 1) % span);
    bits = (bits & 0x800FFFFFFFFFFFFFULL) | (static_cast<std::uint64_t>(exp + 1023) << 52);
  }
  if ((r >> 16) & 1U) {
    bits &= ~((std::uint64_t{1} << ((r >> 17) % 53)) - 1U);
  }
  return bits;
}

// ---------------------------------------------------------------------------------------------
// Compile-time checks.

static_assert(sizeof(half) == 2 && std::is_trivially_copyable_v<half>);
static_assert(sizeof(bfloat16) == 2 && std::is_trivially_copyable_v<bfloat16>);
static_assert(!std::is_convertible_v<float, half> && !std::is_convertible_v<half, float>);
static_assert(!std::is_convertible_v<double, bfloat16> && !std::is_convertible_v<bfloat16, float>);
static_assert(half().to_bits() == 0 && bfloat16().to_bits() == 0);
static_assert(half(1.0f).to_bits() == 0x3C00 && half(-2.0).to_bits() == 0xC000);
static_assert(half(0.1).to_bits() == 0x2E66 && half(0.1f).to_bits() == 0x2E66);
static_assert(half(65520.0f).to_bits() == 0x7C00 && half(65519.0f).to_bits() == 0x7BFF);
static_assert(half(0x1p-25f).to_bits() == 0 && half(0x1.8p-24).to_bits() == 0x0002);
static_assert(static_cast<float>(half::from_bits(0x0001)) == 0x1p-24f);
static_assert(static_cast<double>(half::from_bits(0xFBFF)) == -65504.0);
static_assert(half(std::numeric_limits<float>::quiet_NaN()).to_bits() == 0x7E00);
static_assert(bfloat16(1.0f).to_bits() == 0x3F80 && bfloat16(3.14159265358979).to_bits() == 0x4049);
static_assert(bfloat16(0x1p-133f).to_bits() == 0x0001);
static_assert(static_cast<float>(bfloat16::from_bits(0x7F7F)) == 0x1.FEp127f);
static_assert(half(1.0f) < half(2.0f) && half(-0.0f) == half(0.0f));
static_assert(bfloat16(1.0f) < bfloat16(2.0f) && bfloat16(-0.0f) == bfloat16(0.0f));
static_assert(!(std::numeric_limits<half>::quiet_NaN() ==  // NOLINT(misc-redundant-expression)
                std::numeric_limits<half>::quiet_NaN()));
static_assert(std::numeric_limits<bfloat16>::quiet_NaN() <=> bfloat16(1.0f) ==
              std::partial_ordering::unordered);

// ---------------------------------------------------------------------------------------------

TEST_CASE_TEMPLATE("float16: every bit pattern decodes exactly and round-trips", T, half,
                   bfloat16) {
  using R = ref<T>;
  int fails = 0;
  int nans = 0;
  for (unsigned b = 0; b <= 0xFFFFU; ++b) {
    const T x = T::from_bits(static_cast<std::uint16_t>(b));
    const auto f = static_cast<float>(x);
    const auto d = static_cast<double>(x);
    const auto fb = std::bit_cast<std::uint32_t>(f);
    const auto db = std::bit_cast<std::uint64_t>(d);
    const auto what = [&] { return std::string(type_name<T>()) + " bits " + hex(b); };
    if (R::is_nan(b)) {
      ++nans;
      // NaN: stays NaN with the same sign, made quiet, payload kept (in the top mantissa bits).
      const unsigned quiet_bits = b | R::quiet;
      const std::uint32_t want_f = ((quiet_bits & 0x8000U) << 16) | 0x7F800000U |
                                   ((quiet_bits & R::man_mask) << (23 - R::mb));
      const std::uint64_t want_d =
          (static_cast<std::uint64_t>(quiet_bits & 0x8000U) << 48) | 0x7FF0000000000000ULL |
          (static_cast<std::uint64_t>(quiet_bits & R::man_mask) << (52 - R::mb));
      if (!std::isnan(f) || !std::isnan(d) || std::signbit(f) != ((b & 0x8000U) != 0)) {
        ++fails;
        FAIL_CHECK(what() << " did not convert to a NaN of the same sign");
      }
      EXPECT_EQ_COUNTED(fails, fb, want_f, what() << " -> float");
      EXPECT_EQ_COUNTED(fails, db, want_d, what() << " -> double");
      EXPECT_EQ_COUNTED(fails, T(f).to_bits(), quiet_bits, what() << " -> float -> back");
      EXPECT_EQ_COUNTED(fails, T(d).to_bits(), quiet_bits, what() << " -> double -> back");
      continue;
    }
    double want = 0;
    if ((b & 0x7FFFU) == R::inf_bits) {
      want = (b & 0x8000U) ? -std::numeric_limits<double>::infinity()
                           : std::numeric_limits<double>::infinity();
    } else {
      want = R::decode(b);
    }
    EXPECT_EQ_COUNTED(fails, fb, std::bit_cast<std::uint32_t>(static_cast<float>(want)),
                      what() << " -> float");
    EXPECT_EQ_COUNTED(fails, db, std::bit_cast<std::uint64_t>(want), what() << " -> double");
    EXPECT_EQ_COUNTED(fails, T(f).to_bits(), b, what() << " -> float -> back");
    EXPECT_EQ_COUNTED(fails, T(d).to_bits(), b, what() << " -> double -> back");
    EXPECT_EQ_COUNTED(fails, T(want).to_bits(), b, what() << " reference value -> back");
  }
  CHECK(fails == 0);
  CHECK(nans == 2 * static_cast<int>(R::man_mask));
}

TEST_CASE_TEMPLATE("float16: rounding at every midpoint between adjacent values", T, half,
                   bfloat16) {
  using R = ref<T>;
  REQUIRE(std::fegetround() == FE_TONEAREST);
  const double inf = std::numeric_limits<double>::infinity();
  int fails = 0;
  // Every pair (lo, hi) of adjacent non-negative values, including (max, inf) whose "midpoint"
  // is the overflow threshold max + ulp/2.
  for (unsigned b = 0; b <= R::max_bits; ++b) {
    const double lo = R::decode(b);
    const double hi = b + 1 == R::inf_bits ? std::ldexp(1.0, R::emax + 1) : R::decode(b + 1);
    const double mid = (lo + hi) / 2;
    const auto mid_f = static_cast<float>(mid);
    REQUIRE(static_cast<double>(mid_f) == mid);
    const unsigned even = (b & 1U) ? b + 1 : b;
    for (const unsigned sign : {0U, 0x8000U}) {
      const double s = sign ? -1.0 : 1.0;
      const float sf = sign ? -1.0f : 1.0f;
      const auto what = [&] {
        return std::string(type_name<T>()) + " between " + hex(b | sign) + " and " +
               hex((b + 1) | sign);
      };
      // float inputs: the midpoint and its float neighbours.
      const float fm = sf * mid_f;
      EXPECT_EQ_COUNTED(fails, T(fm).to_bits(), even | sign, what() << ", float tie " << show(fm));
      const float fa = std::nextafter(fm, sf * std::numeric_limits<float>::infinity());
      EXPECT_EQ_COUNTED(fails, T(fa).to_bits(), (b + 1) | sign, what() << ", float " << show(fa));
      const float fb = std::nextafter(fm, 0.0f);
      EXPECT_EQ_COUNTED(fails, T(fb).to_bits(), b | sign, what() << ", float " << show(fb));
      // double inputs: the midpoint and its double neighbours (closer than any float, so these
      // catch double rounding through float).
      const double dm = s * mid;
      EXPECT_EQ_COUNTED(fails, T(dm).to_bits(), even | sign, what() << ", double tie " << show(dm));
      const double da = std::nextafter(dm, s * inf);
      EXPECT_EQ_COUNTED(fails, T(da).to_bits(), (b + 1) | sign, what() << ", double " << show(da));
      const double db = std::nextafter(dm, 0.0);
      EXPECT_EQ_COUNTED(fails, T(db).to_bits(), b | sign, what() << ", double " << show(db));
      // The reference agrees (guards the reference itself).
      EXPECT_EQ_COUNTED(fails, R::expected_bits(dm), even | sign, what() << ", reference tie");
      EXPECT_EQ_COUNTED(fails, R::expected_bits(da), (b + 1) | sign, what() << ", reference up");
      EXPECT_EQ_COUNTED(fails, R::expected_bits(db), b | sign, what() << ", reference down");
    }
  }
  CHECK(fails == 0);
}

TEST_CASE_TEMPLATE("float16: random floats and doubles match the reference", T, half, bfloat16) {
  using R = ref<T>;
  REQUIRE(std::fegetround() == FE_TONEAREST);
  splitmix64 rng{std::is_same_v<T, half> ? 0x1234567ULL : 0x7654321ULL};
  int fails = 0;
  constexpr int float_samples = 1'000'000;
  for (int i = 0; i < float_samples; ++i) {
    const auto f = std::bit_cast<float>(random_float_bits<T>(rng));
    if (std::isnan(f)) {
      continue;  // NaNs are covered separately
    }
    EXPECT_EQ_COUNTED(fails, T(f).to_bits(), R::expected_bits(f),
                      type_name<T>() << "(" << show(f) << ")");
  }
  constexpr int double_samples = 500'000;
  for (int i = 0; i < double_samples; ++i) {
    const auto d = std::bit_cast<double>(random_double_bits<T>(rng));
    if (std::isnan(d)) {
      continue;
    }
    EXPECT_EQ_COUNTED(fails, T(d).to_bits(), R::expected_bits(d),
                      type_name<T>() << "(" << show(d) << ")");
  }
  CHECK(fails == 0);
}

#ifdef __FLT16_MAX__
TEST_CASE("half: matches the compiler's _Float16 conversions") {
  splitmix64 rng{0xF16F16ULL};
  int fails = 0;
  for (unsigned b = 0; b <= 0xFFFFU; ++b) {
    const auto h = std::bit_cast<_Float16>(static_cast<std::uint16_t>(b));
    if (h != h) {
      continue;
    }
    EXPECT_EQ_COUNTED(fails,
                      std::bit_cast<std::uint32_t>(
                          static_cast<float>(half::from_bits(static_cast<std::uint16_t>(b)))),
                      std::bit_cast<std::uint32_t>(static_cast<float>(h)), "to float " << hex(b));
  }
  for (int i = 0; i < 1'000'000; ++i) {
    const auto f = std::bit_cast<float>(random_float_bits<half>(rng));
    const auto want = static_cast<_Float16>(f);
    const std::uint16_t got = half(f).to_bits();
    if (std::isnan(f)) {
      EXPECT_EQ_COUNTED(fails, got & 0xFE00U, std::bit_cast<std::uint16_t>(want) & 0xFE00U,
                        "NaN " << show(f));
    } else {
      EXPECT_EQ_COUNTED(fails, got, std::bit_cast<std::uint16_t>(want), "half(" << show(f) << ")");
    }
  }
  for (int i = 0; i < 500'000; ++i) {
    const auto d = std::bit_cast<double>(random_double_bits<half>(rng));
    if (std::isnan(d)) {
      continue;
    }
    const auto want = static_cast<_Float16>(d);
    EXPECT_EQ_COUNTED(fails, half(d).to_bits(), std::bit_cast<std::uint16_t>(want),
                      "half(" << show(d) << ")");
  }
  CHECK(fails == 0);
}
#endif

TEST_CASE("half: overflow, underflow and signed zero") {
  CHECK(half(65504.0f).to_bits() == 0x7BFF);
  CHECK(half(65520.0f).to_bits() == 0x7C00);  // max + ulp/2 ties to even = infinity
  CHECK(half(std::nextafter(65520.0f, 0.0f)).to_bits() == 0x7BFF);
  CHECK(half(std::nextafter(65520.0, 0.0)).to_bits() == 0x7BFF);
  CHECK(half(-65520.0).to_bits() == 0xFC00);
  CHECK(half(std::numeric_limits<float>::max()).to_bits() == 0x7C00);
  CHECK(half(-1e300).to_bits() == 0xFC00);
  CHECK(half(std::numeric_limits<float>::infinity()).to_bits() == 0x7C00);
  CHECK(half(-std::numeric_limits<double>::infinity()).to_bits() == 0xFC00);
  CHECK(half(0x1p-25f).to_bits() == 0x0000);  // half the smallest subnormal: ties to 0 (even)
  CHECK(half(-0x1p-25f).to_bits() == 0x8000);
  CHECK(half(std::nextafter(0x1p-25f, 1.0f)).to_bits() == 0x0001);
  CHECK(half(std::nextafter(0x1p-25, 1.0)).to_bits() == 0x0001);
  CHECK(half(0x1.8p-24f).to_bits() == 0x0002);  // 1.5 subnormal ulps ties to 2 (even)
  CHECK(half(0x1p-26f).to_bits() == 0x0000);
  CHECK(half(std::numeric_limits<float>::denorm_min()).to_bits() == 0x0000);
  CHECK(half(-std::numeric_limits<double>::denorm_min()).to_bits() == 0x8000);
  CHECK(half(0x1.ff8p-15f).to_bits() == 0x03FF);  // largest subnormal
  CHECK(half(0x1.ffcp-15f).to_bits() == 0x0400);  // ties to even: up into the normal range
  CHECK(half(std::nextafter(0x1.ffcp-15f, 0.0f)).to_bits() == 0x03FF);
  CHECK(half(-0.0f).to_bits() == 0x8000);
  CHECK(half(-0.0).to_bits() == 0x8000);
  CHECK(std::signbit(static_cast<float>(half::from_bits(0x8000))));
}

TEST_CASE("bfloat16: overflow, underflow and signed zero") {
  const float max = 0x1.FEp127f;
  CHECK(bfloat16(max).to_bits() == 0x7F7F);
  CHECK(bfloat16(0x1.FFp127f).to_bits() == 0x7F80);  // max + ulp/2 ties to even = infinity
  CHECK(bfloat16(std::nextafter(0x1.FFp127f, 0.0f)).to_bits() == 0x7F7F);
  CHECK(bfloat16(std::numeric_limits<float>::max()).to_bits() == 0x7F80);
  CHECK(bfloat16(-static_cast<double>(std::numeric_limits<float>::max())).to_bits() == 0xFF80);
  CHECK(bfloat16(0x1.FFp127).to_bits() == 0x7F80);
  CHECK(bfloat16(std::nextafter(0x1.FFp127, 0.0)).to_bits() == 0x7F7F);
  CHECK(bfloat16(1e300).to_bits() == 0x7F80);
  CHECK(bfloat16(-std::numeric_limits<float>::infinity()).to_bits() == 0xFF80);
  CHECK(bfloat16(0x1p-134f).to_bits() == 0x0000);  // half the smallest subnormal: ties to 0
  CHECK(bfloat16(-0x1p-134f).to_bits() == 0x8000);
  CHECK(bfloat16(std::nextafter(0x1p-134f, 1.0f)).to_bits() == 0x0001);
  CHECK(bfloat16(std::nextafter(0x1p-134, 1.0)).to_bits() == 0x0001);
  CHECK(bfloat16(0x1.8p-133f).to_bits() == 0x0002);
  CHECK(bfloat16(std::numeric_limits<float>::denorm_min()).to_bits() == 0x0000);
  CHECK(bfloat16(1e-50).to_bits() == 0x0000);
  CHECK(bfloat16(-std::numeric_limits<double>::denorm_min()).to_bits() == 0x8000);
  CHECK(bfloat16(0x1p-133f).to_bits() == 0x0001);
  CHECK(bfloat16(-0.0f).to_bits() == 0x8000);
  CHECK(bfloat16(-0.0).to_bits() == 0x8000);
}

TEST_CASE("float16: double inputs are rounded directly, not through float") {
  // 1 + 2^-11 + 2^-40 lies just above the midpoint of 1 and the next half; through float the
  // 2^-40 is lost, leaving an exact tie that rounds down to 1.
  const double d = 1.0 + 0x1p-11 + 0x1p-40;
  CHECK(half(static_cast<float>(d)).to_bits() == 0x3C00);  // the double-rounding trap
  CHECK(half(d).to_bits() == 0x3C01);
  CHECK(half(-d).to_bits() == 0xBC01);
  // The same in the subnormal range: just above half the smallest subnormal.
  CHECK(half(static_cast<float>(0x1p-25 + 0x1p-60)).to_bits() == 0x0000);
  CHECK(half(0x1p-25 + 0x1p-60).to_bits() == 0x0001);

  const double e = 1.0 + 0x1p-8 + 0x1p-40;
  CHECK(bfloat16(static_cast<float>(e)).to_bits() == 0x3F80);
  CHECK(bfloat16(e).to_bits() == 0x3F81);
  CHECK(bfloat16(-e).to_bits() == 0xBF81);
  // Below float's range entirely (a double subnormal-ish value), just above half of 2^-133.
  CHECK(bfloat16(static_cast<float>(0x1p-134 + 0x1p-170)).to_bits() == 0x0000);
  CHECK(bfloat16(0x1p-134 + 0x1p-170).to_bits() == 0x0001);
}

TEST_CASE_TEMPLATE("float16: NaN conversions never produce infinity", T, half, bfloat16) {
  using R = ref<T>;
  const unsigned nan_exp = R::inf_bits;
  // Payload only in the low bits, which do not fit: must still be a (quiet) NaN.
  CHECK(T(std::bit_cast<float>(0x7F800001U)).to_bits() == (nan_exp | R::quiet));
  CHECK(T(std::bit_cast<float>(0xFF800001U)).to_bits() == (0x8000U | nan_exp | R::quiet));
  CHECK(T(std::bit_cast<double>(0x7FF0000000000001ULL)).to_bits() == (nan_exp | R::quiet));
  CHECK(T(std::bit_cast<double>(0xFFF0000000000001ULL)).to_bits() ==
        (0x8000U | nan_exp | R::quiet));
  // A signalling NaN with a payload bit just below the quiet bit keeps that bit.
  const unsigned payload = R::quiet >> 1;
  CHECK(T(std::bit_cast<float>(0x7FA00000U)).to_bits() == (nan_exp | R::quiet | payload));
  CHECK(T(std::bit_cast<double>(0xFFF4000000000000ULL)).to_bits() ==
        (0x8000U | nan_exp | R::quiet | payload));
  CHECK(T(std::numeric_limits<float>::quiet_NaN()).to_bits() == (nan_exp | R::quiet));
  CHECK(T(-std::numeric_limits<double>::quiet_NaN()).to_bits() == (0x8000U | nan_exp | R::quiet));
}

// ---------------------------------------------------------------------------------------------
// Block converters (tutti/core/convert16.hpp).

// The lanes are constexpr (a few cases here; the tests below check them all at run time).
static_assert(tutti::detail::float_to_half_lane(0x3F800000U) == 0x3C00);      // 1
static_assert(tutti::detail::float_to_half_lane(0x33000000U) == 0x0000);      // 2^-25: tie to 0
static_assert(tutti::detail::float_to_half_lane(0x33C00000U) == 0x0002);      // 1.5 * 2^-24
static_assert(tutti::detail::float_to_half_lane(0x477FF000U) == 0x7C00);      // 65520: to inf
static_assert(tutti::detail::float_to_half_lane(0xFF800001U) == 0xFE00);      // sNaN: quiet
static_assert(tutti::detail::half_to_float_lane(0x0001U) == 0x33800000U);     // 2^-24
static_assert(tutti::detail::half_to_float_lane(0xFD01U) == 0xFFE02000U);     // sNaN: quiet
static_assert(tutti::detail::float_to_bfloat16_lane(0x3F808000U) == 0x3F80);  // tie to even
static_assert(tutti::detail::float_to_bfloat16_lane(0x7F800001U) == 0x7FC0);  // sNaN: quiet
static_assert(tutti::detail::bfloat16_to_float_lane(0xFF81U) == 0xFFC10000U);

template <class T>
struct block_impl {
  std::string name;
  void (*to_float)(const T*, float*, std::size_t) noexcept;
  void (*from_float)(const float*, T*, std::size_t) noexcept;
};

// The block converters built for level L.
template <class T, tutti::detail::simd_level L>
block_impl<T> block_impl_at(const char* name) {
  return {name,
          [](const T* s, float* o, std::size_t n) noexcept {
            tutti::detail::convert_to_float(s, o, n, L);
          },
          [](const float* s, T* o, std::size_t n) noexcept {
            tutti::detail::convert_from_float(s, o, n, L);
          }};
}

// Every implementation this build and CPU can run: the portable loops, F16C (half), the AVX2
// and AVX-512 builds (x86-64 with GCC or Clang, when the CPU has them), and the dispatching
// entry points the kernels call.
template <class T>
std::vector<block_impl<T>> block_impls() {
  namespace d = tutti::detail;
  using level = d::simd_level;
  std::vector<block_impl<T>> v;
  v.push_back(
      {"portable::",
       [](const T* s, float* o, std::size_t n) noexcept { d::portable::convert_to_float(s, o, n); },
       [](const float* s, T* o, std::size_t n) noexcept {
         d::portable::convert_from_float(s, o, n);
       }});
  v.push_back(
      {"dispatched",
       [](const T* s, float* o, std::size_t n) noexcept { d::convert_to_float(s, o, n); },
       [](const float* s, T* o, std::size_t n) noexcept { d::convert_from_float(s, o, n); }});
  v.push_back(block_impl_at<T, level::portable>("portable"));
  const level best = d::supported_simd_level();
  if (best >= level::f16c) v.push_back(block_impl_at<T, level::f16c>("f16c"));
  if (best >= level::avx2) v.push_back(block_impl_at<T, level::avx2>("avx2"));
  if (best >= level::avx512) v.push_back(block_impl_at<T, level::avx512>("avx512"));
  if (best < level::avx512) {
    MESSAGE("this build or CPU lacks SIMD level " << static_cast<int>(best) + 1
                                                  << " and above: those are not tested");
  }
  return v;
}

// Calls `fn(offset, count)` over [0, n) in pieces of varying length (tails of every length
// below 16, unaligned starts, whole blocks), so that every path through a converter runs.
template <class Fn>
void in_pieces(std::size_t n, Fn fn) {
  static constexpr std::size_t lengths[] = {1, 7, 8, 9, 15, 16, 17, 31, 33, 255, 256, 1000, 4099};
  std::size_t k = 0;
  for (std::size_t i = 0; i < n; ++k) {
    const std::size_t len = std::min(lengths[k % std::size(lengths)], n - i);
    fn(i, len);
    i += len;
  }
}

// Float bit patterns that exercise every case of the narrowing conversions: zeros, infinities,
// NaNs of every sign, quietness and 10-bit high payload (with low payload bits that must be
// dropped), float subnormals, every value of T and every midpoint between adjacent values of T
// (the ties) with their float neighbours, and the overflow threshold.
template <class T>
std::vector<std::uint32_t> edge_float_bits() {
  std::vector<std::uint32_t> v;
  for (const std::uint32_t sign : {0U, 0x80000000U}) {
    v.push_back(sign);
    v.push_back(sign | 0x7F800000U);
    for (std::uint32_t high = 0; high < 1024; ++high) {
      for (const std::uint32_t low : {0U, 1U, 0x1000U, 0x1FFFU, 0x0AAAU}) {
        const std::uint32_t man = (high << 13) | low;
        if (man != 0) {
          v.push_back(sign | 0x7F800000U | man);
        }
      }
    }
    for (const std::uint32_t sub : {1U, 2U, 0x1000U, 0x400000U, 0x7FFFFFU, 0x123457U}) {
      v.push_back(sign | sub);
    }
    for (unsigned b = 0; b < ref<T>::inf_bits; ++b) {
      const auto lo = static_cast<float>(T::from_bits(static_cast<std::uint16_t>(b)));
      const float hi = b + 1 == ref<T>::inf_bits
                           ? static_cast<float>(std::ldexp(1.0, ref<T>::emax + 1))
                           : static_cast<float>(T::from_bits(static_cast<std::uint16_t>(b + 1)));
      const float mid = lo + (hi - lo) / 2;  // exact: float has enough bits
      for (const float x : {lo, mid}) {
        const auto bits = std::bit_cast<std::uint32_t>(x);
        for (std::uint32_t delta = 0; delta <= 2; ++delta) {
          v.push_back(sign | (bits + delta));
          if (bits >= delta) {
            v.push_back(sign | (bits - delta));
          }
        }
      }
    }
  }
  return v;
}

TEST_CASE_TEMPLATE("float16: block converters match the scalar ones on every 16-bit pattern", T,
                   half, bfloat16) {
  std::vector<T> src(0x10000);
  for (unsigned b = 0; b <= 0xFFFFU; ++b) src[b] = T::from_bits(static_cast<std::uint16_t>(b));
  for (const auto& impl : block_impls<T>()) {
    CAPTURE(impl.name);
    std::vector<float> wide(src.size());
    in_pieces(src.size(), [&](std::size_t i, std::size_t n) {
      impl.to_float(src.data() + i, wide.data() + i, n);
    });
    std::vector<T> back(src.size());
    in_pieces(src.size(), [&](std::size_t i, std::size_t n) {
      impl.from_float(wide.data() + i, back.data() + i, n);
    });
    int fails = 0;
    for (unsigned b = 0; b <= 0xFFFFU; ++b) {
      const auto want = static_cast<float>(src[b]);
      EXPECT_EQ_COUNTED(
          fails, std::bit_cast<std::uint32_t>(wide[b]), std::bit_cast<std::uint32_t>(want),
          std::string(type_name<T>()) << " " << impl.name << " bits " << hex(b) << " -> float");
      EXPECT_EQ_COUNTED(fails, back[b].to_bits(), T(want).to_bits(),
                        std::string(type_name<T>())
                            << " " << impl.name << " bits " << hex(b) << " -> float -> back");
    }
    CHECK(fails == 0);
  }
}

// The scalar narrowing of every pattern in `bits`, compared with each block implementation;
// returns the number of mismatches.
template <class T>
int check_narrowing(const std::vector<std::uint32_t>& bits, const std::string& what) {
  std::vector<float> src(bits.size());
  std::vector<std::uint16_t> want(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) {
    src[i] = std::bit_cast<float>(bits[i]);
    want[i] = T(src[i]).to_bits();
  }
  int fails = 0;
  for (const auto& impl : block_impls<T>()) {
    std::vector<T> got(bits.size());
    in_pieces(src.size(), [&](std::size_t i, std::size_t n) {
      impl.from_float(src.data() + i, got.data() + i, n);
    });
    for (std::size_t i = 0; i < bits.size(); ++i) {
      EXPECT_EQ_COUNTED(fails, got[i].to_bits(), want[i],
                        std::string(type_name<T>())
                            << " " << impl.name << " " << what << " from float " << show(src[i]));
    }
  }
  return fails;
}

TEST_CASE_TEMPLATE(
    "float16: block converters match the scalar ones on edge cases and random floats", T, half,
    bfloat16) {
  CHECK(check_narrowing<T>(edge_float_bits<T>(), "edge case") == 0);
  // Random floats, NaNs included: with exponents near T's range and many ties, and fully
  // random bits; then a sweep across all 2^32 patterns with a prime stride.
  splitmix64 rng{std::is_same_v<T, half> ? 0xB10C16ULL : 0xB10CBFULL};
  std::vector<std::uint32_t> bits;
  bits.reserve(4'000'000);
  for (int i = 0; i < 3'000'000; ++i) bits.push_back(random_float_bits<T>(rng));
  for (int i = 0; i < 1'000'000; ++i) bits.push_back(static_cast<std::uint32_t>(rng()));
  CHECK(check_narrowing<T>(bits, "random") == 0);
  bits.clear();
  bits.reserve((std::uint64_t{1} << 32) / 1021 + 1);
  for (std::uint64_t b = 0; b <= 0xFFFFFFFFULL; b += 1021)
    bits.push_back(static_cast<std::uint32_t>(b));
  CHECK(check_narrowing<T>(bits, "sweep") == 0);
}

TEST_CASE_TEMPLATE("float16: block converters do not depend on the rounding mode", T, half,
                   bfloat16) {
  std::vector<std::uint32_t> bits = edge_float_bits<T>();
  splitmix64 rng{0xF0F0ULL};
  for (int i = 0; i < 200'000; ++i) bits.push_back(random_float_bits<T>(rng));
  std::vector<T> all(0x10000);
  for (unsigned b = 0; b <= 0xFFFFU; ++b) all[b] = T::from_bits(static_cast<std::uint16_t>(b));
  for (const int mode : {FE_DOWNWARD, FE_UPWARD, FE_TOWARDZERO}) {
    CAPTURE(mode);
    REQUIRE(std::fesetround(mode) == 0);
    const int narrowing_fails = check_narrowing<T>(bits, "non-default rounding mode");
    int widening_fails = 0;
    for (const auto& impl : block_impls<T>()) {
      std::vector<float> wide(all.size());
      impl.to_float(all.data(), wide.data(), all.size());
      for (unsigned b = 0; b <= 0xFFFFU; ++b) {
        EXPECT_EQ_COUNTED(widening_fails, std::bit_cast<std::uint32_t>(wide[b]),
                          std::bit_cast<std::uint32_t>(static_cast<float>(all[b])),
                          std::string(type_name<T>())
                              << " " << impl.name << " bits " << hex(b) << " -> float");
      }
    }
    REQUIRE(std::fesetround(FE_TONEAREST) == 0);
    CHECK(narrowing_fails == 0);
    CHECK(widening_fails == 0);
  }
}

/// Random bit patterns, any but NaN: which NaN an operation returns may depend on operand
/// order, so NaN inputs cannot be compared bit for bit.
template <class T, class Rng>
void fill_not_nan(Rng& rng, std::vector<T>& a, std::vector<T>& b) {
  for (auto* v : {&a, &b})
    for (T& x : *v) {
      do {
        x = T::from_bits(static_cast<std::uint16_t>(rng()));
      } while (ref<T>::is_nan(x.to_bits()));
    }
}

TEST_CASE_TEMPLATE("float16: reduce kernels match element-wise float arithmetic", T, half,
                   bfloat16) {
  using tutti::op_kind;
  namespace d = tutti::detail;
  splitmix64 rng{0x5EEDULL};
  // Lengths around the kernels' block of 256 and the converters' vector widths.
  for (const std::size_t n :
       {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{17}, std::size_t{255},
        std::size_t{256}, std::size_t{257}, std::size_t{1000}, std::size_t{4099}}) {
    CAPTURE(n);
    std::vector<T> a(n);
    std::vector<T> b(n);
    fill_not_nan(rng, a, b);
    const auto check = [&](const d::reducer& r, auto elementwise, const std::string& op) {
      int fails = 0;
      for (const bool in_place : {false, true}) {
        std::vector<T> out = in_place ? a : std::vector<T>(n);
        r(out.data(), in_place ? out.data() : a.data(), b.data(), n);
        for (std::size_t i = 0; i < n; ++i) {
          const T want = T(elementwise(static_cast<float>(a[i]), static_cast<float>(b[i])));
          if (ref<T>::is_nan(want.to_bits())) {
            if (!ref<T>::is_nan(out[i].to_bits()) && ++fails <= 8) {
              FAIL_CHECK(op << " at " << i << ": want NaN, got " << hex(out[i].to_bits()));
            }
            continue;
          }
          EXPECT_EQ_COUNTED(fails, out[i].to_bits(), want.to_bits(),
                            std::string(type_name<T>())
                                << " " << op << (in_place ? " in place" : "") << " at " << i);
        }
      }
      CHECK(fails == 0);
    };
    check(
        d::make_reducer<op_kind::sum, T>(), [](float x, float y) { return x + y; }, "sum");
    check(
        d::make_reducer<op_kind::prod, T>(), [](float x, float y) { return x * y; }, "prod");
    check(
        d::make_reducer<op_kind::min, T>(), [](float x, float y) { return y < x ? y : x; }, "min");
    check(
        d::make_reducer<op_kind::max, T>(), [](float x, float y) { return x < y ? y : x; }, "max");
    // avg's final division by the world size.
    const auto avg = d::make_reducer<op_kind::avg, T>();
    for (const int world : {1, 3, 7}) {
      std::vector<T> x = a;
      avg.finish(x.data(), n, world);
      int fails = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const T want = T(static_cast<float>(a[i]) / static_cast<float>(world));
        EXPECT_EQ_COUNTED(fails, x[i].to_bits(), want.to_bits(),
                          std::string(type_name<T>()) << " avg / " << world << " at " << i);
      }
      CHECK(fails == 0);
    }
  }
}

TEST_CASE_TEMPLATE("float16: combine_via_float gives the same bits at every SIMD level", T, half,
                   bfloat16) {
  namespace d = tutti::detail;
  splitmix64 rng{0x1EE7ULL};
  constexpr std::size_t n = 3 * d::via_float_block + 45;
  std::vector<T> a(n);
  std::vector<T> b(n);
  fill_not_nan(rng, a, b);
  for (auto level = d::simd_level::portable; level <= d::supported_simd_level();
       level = static_cast<d::simd_level>(static_cast<int>(level) + 1)) {
    CAPTURE(static_cast<int>(level));
    int fails = 0;
    std::vector<T> sum(n);
    d::combine_via_float(
        sum.data(), a.data(), b.data(), n, [](float x, float y) { return x + y; }, level);
    std::vector<T> prod = b;  // in place, aliasing the second operand
    d::combine_via_float(
        prod.data(), a.data(), prod.data(), n, [](float x, float y) { return x * y; }, level);
    std::vector<T> third = a;  // unary, in place
    d::combine_via_float(
        third.data(), third.data(), static_cast<const T*>(nullptr), n,
        [](float x) { return x / 3.0F; }, level);
    for (std::size_t i = 0; i < n; ++i) {
      const auto x = static_cast<float>(a[i]);
      const auto y = static_cast<float>(b[i]);
      const T want_sum(x + y);
      const T want_prod(x * y);
      if (!ref<T>::is_nan(want_sum.to_bits())) {
        EXPECT_EQ_COUNTED(fails, sum[i].to_bits(), want_sum.to_bits(), "sum at " << i);
      }
      if (!ref<T>::is_nan(want_prod.to_bits())) {
        EXPECT_EQ_COUNTED(fails, prod[i].to_bits(), want_prod.to_bits(), "prod at " << i);
      }
      EXPECT_EQ_COUNTED(fails, third[i].to_bits(), T(x / 3.0F).to_bits(), "x / 3 at " << i);
    }
    CHECK(fails == 0);
  }
}

TEST_CASE_TEMPLATE("float16: comparisons follow IEEE", T, half, bfloat16) {
  using L = std::numeric_limits<T>;
  const T nan = L::quiet_NaN();
  CHECK_FALSE(nan == nan);
  CHECK(nan != nan);
  CHECK((nan <=> T(1.0f)) == std::partial_ordering::unordered);
  CHECK_FALSE(nan < T(1.0f));
  CHECK_FALSE(nan > T(1.0f));
  CHECK(T(0.0f) == T(-0.0f));
  CHECK((T(0.0f) <=> T(-0.0f)) == std::partial_ordering::equivalent);
  CHECK(T(-std::numeric_limits<float>::infinity()) < L::lowest());
  CHECK(L::lowest() < T(-1.0f));
  CHECK(T(-1.0f) <= T(-1.0));
  CHECK(T(-0.0f) < L::denorm_min());
  CHECK(L::max() < L::infinity());
  // Every pair of adjacent non-negative values (up to infinity) is strictly increasing.
  int fails = 0;
  for (unsigned b = 0; b < ref<T>::inf_bits; ++b) {
    const T lo = T::from_bits(static_cast<std::uint16_t>(b));
    const T hi = T::from_bits(static_cast<std::uint16_t>(b + 1));
    const T nlo = T::from_bits(static_cast<std::uint16_t>(b | 0x8000U));
    const T nhi = T::from_bits(static_cast<std::uint16_t>((b + 1) | 0x8000U));
    if (!(lo < hi) || !(nhi < nlo) || !(lo == T::from_bits(static_cast<std::uint16_t>(b))) ||
        (lo <=> hi) != std::partial_ordering::less) {
      ++fails;
    }
  }
  CHECK(fails == 0);
}

TEST_CASE("half: numeric_limits") {
  using L = std::numeric_limits<half>;
  static_assert(L::is_specialized && L::is_signed && !L::is_integer && !L::is_exact);
  static_assert(L::has_infinity && L::has_quiet_NaN && L::has_signaling_NaN);
  static_assert(L::has_denorm == std::denorm_present && L::round_style == std::round_to_nearest);
  static_assert(L::is_iec559 && L::is_bounded && !L::is_modulo && L::radix == 2);
  static_assert(L::digits == 11 && L::digits10 == 3 && L::max_digits10 == 5);
  static_assert(L::min_exponent == -13 && L::max_exponent == 16);
  static_assert(L::min_exponent10 == -4 && L::max_exponent10 == 4);
  static_assert(std::numeric_limits<const half>::is_specialized);
  CHECK(L::max().to_bits() == 0x7BFF);
  CHECK(static_cast<float>(L::max()) == 65504.0f);
  CHECK(L::lowest().to_bits() == 0xFBFF);
  CHECK(static_cast<float>(L::lowest()) == -65504.0f);
  CHECK(L::min().to_bits() == 0x0400);
  CHECK(static_cast<float>(L::min()) == 0x1p-14f);
  CHECK(L::denorm_min().to_bits() == 0x0001);
  CHECK(static_cast<double>(L::denorm_min()) == 0x1p-24);
  CHECK(L::epsilon().to_bits() == 0x1400);
  CHECK(static_cast<float>(half::from_bits(0x3C01)) - 1.0f == static_cast<float>(L::epsilon()));
  CHECK(static_cast<float>(L::round_error()) == 0.5f);
  CHECK(L::infinity().to_bits() == 0x7C00);
  CHECK(std::isinf(static_cast<float>(L::infinity())));
  CHECK(L::quiet_NaN().to_bits() == 0x7E00);
  CHECK(std::isnan(static_cast<float>(L::quiet_NaN())));
  CHECK(ref<half>::is_nan(L::signaling_NaN().to_bits()));
  CHECK((L::signaling_NaN().to_bits() & 0x0200U) == 0);
  // Exponent and digit conventions as for float.
  CHECK(static_cast<double>(L::min()) == std::ldexp(1.0, L::min_exponent - 1));
  CHECK(static_cast<double>(L::max()) < std::ldexp(1.0, L::max_exponent));
  CHECK(std::pow(10.0, L::min_exponent10) >= static_cast<double>(L::min()));
  CHECK(std::pow(10.0, L::min_exponent10 - 1) < static_cast<double>(L::min()));
  CHECK(std::pow(10.0, L::max_exponent10) <= static_cast<double>(L::max()));
  CHECK(std::pow(10.0, L::max_exponent10 + 1) > static_cast<double>(L::max()));
}

TEST_CASE("bfloat16: numeric_limits") {
  using L = std::numeric_limits<bfloat16>;
  using F = std::numeric_limits<float>;
  static_assert(L::is_specialized && L::is_signed && !L::is_integer && !L::is_exact);
  static_assert(L::has_infinity && L::has_quiet_NaN && L::has_signaling_NaN);
  static_assert(L::has_denorm == std::denorm_present && L::round_style == std::round_to_nearest);
  static_assert(!L::is_iec559 && L::is_bounded && !L::is_modulo && L::radix == 2);
  static_assert(L::digits == 8 && L::digits10 == 2 && L::max_digits10 == 4);
  static_assert(L::min_exponent == F::min_exponent && L::max_exponent == F::max_exponent);
  static_assert(L::min_exponent10 == F::min_exponent10 && L::max_exponent10 == F::max_exponent10);
  CHECK(L::max().to_bits() == 0x7F7F);
  CHECK(static_cast<float>(L::max()) == 0x1.FEp127f);
  CHECK(L::lowest().to_bits() == 0xFF7F);
  CHECK(L::min().to_bits() == 0x0080);
  CHECK(static_cast<float>(L::min()) == F::min());
  CHECK(L::denorm_min().to_bits() == 0x0001);
  CHECK(static_cast<double>(L::denorm_min()) == 0x1p-133);
  CHECK(L::epsilon().to_bits() == 0x3C00);
  CHECK(static_cast<float>(L::epsilon()) == 0x1p-7f);
  CHECK(static_cast<float>(bfloat16::from_bits(0x3F81)) - 1.0f == static_cast<float>(L::epsilon()));
  CHECK(static_cast<float>(L::round_error()) == 0.5f);
  CHECK(L::infinity().to_bits() == 0x7F80);
  CHECK(static_cast<float>(L::infinity()) == F::infinity());
  CHECK(L::quiet_NaN().to_bits() == 0x7FC0);
  CHECK(std::isnan(static_cast<float>(L::quiet_NaN())));
  CHECK(ref<bfloat16>::is_nan(L::signaling_NaN().to_bits()));
  CHECK((L::signaling_NaN().to_bits() & 0x0040U) == 0);
}

}  // namespace

#pragma once
// Shared helpers for the collective tests: element types, deterministic inputs whose
// reductions are exact, and references computed in double.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <tutti/tutti.hpp>

#include "harness_common.hpp"

namespace harness {

using all_types =
    std::tuple<std::int8_t, std::uint8_t, std::int16_t, std::uint16_t, std::int32_t, std::uint32_t,
               std::int64_t, std::uint64_t, long long, unsigned long long, tutti::half,
               tutti::bfloat16, float, double, long double, bool, char>;
using all_ops = std::tuple<tutti::sum_t, tutti::prod_t, tutti::min_t, tutti::max_t, tutti::avg_t,
                           tutti::band_t, tutti::bor_t, tutti::bxor_t>;
using all_policies =
    std::tuple<tutti::ring, tutti::tree, tutti::recursive_halving, tutti::recursive_doubling,
               tutti::direct, tutti::bruck, tutti::automatic>;

template <class Tuple, class F>
void for_each_type(F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (f.template operator()<std::tuple_element_t<I, Tuple>>(), ...);
  }(std::make_index_sequence<std::tuple_size_v<Tuple>>{});
}

/// A contiguous buffer of T (std::vector<bool> is not contiguous, so the tests use this).
template <class T>
class buffer {
 public:
  buffer() = default;
  explicit buffer(std::size_t n, T fill = T{}) : n_(n), p_(new T[n]) {
    for (std::size_t i = 0; i < n; ++i) p_[i] = fill;
  }
  buffer(const buffer& o) : buffer(o.n_) {
    for (std::size_t i = 0; i < n_; ++i) p_[i] = o.p_[i];
  }
  buffer& operator=(const buffer& o) {
    buffer t(o);
    std::swap(n_, t.n_);
    std::swap(p_, t.p_);
    return *this;
  }
  [[nodiscard]] std::size_t size() const noexcept { return n_; }
  T* data() noexcept { return p_.get(); }
  const T* data() const noexcept { return p_.get(); }
  T& operator[](std::size_t i) noexcept { return p_[i]; }
  const T& operator[](std::size_t i) const noexcept { return p_[i]; }
  T* begin() noexcept { return p_.get(); }
  T* end() noexcept { return p_.get() + n_; }
  const T* begin() const noexcept { return p_.get(); }
  const T* end() const noexcept { return p_.get() + n_; }
  operator std::span<T>() noexcept { return {p_.get(), n_}; }
  operator std::span<const T>() const noexcept { return {p_.get(), n_}; }
  friend bool operator==(const buffer& a, const buffer& b) {
    if (a.n_ != b.n_) return false;
    for (std::size_t i = 0; i < a.n_; ++i)
      if (!(a.p_[i] == b.p_[i])) return false;
    return true;
  }

 private:
  std::size_t n_ = 0;
  std::unique_ptr<T[]> p_;
};

/// Sanitizer builds run the largest counts on fewer world sizes (Release runs all).
using tutti_harness::sanitized;
/// ThreadSanitizer's build, where every sweep runs about four times slower than under ASan and
/// looks for races, which need two threads or processes, not every world size or policy.
#if defined(__SANITIZE_THREAD__)
inline constexpr bool thread_sanitized = true;
#else
inline constexpr bool thread_sanitized = false;
#endif
inline constexpr std::size_t large_count = std::size_t{1} << 20;

/// One element type of each size and kind (1, 2, 4, 8 and 16 bytes; signed, unsigned, both
/// 16-bit floats, float, double, long double, bool): what a transport or policy does
/// differently per type is its byte count, alignment and reduction kernel.
using representative_types =
    std::tuple<std::int8_t, std::uint16_t, std::int32_t, std::uint64_t, tutti::half,
               tutti::bfloat16, float, double, long double, bool>;
/// Under the sanitizers, one type of each size (1, 2, 4, 8 and 16 bytes; integer and
/// floating) and bool (whose loads UBSan checks): what ASan, UBSan and TSan look for in a
/// transport or policy depends on the bytes it moves and their alignment, and every type is
/// an instantiation of the whole sweep, minutes of compile there.
using sanitizer_types =
    std::tuple<std::int8_t, tutti::half, std::int32_t, double, long double, bool>;
/// The element types of the collective sweeps (tests/suite.hpp): all of them in Release;
/// sanitizer_types under the sanitizers (test_collectives' sweep took 222 s to compile under
/// ASan+UBSan with all 17, 183 s with 10): the types left out add no code path that the kept
/// ones do not take, and Release runs them all.
using sweep_types = std::conditional_t<tutti_harness::few_types, sanitizer_types, all_types>;
/// The element types of a sweep whose types another sweep runs in full (test_shm, and
/// test_collectives' policies but automatic): representative_types in Release,
/// sanitizer_types under the sanitizers.
using representative_sweep_types =
    std::conditional_t<tutti_harness::few_types, sanitizer_types, representative_types>;

/// The world sizes of the collective sweeps over inproc and shm (test_collectives, test_shm):
/// 1-8 in Release; under the sanitizers 6 and 7 are left out (what a world of 6 or 7 adds, a
/// fold of 2 or 3 ranks into a power of two, 3 and 5 take too), and under TSan 5 as well (a
/// fold of one rank, as 3's) and 8 (eight threads on CI's two cores, the TSan pass's dearest
/// world; a race needs two threads, and 4 keeps a power of two), so that CI's sanitizer
/// passes stay within its budget.
[[nodiscard]] inline std::vector<int> sweep_world_sizes() {
  if (thread_sanitized) return {1, 2, 3, 4};
  if (sanitized) return {1, 2, 3, 4, 5, 8};
  return {1, 2, 3, 4, 5, 6, 7, 8};
}
/// Whether the collective sweeps (test_collectives, test_gloo, test_shm) run policy P: every
/// policy in Release and under ASan+UBSan, whose findings (an offset past a buffer, a bad
/// load) live in each policy's own schedule. Under TSan a schedule is one thread's code; a
/// race lives in what the schedules share, the transport and its progress thread, so TSan
/// sweeps the policies that ask the transport for different things: ring (a pipelined chain,
/// one message each way a step), recursive_halving (exchanges with one partner a step, halving
/// sizes, a fold at odd world sizes), direct (every peer at once) and native (the backend's
/// own collectives). Not automatic (it runs those schedules again: about 40% of test_gloo),
/// tree, recursive_doubling or bruck. A policy left out is not even instantiated (if
/// constexpr): TSan's compile pays only for what it runs.
template <class P>
inline constexpr bool sweeps_policy =
    !thread_sanitized || std::is_same_v<P, tutti::ring> ||
    std::is_same_v<P, tutti::recursive_halving> || std::is_same_v<P, tutti::direct> ||
    std::is_same_v<P, tutti::native>;

template <class T>
inline constexpr bool is_signed_v = std::is_signed_v<T> || !std::is_integral_v<T>;

/// input() reads its index modulo input_period, so reference() repeats every input_period
/// indices too; datum() repeats every datum_period (97, and 2 for bool). The sweeps compute
/// one period of what they fill or compare against and walk it (tests/suite.hpp).
inline constexpr std::size_t input_period = 1009;
inline constexpr std::size_t datum_period = 2 * 97;

/// Input of rank r at index i for op k: small integers whose sums, products, minima and bit
/// operations are exact in every element type, on up to 8 ranks.
template <class T>
double input(tutti::op_kind k, int r, std::size_t i) {
  const auto ri = static_cast<long long>(r), ii = static_cast<long long>(i % input_period);
  if constexpr (std::is_same_v<T, bool>) return double((ri + ii) % 2);
  switch (k) {
    case tutti::op_kind::prod: {
      const long long m = (ri * 5 + ii) % 6;
      if (m == 0) return 2;
      if (m == 1 && is_signed_v<T>) return -1;
      return 1;
    }
    case tutti::op_kind::min:
    case tutti::op_kind::max:
      return double((ri * 5 + ii * 7) % 13 - (is_signed_v<T> ? 6 : 0) +
                    (std::is_same_v<T, char> ? 40 : 0));
    case tutti::op_kind::band:
    case tutti::op_kind::bor:
    case tutti::op_kind::bxor:
      return double((ri * 37 + ii * 11) % 128);
    default:
      return double((ri * 7 + ii * 3) % 11 - (is_signed_v<T> ? 5 : 0));
  }
}

template <class T>
T to(double v) {
  if constexpr (std::is_same_v<T, tutti::half> || std::is_same_v<T, tutti::bfloat16>)
    return T(v);
  else
    return static_cast<T>(v);
}
template <class T>
double from(T v) {
  if constexpr (std::is_same_v<T, tutti::half> || std::is_same_v<T, tutti::bfloat16>)
    return static_cast<double>(v);
  else
    return static_cast<double>(v);
}

/// The reduction of `input` over ranks 0..p-1 at index i, in double (integers exact).
template <class T>
double reference(tutti::op_kind k, int p, std::size_t i) {
  double acc = input<T>(k, 0, i);
  auto ai = static_cast<long long>(acc);
  for (int r = 1; r < p; ++r) {
    const double v = input<T>(k, r, i);
    const auto vi = static_cast<long long>(v);
    switch (k) {
      case tutti::op_kind::sum:
      case tutti::op_kind::avg:
        acc += v;
        break;
      case tutti::op_kind::prod:
        acc *= v;
        break;
      case tutti::op_kind::min:
        acc = std::min(acc, v);
        break;
      case tutti::op_kind::max:
        acc = std::max(acc, v);
        break;
      case tutti::op_kind::band:
        ai &= vi;
        break;
      case tutti::op_kind::bor:
        ai |= vi;
        break;
      case tutti::op_kind::bxor:
        ai ^= vi;
        break;
      default:
        break;
    }
  }
  if (k == tutti::op_kind::band || k == tutti::op_kind::bor || k == tutti::op_kind::bxor)
    return double(ai);
  if (k == tutti::op_kind::avg) {
    if constexpr (std::is_integral_v<T>) return double(static_cast<long long>(acc) / p);
    return acc / p;
  }
  return acc;
}

/// Exact equality, except avg on floating types: within a few units in the last place.
template <class T>
bool matches(tutti::op_kind k, T got, double want) {
  const double g = from(got);
  if (k == tutti::op_kind::avg && !std::is_integral_v<T>) {
    const double tol = std::is_same_v<T, tutti::half> || std::is_same_v<T, tutti::bfloat16>
                           ? 1e-2
                           : (std::is_same_v<T, float> ? 1e-6 : 1e-12);
    return std::abs(g - want) <= tol * std::max(1.0, std::abs(want));
  }
  return g == from(to<T>(want));
}

/// A plain value for data-movement collectives: distinct per (rank, index), exact in T.
template <class T>
T datum(int r, std::size_t i) {
  if constexpr (std::is_same_v<T, bool>) return ((r + i) % 2) != 0;
  return to<T>(double((static_cast<std::size_t>(r) * 13 + i * 5) % 97));
}

}  // namespace harness

// Exact tests of tutti's core: reduce kernels, the reducible concept, dtype tags, tutti::error,
// the TUTTI_TIMEOUT and TUTTI_ALGO parsers, and automatic's policy choice.
//
// Kernels are compared element for element against a scalar reference written independently
// of reduce.hpp: integer arithmetic goes through std::uint64_t (wrap-around, no UB), 16-bit
// floats through float, every other type in its own arithmetic. Comparisons are exact (bit
// patterns for the 16-bit floats).

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "harness.hpp"
#include "tutti/detail/gloo/costs.hpp"
#include "tutti/detail/schedules.hpp"
#include "tutti/tutti.hpp"

namespace {

using tutti::op_kind;
using tutti::detail::collective;

// ---------------------------------------------------------------------------------------------
// Reference arithmetic.

template <class T>
constexpr bool is_float16 = std::is_same_v<T, tutti::half> || std::is_same_v<T, tutti::bfloat16>;

template <class T>
bool same(T x, T y) {
  if constexpr (is_float16<T>)
    return x.to_bits() == y.to_bits();
  else
    return x == y;
}

template <class T>
double printable(T x) {
  if constexpr (is_float16<T>)
    return static_cast<double>(static_cast<float>(x));
  else
    return static_cast<double>(x);
}

// d = a op b, computed without looking at reduce.hpp.
template <op_kind K, class T>
T reference(T a, T b) {
  if constexpr (is_float16<T>) {
    const float x = static_cast<float>(a), y = static_cast<float>(b);
    return T(reference<K, float>(x, y));
  } else if constexpr (K == op_kind::min) {
    return b < a ? b : a;
  } else if constexpr (K == op_kind::max) {
    return a < b ? b : a;
  } else if constexpr (std::is_integral_v<T>) {
    // Through 64-bit unsigned: conversions to T are modular (C++20), so this is the wrapped
    // two's complement result for every width.
    // NOLINTNEXTLINE(bugprone-signed-char-misuse): sign extension is the point
    const auto x = static_cast<std::uint64_t>(a), y = static_cast<std::uint64_t>(b);
    std::uint64_t z = 0;
    if constexpr (K == op_kind::sum || K == op_kind::avg)
      z = x + y;
    else if constexpr (K == op_kind::prod)
      z = x * y;
    else if constexpr (K == op_kind::band)
      z = x & y;
    else if constexpr (K == op_kind::bor)
      z = x | y;
    else
      z = x ^ y;
    return static_cast<T>(z);
  } else {
    if constexpr (K == op_kind::sum || K == op_kind::avg)
      return a + b;
    else
      return a * b;
  }
}

// avg's final step: integer division truncates toward zero, floats divide.
template <class T>
T reference_divide(T x, int world) {
  if constexpr (is_float16<T>)
    return T(static_cast<float>(x) / static_cast<float>(world));
  else if constexpr (std::is_floating_point_v<T>)
    return x / static_cast<T>(world);
  else if constexpr (std::is_signed_v<T>)
    return static_cast<T>(static_cast<long long>(x) / world);
  else
    return static_cast<T>(static_cast<unsigned long long>(x) / static_cast<unsigned>(world));
}

using harness::buffer;

// Deterministic inputs spanning the type: full-range integers, small dyadic floats (exact sums
// and products stay far from overflow), and each type's extremes at the front.
template <class T>
buffer<T> make_input(std::size_t n, std::uint32_t seed) {
  std::mt19937_64 gen(seed);
  buffer<T> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t r = gen();
    if constexpr (std::is_same_v<T, bool>) {
      v[i] = (r & 1U) != 0;
    } else if constexpr (std::is_integral_v<T>) {
      v[i] = static_cast<T>(r);  // modular: every bit pattern of T
    } else {
      const auto k = static_cast<int>(r % 2001U) - 1000;  // [-1000, 1000]
      if constexpr (is_float16<T>)
        v[i] = T(static_cast<float>(k) / 16.0f);
      else
        v[i] = static_cast<T>(k) / static_cast<T>(16);
    }
  }
  return v;
}

constexpr std::array<std::size_t, 5> lengths{0, 1, 7, 256, 1000};

// Compares d[i] with reference(a[i], b[i]); reports the first mismatch.
template <op_kind K, class T>
void check_against_reference(const buffer<T>& d, const buffer<T>& a, const buffer<T>& b,
                             const char* how) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < d.size(); ++i) {
    const T want = reference<K, T>(a[i], b[i]);
    if (!same(d[i], want)) {
      if (bad == 0)
        FAIL_CHECK(how << " " << tutti::name(K) << "<" << tutti::name(tutti::dtype_of<T>)
                       << "> n=" << d.size() << " i=" << i << ": " << printable(a[i]) << " op "
                       << printable(b[i]) << " gave " << printable(d[i]) << ", want "
                       << printable(want));
      ++bad;
    }
  }
  CHECK_MESSAGE(bad == 0, how << " " << tutti::name(K) << "<" << tutti::name(tutti::dtype_of<T>)
                              << "> n=" << d.size() << ": " << bad << " mismatches");
}

template <op_kind K, class T>
void check_kernel() {
  const tutti::detail::reducer r = tutti::detail::make_reducer<K, T>();
  CHECK(r.elem_size == sizeof(T));
  CHECK(r.op == K);
  for (std::size_t n : lengths) {
    const auto a = make_input<T>(n, static_cast<std::uint32_t>(n) * 2U + 1U);
    const auto b = make_input<T>(n, static_cast<std::uint32_t>(n) * 2U + 2U);

    buffer<T> d(n);
    r(d.data(), a.data(), b.data(), n);
    check_against_reference<K>(d, a, b, "out-of-place");

    buffer<T> in_a = a;  // d == a
    r(in_a.data(), in_a.data(), b.data(), n);
    check_against_reference<K>(in_a, a, b, "in-place (d == a)");

    buffer<T> in_b = b;  // d == b
    r(in_b.data(), a.data(), in_b.data(), n);
    check_against_reference<K>(in_b, a, b, "in-place (d == b)");

    // n == 0 must not touch the buffers: null pointers are fine.
    if (n == 0) r(nullptr, nullptr, nullptr, 0);
  }
}

// avg = the sum kernel, then finish() divides by the world size.
template <class T>
void check_avg_finish() {
  const tutti::detail::reducer r = tutti::detail::make_reducer<op_kind::avg, T>();
  for (std::size_t n : lengths) {
    for (int world : {1, 2, 3, 4, 7}) {
      const auto a = make_input<T>(n, 11U + static_cast<std::uint32_t>(n));
      const auto b = make_input<T>(n, 12U + static_cast<std::uint32_t>(n));
      buffer<T> d(n);
      r(d.data(), a.data(), b.data(), n);
      const buffer<T> summed = d;
      r.finish(d.data(), n, world);
      std::size_t bad = 0;
      for (std::size_t i = 0; i < n; ++i)
        if (!same(d[i], reference_divide(summed[i], world))) {
          if (bad == 0)
            FAIL_CHECK("avg<" << tutti::name(tutti::dtype_of<T>) << "> finish world=" << world
                              << " i=" << i << ": " << printable(summed[i]) << " / " << world
                              << " gave " << printable(d[i]) << ", want "
                              << printable(reference_divide(summed[i], world)));
          ++bad;
        }
      CHECK(bad == 0);
    }
  }
}

// finish() is a no-op for every op but avg.
template <op_kind K, class T>
void check_finish_is_noop() {
  const tutti::detail::reducer r = tutti::detail::make_reducer<K, T>();
  auto v = make_input<T>(7, 99U);
  const auto before = v;
  r.finish(v.data(), v.size(), 4);
  for (std::size_t i = 0; i < v.size(); ++i) CHECK(same(v[i], before[i]));
}

template <class T, class Op>
int check_op_if_reducible() {
  if constexpr (tutti::reducible<Op, T>) {
    check_kernel<Op::kind, T>();
    if constexpr (Op::kind == op_kind::avg)
      check_avg_finish<T>();
    else
      check_finish_is_noop<Op::kind, T>();
    return 1;
  } else {
    return 0;
  }
}

// Runs every op T admits; returns how many that was.
template <class T>
int check_every_op() {
  return check_op_if_reducible<T, tutti::sum_t>() + check_op_if_reducible<T, tutti::prod_t>() +
         check_op_if_reducible<T, tutti::min_t>() + check_op_if_reducible<T, tutti::max_t>() +
         check_op_if_reducible<T, tutti::avg_t>() + check_op_if_reducible<T, tutti::band_t>() +
         check_op_if_reducible<T, tutti::bor_t>() + check_op_if_reducible<T, tutti::bxor_t>();
}

// Signed and unsigned wrap-around of sum and prod at the edges of every integer type.
template <class T>
void check_integer_wrap() {
  constexpr T lo = std::numeric_limits<T>::min();
  constexpr T hi = std::numeric_limits<T>::max();
  const auto sum = tutti::detail::make_reducer<op_kind::sum, T>();
  const auto prod = tutti::detail::make_reducer<op_kind::prod, T>();
  // 300 elements: crosses a 256-element boundary, so any blocked loop's tail sees the edges.
  buffer<T> a(300, hi), b(300, T{1}), d(300);
  sum(d.data(), a.data(), b.data(), d.size());
  for (T x : d) CHECK(x == lo);  // max + 1 == min
  buffer<T> m(300, lo), minus_one(300, static_cast<T>(-1));
  sum(m.data(), m.data(), minus_one.data(), m.size());
  for (T x : m) CHECK(x == hi);  // min + (-1) == max (unsigned: 0 + max == max)
  buffer<T> half_range(300, static_cast<T>(T{1} << (sizeof(T) * 8 / 2)));
  prod(d.data(), half_range.data(), half_range.data(), d.size());
  for (T x : d) CHECK(x == T{0});  // 2^(w/2) * 2^(w/2) == 2^w == 0
  buffer<T> avg_in(300, hi), avg_out(300);
  const auto avg = tutti::detail::make_reducer<op_kind::avg, T>();
  avg(avg_out.data(), avg_in.data(), b.data(), avg_out.size());  // wraps to min
  avg.finish(avg_out.data(), avg_out.size(), 2);
  for (T x : avg_out) CHECK(x == reference_divide(lo, 2));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// (a) reduce kernels

TEST_CASE_TEMPLATE("every reduce kernel matches the scalar reference", T, std::int8_t, std::uint8_t,
                   std::int16_t, std::uint16_t, std::int32_t, std::uint32_t, std::int64_t,
                   std::uint64_t, long long) {
  CHECK(check_every_op<T>() == 8);
  check_integer_wrap<T>();
}

TEST_CASE_TEMPLATE("every reduce kernel matches the scalar reference (floating)", T, float, double,
                   long double, tutti::half, tutti::bfloat16) {
  CHECK(check_every_op<T>() == 5);  // sum, prod, min, max, avg
}

TEST_CASE_TEMPLATE("every reduce kernel matches the scalar reference (bool, char)", T, bool, char) {
  CHECK(check_every_op<T>() == 5);  // min, max, band, bor, bxor
}

TEST_CASE("int32 sum wraps: INT32_MAX + 1 == INT32_MIN, in place and out of place") {
  const auto r = tutti::detail::make_reducer<op_kind::sum, std::int32_t>();
  std::int32_t a[] = {INT32_MAX, INT32_MIN, -1, 5};
  const std::int32_t b[] = {1, -1, INT32_MIN, -7};
  std::int32_t d[4] = {};
  r(d, a, b, 4);
  CHECK(d[0] == INT32_MIN);
  CHECK(d[1] == INT32_MAX);
  CHECK(d[2] == INT32_MAX);
  CHECK(d[3] == -2);
  r(a, a, b, 4);
  CHECK(a[0] == INT32_MIN);
  CHECK(a[3] == -2);
}

TEST_CASE("avg truncates for integers and divides for floats") {
  {
    const auto r = tutti::detail::make_reducer<op_kind::avg, std::int32_t>();
    std::int32_t x[] = {7, -7, 9, 1};
    r.finish(x, 4, 2);
    CHECK(x[0] == 3);
    CHECK(x[1] == -3);  // truncation toward zero
    CHECK(x[2] == 4);
    CHECK(x[3] == 0);
  }
  {
    const auto r = tutti::detail::make_reducer<op_kind::avg, std::uint8_t>();
    std::uint8_t a[] = {200}, b[] = {100}, d[1] = {};
    r(d, a, b, 1);  // 300 wraps to 44
    r.finish(d, 1, 4);
    CHECK(d[0] == 11);
  }
  {
    const auto r = tutti::detail::make_reducer<op_kind::avg, float>();
    float x[] = {7.0f, -1.0f, 10.0f};
    r.finish(x, 3, 4);
    CHECK(x[0] == 1.75f);
    CHECK(x[1] == -0.25f);
    CHECK(x[2] == 2.5f);
  }
  {
    const auto r = tutti::detail::make_reducer<op_kind::avg, tutti::half>();
    tutti::half x[] = {tutti::half(7.0f), tutti::half(3.0f)};
    r.finish(x, 2, 2);
    CHECK(static_cast<float>(x[0]) == 3.5f);
    CHECK(static_cast<float>(x[1]) == 1.5f);
  }
}

// The world size need not fit in the element type: int8 at 128 ranks, uint8 at 256 ranks.
TEST_CASE("avg divides by world sizes that do not fit the element type") {
  {
    const auto r = tutti::detail::make_reducer<op_kind::avg, std::int8_t>();
    std::int8_t x[] = {-128, 127};
    r.finish(x, 2, 128);
    CHECK(x[0] == -1);
    CHECK(x[1] == 0);
  }
  {
    const auto r = tutti::detail::make_reducer<op_kind::avg, std::int16_t>();
    std::int16_t x[] = {-32768};
    r.finish(x, 1, 32768);
    CHECK(x[0] == -1);
  }
  {
    const auto r = tutti::detail::make_reducer<op_kind::avg, std::uint8_t>();
    std::uint8_t x[] = {255};
    r.finish(x, 1, 200);
    CHECK(x[0] == 1);
    r.finish(x, 1, 256);  // once divided by zero
    CHECK(x[0] == 0);
  }
}

// ---------------------------------------------------------------------------------------------
// (b) static checks

namespace {
struct not_an_element {
  int x;
};
struct not_an_op {};
}  // namespace

static_assert(tutti::reducible<tutti::sum_t, float>);
static_assert(tutti::reducible<tutti::avg_t, tutti::half>);
static_assert(tutti::reducible<tutti::prod_t, tutti::bfloat16>);
static_assert(tutti::reducible<tutti::band_t, std::int32_t>);
static_assert(tutti::reducible<tutti::bxor_t, std::uint8_t>);
static_assert(tutti::reducible<tutti::bor_t, bool>);
static_assert(tutti::reducible<tutti::band_t, char>);
static_assert(tutti::reducible<tutti::max_t, bool>);
static_assert(tutti::reducible<tutti::min_t, char>);
static_assert(tutti::reducible<const tutti::sum_t&, const int>);
static_assert(!tutti::reducible<tutti::band_t, float>);
static_assert(!tutti::reducible<tutti::bor_t, double>);
static_assert(!tutti::reducible<tutti::bxor_t, tutti::half>);
static_assert(!tutti::reducible<tutti::band_t, tutti::bfloat16>);
static_assert(!tutti::reducible<tutti::band_t, long double>);
static_assert(!tutti::reducible<tutti::sum_t, bool>);
static_assert(!tutti::reducible<tutti::prod_t, bool>);
static_assert(!tutti::reducible<tutti::avg_t, bool>);
static_assert(!tutti::reducible<tutti::sum_t, char>);
static_assert(!tutti::reducible<tutti::avg_t, char>);
static_assert(!tutti::reducible<tutti::sum_t, not_an_element>);
static_assert(!tutti::reducible<not_an_op, float>);
static_assert(!tutti::reducible<int, float>);

static_assert(tutti::element<float>);
static_assert(tutti::element<const double>);
static_assert(tutti::element<tutti::half>);
static_assert(tutti::element<bool>);
static_assert(!tutti::element<not_an_element>);
static_assert(!tutti::element<float*>);
static_assert(!tutti::element<void>);
static_assert(tutti::floating_element<tutti::bfloat16>);
static_assert(!tutti::floating_element<int>);
static_assert(tutti::integral_element<bool>);
static_assert(!tutti::integral_element<tutti::half>);

static_assert(tutti::dtype_of<std::int8_t> == tutti::dtype::int8);
static_assert(tutti::dtype_of<std::uint8_t> == tutti::dtype::uint8);
static_assert(tutti::dtype_of<std::int16_t> == tutti::dtype::int16);
static_assert(tutti::dtype_of<std::uint16_t> == tutti::dtype::uint16);
static_assert(tutti::dtype_of<std::int32_t> == tutti::dtype::int32);
static_assert(tutti::dtype_of<std::uint32_t> == tutti::dtype::uint32);
static_assert(tutti::dtype_of<std::int64_t> == tutti::dtype::int64);
static_assert(tutti::dtype_of<std::uint64_t> == tutti::dtype::uint64);
static_assert(tutti::dtype_of<long long> == tutti::dtype::int64);
static_assert(tutti::dtype_of<unsigned long long> == tutti::dtype::uint64);
static_assert(tutti::dtype_of<tutti::half> == tutti::dtype::float16);
static_assert(tutti::dtype_of<tutti::bfloat16> == tutti::dtype::bfloat16);
static_assert(tutti::dtype_of<float> == tutti::dtype::float32);
static_assert(tutti::dtype_of<double> == tutti::dtype::float64);
static_assert(tutti::dtype_of<long double> == tutti::dtype::float128);
static_assert(tutti::dtype_of<bool> == tutti::dtype::boolean);
static_assert(tutti::dtype_of<char> == tutti::dtype::character);
static_assert(tutti::dtype_of<const float> == tutti::dtype::float32);
static_assert(tutti::dtype_of<signed char> == tutti::dtype::int8);

static_assert(tutti::name(tutti::dtype::float32) == "float");
static_assert(tutti::name(tutti::op_kind::bxor) == "bxor");

TEST_CASE("dtype names follow nccl-tests") {
  using tutti::dtype;
  CHECK(tutti::name(dtype::int8) == "int8");
  CHECK(tutti::name(dtype::uint8) == "uint8");
  CHECK(tutti::name(dtype::int16) == "int16");
  CHECK(tutti::name(dtype::uint16) == "uint16");
  CHECK(tutti::name(dtype::int32) == "int32");
  CHECK(tutti::name(dtype::uint32) == "uint32");
  CHECK(tutti::name(dtype::int64) == "int64");
  CHECK(tutti::name(dtype::uint64) == "uint64");
  CHECK(tutti::name(dtype::float16) == "half");
  CHECK(tutti::name(dtype::bfloat16) == "bfloat16");
  CHECK(tutti::name(dtype::float32) == "float");
  CHECK(tutti::name(dtype::float64) == "double");
  CHECK(tutti::name(dtype::float128) == "long double");
  CHECK(tutti::name(dtype::boolean) == "bool");
  CHECK(tutti::name(dtype::character) == "char");
  CHECK(tutti::name(op_kind::sum) == "sum");
  CHECK(tutti::name(op_kind::avg) == "avg");
  CHECK(tutti::name(op_kind::band) == "band");
}

// ---------------------------------------------------------------------------------------------
// (c) tutti::error

static_assert(std::is_base_of_v<std::system_error, tutti::error>);
static_assert(std::is_error_code_enum_v<tutti::errc>);

TEST_CASE("tutti::error is a std::system_error in the tutti category") {
  const tutti::error e(tutti::errc::timeout, "all_reduce", 17, 2, 3,
                       "timed out waiting for rank 3");
  CHECK(std::string(e.code().category().name()) == "tutti");
  CHECK(e.code().category() == tutti::error_category());
  CHECK(e.code() == tutti::errc::timeout);
  CHECK(e.code() == tutti::make_error_code(tutti::errc::timeout));
  CHECK(e.code() != tutti::errc::mismatch);
  CHECK(e.code() != std::make_error_code(std::errc::timed_out));
  CHECK(e.code().value() == static_cast<int>(tutti::errc::timeout));
  CHECK(e.kind() == tutti::errc::timeout);
  CHECK(e.collective() == "all_reduce");
  CHECK(e.sequence() == 17);
  CHECK(e.rank() == 2);
  CHECK(e.peer() == 3);

  const std::string what = e.what();
  INFO("what() = ", what);
  CHECK(what.find("all_reduce") != std::string::npos);
  CHECK(what.find("#17") != std::string::npos);
  CHECK(what.find("rank 2") != std::string::npos);
  CHECK(what.find("peer 3") != std::string::npos);
  CHECK(what.find("timed out waiting for rank 3") != std::string::npos);

  // Caught as the standard type.
  try {
    throw e;
  } catch (const std::system_error& s) {
    CHECK(s.code() == tutti::errc::timeout);
  }
}

TEST_CASE("tutti::error without a peer or a collective") {
  const tutti::error e(tutti::errc::mismatch, "broadcast", 1, 0, -1, "roots differ");
  const std::string what = e.what();
  CHECK(what.find("broadcast #1") != std::string::npos);
  CHECK(what.find("rank 0") != std::string::npos);
  CHECK(what.find("peer") == std::string::npos);

  const tutti::error f(tutti::errc::invalid_argument, "", 0, 1, -1, "bad");
  CHECK(std::string(f.what()).find('#') == std::string::npos);
  CHECK(f.kind() == tutti::errc::invalid_argument);
}

TEST_CASE("every errc has its own message") {
  using tutti::errc;
  for (errc c : {errc::timeout, errc::mismatch, errc::peer_lost, errc::aborted,
                 errc::invalid_argument, errc::transport_failure}) {
    const std::string m = tutti::make_error_code(c).message();
    CHECK(!m.empty());
    CHECK(m != "unknown tutti error");
  }
  CHECK(tutti::make_error_code(errc::timeout).message() == "timed out");
}

// ---------------------------------------------------------------------------------------------
// (d) TUTTI_TIMEOUT

namespace {
// Sets (or unsets, for nullptr) an environment variable for one scope.
class scoped_env {
 public:
  scoped_env(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~scoped_env() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};
}  // namespace

TEST_CASE("TUTTI_TIMEOUT parsing") {
  using std::chrono::milliseconds;
  using tutti::detail::timeout_from_env;
  {
    scoped_env env("TUTTI_TIMEOUT", nullptr);
    CHECK(timeout_from_env() == milliseconds{300'000});
  }
  struct row {
    const char* value;
    long long ms;
  };
  for (const row& r :
       {row{"2.5", 2'500}, row{"1", 1'000}, row{"0.001", 1}, row{"600", 600'000}, row{"", 300'000},
        row{"0", 300'000}, row{"-3", 300'000}, row{"abc", 300'000}, row{"5s", 300'000},
        row{"nan", 300'000}, row{"inf", 300'000}, row{"1e12", 300'000}}) {
    scoped_env env("TUTTI_TIMEOUT", r.value);
    INFO("TUTTI_TIMEOUT=\"", r.value, "\"");
    CHECK(timeout_from_env().count() == r.ms);
  }
  {
    scoped_env env("TUTTI_TIMEOUT", "2.5");
    CHECK(tutti::options{}.timeout == milliseconds{2'500});
  }
}

// ---------------------------------------------------------------------------------------------
// (e) TUTTI_ALGO

namespace {

using algo_names = tutti::automatic::candidates;

// The policy a TUTTI_ALGO table forces for `c` at `bytes` (the first matching rule), by name.
std::optional<std::string_view> forced(const tutti::detail::algo_table& t, collective c,
                                       std::size_t bytes) {
  for (const auto& r : t.rules())
    if ((r.coll == collective::none || r.coll == c) && bytes >= r.lo && bytes < r.hi)
      return algo_names::names.at(r.policy);
  return std::nullopt;
}

tutti::detail::algo_table table(std::string_view spec) {
  return tutti::detail::algo_table(spec, algo_names::names);
}

}  // namespace

TEST_CASE("TUTTI_ALGO: valid specs") {
  constexpr std::size_t K = 1024;
  using sv = std::string_view;
  {
    const auto t =
        table("all_reduce:recursive_doubling@-64K; all_reduce:ring@64K-; broadcast:tree");
    CHECK(t.rules().size() == 3);
    CHECK(forced(t, collective::all_reduce, 0) == sv{"recursive_doubling"});
    CHECK(forced(t, collective::all_reduce, 8) == sv{"recursive_doubling"});
    CHECK(forced(t, collective::all_reduce, 64 * K - 1) == sv{"recursive_doubling"});
    CHECK(forced(t, collective::all_reduce, 64 * K) == sv{"ring"});
    CHECK(forced(t, collective::all_reduce, std::size_t{1} << 40) == sv{"ring"});
    CHECK(forced(t, collective::broadcast, 1) == sv{"tree"});
    CHECK(forced(t, collective::broadcast, std::size_t{1} << 30) == sv{"tree"});
    CHECK(forced(t, collective::reduce, 8) == std::nullopt);
    CHECK(forced(t, collective::all_gather, 1 << 20) == std::nullopt);
  }
  {
    const auto t = table("tree");
    CHECK(forced(t, collective::all_reduce, 0) == sv{"tree"});
    CHECK(forced(t, collective::broadcast, 12345) == sv{"tree"});
    CHECK(forced(t, collective::barrier, 0) == sv{"tree"});
  }
  {
    const auto t = table("ring@1K-2K");
    CHECK(forced(t, collective::all_reduce, 1023) == std::nullopt);
    CHECK(forced(t, collective::all_reduce, 1024) == sv{"ring"});
    CHECK(forced(t, collective::all_reduce, 2047) == sv{"ring"});
    CHECK(forced(t, collective::all_reduce, 2048) == std::nullopt);
  }
  {
    // First match wins; whitespace and empty rules are ignored; sizes take k/m/g too.
    const auto t = table(" direct @ -1k ;; recursive_halving@1m-1G ;tree");
    CHECK(forced(t, collective::all_reduce, 100) == sv{"direct"});
    CHECK(forced(t, collective::all_reduce, 1 << 20) == sv{"recursive_halving"});
    CHECK(forced(t, collective::all_reduce, std::size_t{1} << 30) == sv{"tree"});
    CHECK(forced(t, collective::all_reduce, 5000) == sv{"tree"});
  }
  {
    // An open upper end: "@5-" means 5 bytes and more.
    const auto t = table("ring@5-");
    CHECK(forced(t, collective::all_reduce, 4) == std::nullopt);
    CHECK(forced(t, collective::all_reduce, 5) == sv{"ring"});
  }
  CHECK(table("").empty());
  CHECK(table(" ; ").empty());
  CHECK(forced(tutti::detail::algo_table(), collective::all_reduce, 8) == std::nullopt);
  CHECK(forced(table("bruck"), collective::all_to_all, 8) == sv{"bruck"});
  // The names are the chooser's list: a list without bruck does not know it.
  using short_list = tutti::detail::policy_list<tutti::ring, tutti::tree>;
  CHECK(tutti::detail::algo_table("tree", short_list::names).rules().at(0).policy == 1);
  CHECK_THROWS_AS(tutti::detail::algo_table("bruck", short_list::names), tutti::error);
  // A policy that chooses nothing ignores TUTTI_ALGO; a chooser parses it against its list.
  CHECK(tutti::detail::overrides_for<tutti::ring>("no such policy").empty());
  CHECK(tutti::detail::overrides_for<tutti::automatic>("bruck").rules().size() == 1);
}

TEST_CASE("TUTTI_ALGO: invalid specs raise errc::invalid_argument") {
  for (const char* spec :
       {"all_reduce:nope", "foo:ring", "ring@5", "ring@10-5", "ring@1X-", "ring@K-", "ring@4-4",
        "ring@-99999999999999999999", "ring@99999999999999G-", ":ring", "all_reduce:", "ring,tree",
        "automatic"}) {
    INFO("spec \"", spec, "\"");
    bool raised = false;
    try {
      const auto t = table(spec);
    } catch (const tutti::error& e) {
      raised = true;
      CHECK(e.kind() == tutti::errc::invalid_argument);
      CHECK(std::string(e.what()).find("TUTTI_ALGO") != std::string::npos);
    }
    CHECK(raised);
  }
}

namespace {

// all_reduce through `automatic` with an override, at a few sizes, with exact integer results.
void check_all_reduce_with(const std::string& algo) {
  constexpr int world = 4;
  for (std::size_t n :
       {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{1000}, std::size_t{300'000}}) {
    INFO("algo \"", algo, "\" count ", n);
    std::vector<int> wrong(world, 0);
    tutti::inproc::run<tutti::automatic>(
        world,
        [&](auto& comm) {
          const int r = comm.rank();
          std::vector<float> in(n), out(n, -1.0f);
          std::vector<std::int32_t> ints(n);
          for (std::size_t i = 0; i < n; ++i) {
            in[i] = static_cast<float>(r + 1) + static_cast<float>(i % 5);
            ints[i] = (r + 1) * static_cast<std::int32_t>(i % 7 + 1);
          }
          comm.all_reduce(std::span<const float>(in), std::span<float>(out), tutti::sum);
          comm.all_reduce(std::span<std::int32_t>(ints), tutti::max);
          for (std::size_t i = 0; i < n; ++i) {
            const float want = 10.0f + 4.0f * static_cast<float>(i % 5);
            if (out[i] != want || ints[i] != world * static_cast<std::int32_t>(i % 7 + 1))
              ++wrong[static_cast<std::size_t>(r)];
          }
        },
        tutti::options{.algo = algo});
    for (int w : wrong) CHECK(w == 0);
  }
}

}  // namespace

TEST_CASE("options::algo overrides still give correct all_reduce results") {
  for (const char* algo :
       {"ring", "tree", "recursive_halving", "recursive_doubling", "direct",
        "all_reduce:recursive_doubling@-64K; all_reduce:ring@64K-",
        "all_reduce:tree@-1K;all_reduce:direct@1K-1M;recursive_halving", "bruck", ""})
    check_all_reduce_with(algo);
}

TEST_CASE("an invalid options::algo makes inproc::run raise errc::invalid_argument") {
  for (const char* algo : {"all_reduce:nope", "ring@10-5"}) {
    INFO("algo \"", algo, "\"");
    bool raised = false;
    try {
      tutti::inproc::run<tutti::automatic>(
          4,
          [](auto& comm) {
            std::vector<float> v(8, 1.0f);
            comm.all_reduce(std::span<float>(v), tutti::sum);
          },
          tutti::options{.algo = algo});
    } catch (const tutti::error& e) {
      raised = true;
      CHECK(e.kind() == tutti::errc::invalid_argument);
    }
    CHECK(raised);
  }
}

TEST_CASE("TUTTI_ALGO in the environment sets options::algo") {
  scoped_env env("TUTTI_ALGO", "ring@64K-");
  CHECK(tutti::options{}.algo == "ring@64K-");
}

// ---------------------------------------------------------------------------------------------
// (f) automatic's choice

namespace {

using std::string_view;
using tutti::automatic;

// Stands for a transport whose policies run `all_reduce` point to point only (tutti::gloo: no
// shared segment, so no `direct`).
constexpr auto point_to_point = []<class P>() {
  return !std::is_same_v<P, tutti::direct> && tutti::detail::has_all_reduce<P, tutti::inproc>;
};
constexpr auto on_inproc = []<class P>() {
  return tutti::detail::has_all_reduce<P, tutti::inproc>;
};

// The name of the policy automatic picks for an all_reduce of `bytes` over `ranks`.
template <class Runs>
string_view picked(std::size_t bytes, int ranks, const tutti::cost_model& m, bool segment,
                   Runs runs, const tutti::detail::algo_table& overrides = {}) {
  const tutti::detail::cost_inputs in(static_cast<double>(bytes), ranks, m, segment);
  const std::size_t i = automatic::choose(collective::all_reduce, in, overrides, runs);
  REQUIRE(i < automatic::candidates::size);
  return automatic::candidates::names.at(i);
}

}  // namespace

TEST_CASE("automatic picks the policy its costs rank first") {
  const std::size_t K = 1024, M = K * K;
  // tutti::gloo's TCP costs, point to point: recursive doubling while α dominates where p is a
  // power of two, tree where it is not (an exchange costs two α over Gloo's pairs, a tree's
  // message one, and the fold adds exchanges: bench/RESULTS.md, "Why an exchange over Gloo's
  // TCP costs twice a message"); ring where p is not a power of two and bytes count, recursive
  // halving from 1 MiB where it is (at 2 ranks from 4 MiB: the same schedule as ring's there,
  // but its all-gather's receive is posted early).
  const tutti::cost_model tcp = tutti::detail::gloo_costs::tcp;
  struct want {
    int p;
    std::size_t bytes;
    string_view policy;
  };
  for (const want w :
       {want{2, 8, "recursive_doubling"}, want{2, 64 * K, "recursive_doubling"},
        want{2, 4 * M, "recursive_halving"}, want{2, 64 * M, "recursive_halving"},
        want{3, 8, "tree"}, want{3, 64 * M, "ring"}, want{4, 8, "recursive_doubling"},
        want{4, 64 * K, "recursive_doubling"}, want{4, M, "recursive_halving"},
        want{5, 4 * K, "tree"}, want{5, 64 * K, "tree"}, want{5, M, "ring"},
        want{8, 64 * K, "recursive_doubling"}, want{8, M, "recursive_halving"},
        want{16, 64 * M, "recursive_halving"}}) {
    CAPTURE(w.p);
    CAPTURE(w.bytes);
    CHECK(picked(w.bytes, w.p, tcp, false, point_to_point) == w.policy);
  }
  // One process's threads share a segment: direct's one copy in and out beats every schedule.
  for (int p : {2, 3, 4, 8, 16})
    for (std::size_t bytes : {std::size_t{8}, 4 * K, 64 * K, M, 64 * M}) {
      CAPTURE(p);
      CAPTURE(bytes);
      CHECK(picked(bytes, p, tutti::inproc::costs, true, on_inproc) == "direct");
    }
  // The slot size is the transport's: with a 64 KiB slot, a 64 MiB all_reduce takes 2,048
  // rounds of α and ring's (p - 1) α costs less on TCP.
  {
    const tutti::detail::cost_inputs big(64.0 * M, 4, tcp, true, std::size_t{1} << 20);
    const tutti::detail::cost_inputs small_slot(64.0 * M, 4, tcp, true, 64 * K);
    CHECK(small_slot.rounds(64.0 * M) == 2048);
    CHECK(tutti::direct::cost(collective::all_reduce, small_slot) >
          tutti::direct::cost(collective::all_reduce, big));
  }
  // Overrides win, but only with a policy that implements the collective.
  const auto table = [](string_view spec) {
    return tutti::detail::algo_table(spec, automatic::candidates::names);
  };
  CHECK(picked(8, 8, tcp, false, point_to_point, table("ring")) == "ring");
  CHECK(picked(8, 8, tcp, false, point_to_point, table("bruck;tree")) == "tree");
  CHECK(picked(8, 8, tcp, false, point_to_point, table("direct")) == "recursive_doubling");
  // A chooser over a list of one's own chooses within it.
  using two = tutti::basic_automatic<tutti::detail::policy_list<tutti::tree, tutti::ring>>;
  const tutti::detail::cost_inputs in(64.0 * M, 4, tcp, false);
  CHECK(two::choose(collective::all_reduce, in, {}, point_to_point) == 1);  // ring
  // Neither implements all_to_all: no choice, which the dispatch reports as an error.
  const auto all_to_all = []<class P>() { return tutti::detail::has_all_to_all<P, tutti::inproc>; };
  CHECK(two::choose(collective::all_to_all, in, {}, all_to_all) == two::none);
}

TEST_CASE("an exchange costs exchange_alphas α; a tree's message one") {
  // Over Gloo's TCP pairs a send waits for its receiver's recv-ready notification, so a step
  // where both ends send at once pays two crossings (bench/RESULTS.md).
  tutti::cost_model one = tutti::detail::gloo_costs::tcp;
  one.exchange_alphas = 1.0;
  const tutti::cost_model two = tutti::detail::gloo_costs::tcp;
  REQUIRE(two.exchange_alphas == 2.0);
  const double a = two.alpha_us;
  const auto cost = []<class P>(const tutti::cost_model& m, int p, tutti::cost_model h = {}) {
    if (h.hosts > 0) {
      h.alpha_us = m.alpha_us;
      h.exchange_alphas = m.exchange_alphas;
    }
    return P::cost(collective::all_reduce,
                   tutti::detail::cost_inputs(65536, p, h.hosts > 0 ? h : m))
        .value();
  };
  for (int p : {2, 4, 8}) {
    CAPTURE(p);
    const double lg = std::log2(p);
    CHECK(cost.operator()<tutti::recursive_doubling>(two, p) -
              cost.operator()<tutti::recursive_doubling>(one, p) ==
          doctest::Approx(lg * a));
    // Only the reduce-scatter's steps: the all-gather's receives are posted early.
    CHECK(cost.operator()<tutti::recursive_halving>(two, p) -
              cost.operator()<tutti::recursive_halving>(one, p) ==
          doctest::Approx(lg * a));
    CHECK(cost.operator()<tutti::ring>(two, p) - cost.operator()<tutti::ring>(one, p) ==
          doctest::Approx(2 * (p - 1) * a));
    CHECK(cost.operator()<tutti::tree>(two, p) == cost.operator()<tutti::tree>(one, p));
  }
  // Across 2 hosts x 2 ranks: the flat steps inside a host ride the same pairs (its α doubles),
  // the link's too; tree's stay single.
  tutti::cost_model levels = tutti::detail::gloo_costs::tcp;
  levels.hosts = 2;
  levels.ranks_per_host = 2;
  levels.local_alpha_us = 3.0;
  levels.local_beta_us_per_byte = 1e-4;
  CHECK(cost.operator()<tutti::recursive_halving>(two, 4, levels) -
            cost.operator()<tutti::recursive_halving>(one, 4, levels) ==
        doctest::Approx(3.0 + a));
  CHECK(cost.operator()<tutti::tree>(two, 4, levels) ==
        cost.operator()<tutti::tree>(one, 4, levels));
}

TEST_CASE("automatic on a crowded host weighs every rank's messages: tree where they dominate") {
  // tutti::gloo's costs on one host, 4 ranks: single copies (gloo::world_costs) and Gloo's TCP
  // pairs alone (TUTTI_GLOO_CMA=0). bench/RESULTS.md, on 2 CPUs: with single copies tree beats
  // recursive doubling up to 256 KiB, recursive halving wins from 1 MiB; on the TCP pairs, whose
  // exchanges cost two α, tree wins up to 1 MiB as well (1.8-2.0 ms against recursive halving's
  // 2.3-2.5 ms, "An exchange over Gloo's TCP, priced").
  tutti::cost_model m = tutti::detail::gloo_costs::tcp;
  const auto pick = [&](std::size_t bytes, int ranks, double per_cpu) {
    m.ranks_per_cpu = per_cpu;
    return picked(bytes, ranks, m, false, point_to_point);
  };
  const std::size_t mib = std::size_t{1} << 20;
  for (const bool single_copies : {false, true}) {
    CAPTURE(single_copies);
    if (single_copies) m = tutti::detail::gloo_costs::single_copy(m);  // as gloo::world_costs
    for (double per_cpu : {0.0, 0.5, 1.0}) {  // unknown or not crowded: the slowest rank's path
      CAPTURE(per_cpu);
      CHECK(pick(8, 4, per_cpu) == "recursive_doubling");
      CHECK(pick(4096, 4, per_cpu) == "recursive_doubling");
      CHECK(pick(2 * mib, 4, per_cpu) == "recursive_halving");
    }
    CHECK(pick(8, 4, 2.0) == "tree");
    CHECK(pick(4096, 4, 2.0) == "tree");
    CHECK(pick(256 << 10, 4, 2.0) == "tree");
    CHECK(pick(mib, 4, 2.0) == (single_copies ? "recursive_halving" : "tree"));
    CHECK(pick(16 * mib, 4, 2.0) == "recursive_halving");
    CHECK(pick(256 * mib, 4, 2.0) == "recursive_halving");
  }
  // Crowded, one rank: every path costs nothing; the first in the list wins the tie.
  CHECK(pick(8, 1, 2.0) == "ring");
  // Other collectives keep the path model (only all_reduce has been measured crowded).
  m.ranks_per_cpu = 2.0;
  tutti::cost_model calm = m;
  calm.ranks_per_cpu = 0;
  const tutti::detail::cost_inputs crowded(8, 4, m), uncrowded(8, 4, calm);
  CHECK(crowded.crowded());
  CHECK(tutti::detail::predicted_cost<tutti::tree>(collective::broadcast, crowded) ==
        tutti::detail::predicted_cost<tutti::tree>(collective::broadcast, uncrowded));
  // A policy without a crowded form: its path, stretched by the ranks per CPU.
  CHECK(tutti::detail::predicted_cost<tutti::direct>(collective::all_reduce, crowded) ==
        2.0 * tutti::detail::predicted_cost<tutti::direct>(collective::all_reduce, uncrowded));
}

namespace {

// automatic's pick for an all_reduce of `bytes` over a flat tutti::gloo world of `hosts` x
// `per_host` ranks, `per_cpu` ranks per CPU, a link of `gbps` with α `alpha_us`, and a message
// inside a host priced as gloo::world_costs does: a single copy's α and β with
// `single_copies_inside` (every pair on a host has them), else loopback TCP's.
tutti::cost_model across_hosts_model(int hosts, int per_host, double per_cpu, double alpha_us,
                                     double gbps, bool single_copies_inside) {
  namespace costs = tutti::detail::gloo_costs;
  tutti::cost_model m = costs::tcp;
  m.ranks_per_cpu = per_cpu;
  m.alpha_us = alpha_us;
  m.beta_us_per_byte = 8e-3 / gbps;
  m.hosts = hosts;
  m.ranks_per_host = per_host;
  const tutti::cost_model inside =
      single_copies_inside ? costs::single_copy(costs::tcp) : costs::tcp;
  m.local_alpha_us = inside.alpha_us;
  m.local_beta_us_per_byte = inside.beta_us_per_byte;
  return m;
}

string_view pick_across_hosts(int hosts, int per_host, double per_cpu, std::size_t bytes,
                              double alpha_us = 50, double gbps = 0.97,
                              bool single_copies_inside = false) {
  return picked(bytes, hosts * per_host,
                across_hosts_model(hosts, per_host, per_cpu, alpha_us, gbps, single_copies_inside),
                false, point_to_point);
}

}  // namespace

TEST_CASE("automatic across simulated hosts on a crowded machine: tree for small vectors") {
  // Hosts that share 2 CPUs (bench/netns: every "host" a namespace of one machine), 1 Gbit/s
  // links: crowding stretches what waits for a CPU (an exchange's α, a message inside a host),
  // not the link (its bytes, its α). Measured (bench/RESULTS.md), tree is fastest up to 16 KiB
  // on 4 x 1 and 2 x 2, recursive halving from 512 KiB on 2 x 2 ("The link's α on a crowded
  // machine": from 32 KiB).
  const auto pick = [](int hosts, int per_host, double per_cpu, std::size_t bytes) {
    return pick_across_hosts(hosts, per_host, per_cpu, bytes);
  };
  const std::size_t mib = std::size_t{1} << 20;
  for (std::size_t bytes : {std::size_t{8}, std::size_t{4096}}) {
    CAPTURE(bytes);
    CHECK(pick(4, 1, 2.0, bytes) == "tree");
    CHECK(pick(2, 2, 2.0, bytes) == "tree");
    // A CPU per rank: recursive doubling's two exchanges cost what tree's four messages do,
    // and move half the bytes.
    CHECK(pick(4, 1, 0.0, bytes) == "recursive_doubling");
  }
  CHECK(pick(2, 2, 2.0, 16 << 10) == "tree");
  CHECK(pick(2, 2, 2.0, mib) == "recursive_halving");
  CHECK(pick(4, 1, 2.0, 16 * mib) == "recursive_halving");
}

TEST_CASE("across crowded simulated hosts the link's bytes and α are not CPU work") {
  // Ring (no prices_levels) on 4 x 1 at two ranks per CPU is stretched as the levels-priced
  // schedules are: an exchange's α and the reduction; its bytes over each host's own link not.
  // bench/RESULTS.md, 4 x 1 on 2 CPUs at 1 Gbit/s: ring took 14.9 ms at 1 MiB and 61.8 at
  // 4 MiB, about the link's 2 (p - 1)/p n alone; priced as a crowded host's work (every rank's
  // link bytes on the host's CPUs) it came to 27.5 and 103.6 ms. Nor the link's α, measured on
  // the crowded machine itself ("The link's α on a crowded machine": a tree message across
  // hosts took 1.2x the probed α, not 2x): tree's messages between hosts cost it as it is.
  const tutti::cost_model m = across_hosts_model(4, 1, 2.0, 45, 1.0, false);
  const double r = 2.0, p = 4, frac = (p - 1) / p, lg = 2;
  for (const double n : {4.0, 65536.0, 4194304.0}) {
    CAPTURE(n);
    const tutti::detail::cost_inputs in(n, 4, m);
    const double ring = 2 * (p - 1) * m.alpha_us * (m.exchange_alphas * r) +
                        2 * frac * n * m.beta_us_per_byte + frac * n * m.gamma_us_per_byte * r;
    CHECK(tutti::detail::predicted_cost<tutti::ring>(collective::all_reduce, in) ==
          doctest::Approx(ring));
    const double tree =
        2 * lg * (m.alpha_us + n * m.beta_us_per_byte) + lg * n * m.gamma_us_per_byte * r;
    CHECK(tutti::detail::predicted_cost<tutti::tree>(collective::all_reduce, in) ==
          doctest::Approx(tree));
  }
}

TEST_CASE("a flat ring across crowded simulated hosts: one rank of a host crosses in a step") {
  // Ranks numbered host by host, a ring step crosses each host boundary once each way: one rank
  // of each host sends across and one receives, the other messages are single copies. Its
  // exchange's α is stretched by the ranks per CPU times that share (1 / ranks per host), at
  // least 1: on 2 x 2 at two ranks per CPU not at all (bench/RESULTS.md, "A link that charges
  // every frame": ring's steps there took about two probed α, as uncrowded), at four twice.
  // The recursive schedules' steps between hosts cross from every rank: stretched fully.
  for (const double r : {2.0, 4.0}) {
    CAPTURE(r);
    const tutti::cost_model m = across_hosts_model(2, 2, r, 60, 1.0, true);
    const double p = 4, frac = (p - 1) / p;
    const double stretch = std::max(1.0, r / 2);
    for (const double n : {4.0, 65536.0, 1048576.0}) {
      CAPTURE(n);
      const tutti::detail::cost_inputs in(n, 4, m);
      const double ring = 2 * (p - 1) * m.alpha_us * m.exchange_alphas * stretch +
                          2 * frac * n * m.beta_us_per_byte + frac * n * m.gamma_us_per_byte * r;
      CHECK(tutti::detail::predicted_cost<tutti::ring>(collective::all_reduce, in) ==
            doctest::Approx(ring));
    }
  }
  // Hosts of one rank each: that rank is the whole host, and ring's exchange is stretched by
  // the ranks per CPU as before (the case above).
  const tutti::cost_model one = across_hosts_model(4, 1, 2.0, 60, 1.0, false);
  const tutti::detail::cost_inputs small(4.0, 4, one);
  CHECK(tutti::detail::predicted_cost<tutti::ring>(collective::all_reduce, small) ==
        doctest::Approx(6 * 60 * one.exchange_alphas * 2 + 2 * 0.75 * 4 * one.beta_us_per_byte +
                        0.75 * 4 * one.gamma_us_per_byte * 2));
}

TEST_CASE("automatic across hosts with single copies inside each: recursive halving from 32 KiB") {
  // 2 x 2 on the crowded machine, links sending whole frames (bench/RESULTS.md, "Links that send
  // whole frames": measured 0.996 Gbit/s and 82 µs at join). Recursive halving was the fastest
  // flat policy from 64 KiB (762 µs against tree's 1,014 at 64 KiB), tree up to 16 KiB; at
  // 32 KiB the two tie ("The link's α on a crowded machine": 410 against 427 µs in one run, 563
  // against 518 in the next). Its first step joins two ranks of one host, a single copy; priced
  // at loopback TCP's α and β it looks dearer, and automatic keeps tree there at 32 KiB.
  const std::size_t kib = 1024;
  for (std::size_t bytes : {std::size_t{8}, 4 * kib, 16 * kib}) {
    CAPTURE(bytes);
    CHECK(pick_across_hosts(2, 2, 2.0, bytes, 82, 0.996, true) == "tree");
  }
  for (std::size_t bytes : {32 * kib, 64 * kib, 128 * kib, 256 * kib, 1024 * kib}) {
    CAPTURE(bytes);
    CHECK(pick_across_hosts(2, 2, 2.0, bytes, 82, 0.996, true) == "recursive_halving");
  }
  CHECK(pick_across_hosts(2, 2, 2.0, 32 * kib, 82, 0.996, false) == "tree");
}

TEST_CASE("a flat schedule across hosts of one rank each pays only the link") {
  // No message stays inside a host: a link faster than loopback TCP (100 Gbit/s, 10 µs) prices
  // every step, not the larger of it and a host's α and β.
  tutti::cost_model m = tutti::detail::gloo_costs::tcp;
  m.alpha_us = 10;
  m.beta_us_per_byte = 8e-3 / 100;
  tutti::cost_model across = m;
  across.hosts = 4;
  across.ranks_per_host = 1;
  across.local_alpha_us = tutti::detail::gloo_costs::tcp.alpha_us;
  across.local_beta_us_per_byte = tutti::detail::gloo_costs::tcp.beta_us_per_byte;
  for (std::size_t bytes : {std::size_t{8}, std::size_t{1} << 20, std::size_t{64} << 20}) {
    CAPTURE(bytes);
    const tutti::detail::cost_inputs flat(static_cast<double>(bytes), 4, m),
        hosts(static_cast<double>(bytes), 4, across);
    REQUIRE(hosts.across_hosts());
    CHECK(tutti::detail::predicted_cost<tutti::ring>(collective::all_reduce, hosts) ==
          tutti::detail::predicted_cost<tutti::ring>(collective::all_reduce, flat));
    CHECK(tutti::detail::predicted_cost<tutti::direct>(collective::all_reduce, hosts) ==
          tutti::detail::predicted_cost<tutti::direct>(collective::all_reduce, flat));
  }
}

TEST_CASE("ring's steps: each sends what it last received; an early receive misses the send") {
  using tutti::detail::ring_step;
  // 4 ranks, rank 1: the reduce-scatter sends blocks 0, 3, 2 and ends on its own block 1; the
  // all-gather sends block 1 on, then what it got.
  std::vector<ring_step> steps;
  tutti::detail::add_ring_pass(steps, 1, 4, true);
  tutti::detail::add_ring_pass(steps, 1, 4, false);
  std::vector<std::size_t> sent, received;
  std::vector<bool> reduced;
  for (const ring_step& s : steps) {
    sent.push_back(s.send);
    received.push_back(s.recv);
    reduced.push_back(s.reduce);
  }
  CHECK(sent == std::vector<std::size_t>{0, 3, 2, 1, 0, 3});
  CHECK(received == std::vector<std::size_t>{3, 2, 1, 0, 3, 2});
  CHECK(reduced == std::vector<bool>{true, true, true, false, false, false});
  // run_ring posts step i + 1's receive before step i's send: from 3 ranks on it lands on
  // another block (at 2 the one all-gather receive is the block the reduce-scatter's one step
  // sent, which the neighbour answers only once it has arrived).
  for (int p = 2; p <= 9; ++p)
    for (int r = 0; r < p; ++r) {
      CAPTURE(p);
      CAPTURE(r);
      steps.clear();
      tutti::detail::add_ring_pass(steps, r, p, true);
      REQUIRE(steps.size() == static_cast<std::size_t>(p - 1));
      CHECK(steps.back().recv == static_cast<std::size_t>(r));  // its reduced block
      tutti::detail::add_ring_pass(steps, r, p, false);
      CHECK(steps[static_cast<std::size_t>(p - 1)].send == static_cast<std::size_t>(r));
      for (std::size_t i = 0; i + 1 < steps.size(); ++i) {
        CHECK(steps[i + 1].send == steps[i].recv);
        if (p > 2) CHECK(steps[i + 1].recv != steps[i].send);
      }
    }
}

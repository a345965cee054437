// Pieces that the stand-alone harnesses (tests/soak, tests/faults, tests/mismatch) share.
// Header-only; each harness includes it as "../harness_common.hpp". Nothing here draws
// random numbers, so the harnesses' documented seeds keep their meaning.
#pragma once

#include <stdlib.h>  // mkdtemp

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include <tutti/tutti.hpp>

namespace tutti_harness {

/// Whether this build runs under ASan+UBSan or TSan.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool sanitized = true;
#else
inline constexpr bool sanitized = false;
#endif
/// Whether the test programs instantiate fewer element types: under the sanitizers (each type
/// costs minutes of compile there; Release runs them all), and under clang-tidy
/// (scripts/lint.sh defines TUTTI_TEST_FEW_TYPES: the code it checks is the same template for
/// every type).
#if defined(TUTTI_TEST_FEW_TYPES)
inline constexpr bool few_types = true;
#else
inline constexpr bool few_types = sanitized;
#endif

/// Calls fn.template operator()<T>() with T the type at `slot` of the tuple Types (the last
/// for a slot past the end) and returns what it returns.
template <class Types, std::size_t I = 0, class Fn>
decltype(auto) with_type(std::size_t slot, Fn&& fn) {
  if constexpr (I + 1 < std::tuple_size_v<Types>)
    if (slot != I) return with_type<Types, I + 1>(slot, std::forward<Fn>(fn));
  return fn.template operator()<std::tuple_element_t<I, Types>>();
}

/// The slot in a program's type tuple of the type that `type_names` index `type` names:
/// `type` itself, or under few_types its place in `kept` (the indices the tuple keeps).
template <std::size_t N>
[[nodiscard]] std::size_t type_slot(int type, const std::array<int, N>& kept) {
  if constexpr (few_types)
    return static_cast<std::size_t>(std::ranges::find(kept, type) - kept.begin());
  return static_cast<std::size_t>(type);
}

/// Prefix sums of per-rank counts: block r of a v-variant's buffer starts at `offsets[r]`.
[[nodiscard]] inline std::vector<std::size_t> prefix_offsets(std::span<const std::size_t> counts) {
  std::vector<std::size_t> off(counts.size() + 1, 0);
  for (std::size_t i = 0; i < counts.size(); ++i) off[i + 1] = off[i] + counts[i];
  return off;
}

/// Calls fn with the reduction op object that `k` names (avg for any kind not listed).
template <class Fn>
void with_op(tutti::op_kind k, Fn&& fn) {
  switch (k) {
    case tutti::op_kind::sum:
      return fn(tutti::sum);
    case tutti::op_kind::prod:
      return fn(tutti::prod);
    case tutti::op_kind::min:
      return fn(tutti::min);
    case tutti::op_kind::max:
      return fn(tutti::max);
    default:
      return fn(tutti::avg);
  }
}

/// Which collectives policy A implements over transport X (the library's own concepts), as a
/// bit mask over a harness's own enum `Coll` (bit 1 << Coll::x). Collectives that `Coll` does
/// not name (a harness that never draws the v-variants) stay out of the mask.
template <class A, class X, class Coll>
constexpr unsigned capabilities() {
  using namespace tutti::detail;
  unsigned m = 0;
  const auto set = [&m](bool has, Coll c) {
    if (has) m |= 1U << static_cast<int>(c);
  };
  set(has_all_reduce<A, X>, Coll::all_reduce);
  set(has_reduce<A, X>, Coll::reduce);
  set(has_broadcast<A, X>, Coll::broadcast);
  set(has_all_gather<A, X>, Coll::all_gather);
  set(has_reduce_scatter<A, X>, Coll::reduce_scatter);
  set(has_gather<A, X>, Coll::gather);
  set(has_scatter<A, X>, Coll::scatter);
  set(has_all_to_all<A, X>, Coll::all_to_all);
  if constexpr (requires { Coll::all_gatherv; }) set(has_all_gatherv<A, X>, Coll::all_gatherv);
  if constexpr (requires { Coll::all_to_allv; }) set(has_all_to_allv<A, X>, Coll::all_to_allv);
  set(has_barrier<A, X>, Coll::barrier);
  return m;
}

/// Calls the member of `r` named after the drawn collective `c` (r.all_reduce(), r.reduce(),
/// ..., r.barrier()) where policy A implements it over transport X, and returns what it returns;
/// for a collective A lacks it returns a value-initialised result, and the member's call is never
/// instantiated. `Coll` is a harness's own enum, as for capabilities(): one that does not name the
/// v-variants needs no members for them.
template <class A, class X, class Coll, class Runner>
auto call_drawn(Coll c, Runner& r) -> decltype(r.barrier()) {
  using namespace tutti::detail;
  using result = decltype(r.barrier());
  if constexpr (requires { Coll::all_gatherv; })
    if (c == Coll::all_gatherv) {
      if constexpr (has_all_gatherv<A, X>) return r.all_gatherv();
      return result();
    }
  if constexpr (requires { Coll::all_to_allv; })
    if (c == Coll::all_to_allv) {
      if constexpr (has_all_to_allv<A, X>) return r.all_to_allv();
      return result();
    }
  switch (c) {
    case Coll::all_reduce:
      if constexpr (has_all_reduce<A, X>) return r.all_reduce();
      break;
    case Coll::reduce:
      if constexpr (has_reduce<A, X>) return r.reduce();
      break;
    case Coll::broadcast:
      if constexpr (has_broadcast<A, X>) return r.broadcast();
      break;
    case Coll::all_gather:
      if constexpr (has_all_gather<A, X>) return r.all_gather();
      break;
    case Coll::reduce_scatter:
      if constexpr (has_reduce_scatter<A, X>) return r.reduce_scatter();
      break;
    case Coll::gather:
      if constexpr (has_gather<A, X>) return r.gather();
      break;
    case Coll::scatter:
      if constexpr (has_scatter<A, X>) return r.scatter();
      break;
    case Coll::all_to_all:
      if constexpr (has_all_to_all<A, X>) return r.all_to_all();
      break;
    case Coll::barrier:
      if constexpr (has_barrier<A, X>) return r.barrier();
      break;
    default:  // the v-variants, above
      break;
  }
  return result();
}

/// The exact reduction under `op` of value(r) over ranks r = 0 .. p-1, in 64-bit integers
/// (for avg: the sum; the caller divides, as its element type wants).
template <class Value>
[[nodiscard]] std::int64_t reduce_exact(tutti::op_kind op, int p, Value&& value) noexcept {
  std::int64_t acc = value(0);
  for (int r = 1; r < p; ++r) {
    const std::int64_t v = value(r);
    switch (op) {
      case tutti::op_kind::prod:
        acc *= v;
        break;
      case tutti::op_kind::min:
        acc = std::min(acc, v);
        break;
      case tutti::op_kind::max:
        acc = std::max(acc, v);
        break;
      default:
        acc += v;
    }
  }
  return acc;
}

/// A fresh directory `<tmp>/<tool>-XXXXXX` for one world's file store, removed afterwards.
/// On failure it prints "<tool>: mkdtemp: ..." and exits with status 2.
class temp_dir {
 public:
  explicit temp_dir(const char* tool = "tutti-test") {
    std::string name(tool);
    name += "-XXXXXX";
    std::string t = (std::filesystem::temp_directory_path() / name).string();
    if (mkdtemp(t.data()) == nullptr) {
      std::string what(tool);
      what += ": mkdtemp";
      std::perror(what.c_str());
      std::exit(2);
    }
    path_ = t;
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  /// `file://<dir>/<name>`: a store file in the directory.
  [[nodiscard]] std::string url(const std::string& name = "store") const {
    std::string u = "file://";
    u += path_;
    u += '/';
    u += name;
    return u;
  }

 private:
  std::string path_;
};

}  // namespace tutti_harness

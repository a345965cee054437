#pragma once
// The collective suite: every collective x every policy that implements it x counts {0, 1,
// fewer than the world size, odd, >= 1M} x every element type x every op it admits x in place
// and out of place, against references computed in double. `run_suite<P>(comm, f)` runs the
// whole sweep on one communicator of any transport; test_collectives.cpp runs it on inproc
// (threads), test_shm.cpp across processes.

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "harness.hpp"
#include "harness_common.hpp"

namespace suite {

using namespace harness;

/// Collects the first failures; thread-safe (inproc ranks share one).
struct failures {
  std::mutex mu;
  std::vector<std::string> first;
  std::atomic<long> count{0};
  void add(const std::string& what) {
    if (count.fetch_add(1) < 5) {
      std::lock_guard lock(mu);
      first.push_back(what);
    }
  }
  /// Everything recorded, one line each.
  [[nodiscard]] std::string text() {
    std::lock_guard lock(mu);
    std::string all;
    for (auto& f : first) all += f + "\n";
    return all;
  }
};

template <class T>
std::string tname() {
  return std::string{tutti::name(tutti::dtype_of<T>)};
}

std::vector<std::size_t> counts_for(int p) {
  std::vector<std::size_t> c{0, 1, 37};
  if (p > 2) c.push_back(static_cast<std::size_t>(p - 1));  // fewer than the world size
  return c;
}

bool large_here(int p) { return !sanitized || p == 2 || p == 5 || p == 8; }

template <class T>
constexpr bool large_type = std::is_same_v<T, float> || std::is_same_v<T, std::int32_t> ||
                            std::is_same_v<T, tutti::half> || std::is_same_v<T, double>;

// ---- reducing collectives ------------------------------------------------------------------
// The per-(type, op) code is only the call; filling inputs and checking results depend on the
// type alone (the op is a run-time value there), which keeps the suite quick to compile.

/// Records "<what> <type> <op> p=.. n=.. rank .. i=..[ in place]".
inline void report(failures& f, const char* what, tutti::dtype t, tutti::op_kind k, int p,
                   std::size_t n, int r, std::size_t i, bool in_place) {
  f.add(std::string{what} + " " + std::string{tutti::name(t)} + " " + std::string{tutti::name(k)} +
        " p=" + std::to_string(p) + " n=" + std::to_string(n) + " rank " + std::to_string(r) +
        " i=" + std::to_string(i) + (in_place ? " in place" : ""));
}

/// f(first), ..., f(first + m - 1) for m = min(n, period): one period of f, which repeats every
/// `period` indices. Filling and checking a million elements then costs a table walk, not a
/// million references (which were half of the sweeps' CPU time).
template <class V, class F>
std::vector<V> one_period(std::size_t first, std::size_t n, std::size_t period, F f) {
  std::vector<V> t(std::min(n, period));
  for (std::size_t j = 0; j < t.size(); ++j) t[j] = f(first + j);
  return t;
}

/// out[i] = t[i % t.size()] for i < n.
template <class T>
void repeat(T* out, std::size_t n, const std::vector<T>& t) {
  for (std::size_t i = 0; i < n; i += t.size())
    std::copy_n(t.begin(), std::min(t.size(), n - i), out + i);
}

/// Rank r's first `n` inputs for op k.
template <class T>
buffer<T> inputs(tutti::op_kind k, int r, std::size_t n) {
  buffer<T> in(n);
  repeat(in.data(), n, one_period<T>(0, n, input_period, [&](std::size_t i) {
           return to<T>(input<T>(k, r, i));
         }));
  return in;
}

/// The first i < n at which `same(got[i], want[i % want.size()])` fails, else n: results
/// walked along one period of their expected values (one_period).
template <class T, class Same>
std::size_t first_mismatch(const T* got, std::size_t n, const std::vector<double>& want,
                           Same same) {
  for (std::size_t i = 0, j = 0; i < n; ++i, j = j + 1 == want.size() ? 0 : j + 1)
    if (!same(got[i], want[j])) return i;
  return n;
}

/// Equal as values (what a copy must preserve); the expected side is from() of a T.
inline constexpr auto same_value = [](const auto& got, double want) { return from(got) == want; };

/// Checks res[i] == the reduction at index first + i for i < n; false (and reported) if not.
template <class T>
bool check_reduced(failures& f, const char* what, tutti::op_kind k, int p, int r, std::size_t n,
                   const T* res, std::size_t first, bool in_place) {
  const auto want = one_period<double>(first, n, input_period,
                                       [&](std::size_t i) { return reference<T>(k, p, i); });
  const std::size_t i =
      first_mismatch(res, n, want, [k](const T& got, double w) { return matches<T>(k, got, w); });
  if (i == n) return true;
  report(f, what, tutti::dtype_of<T>, k, p, n, r, first + i, in_place);
  return false;
}

/// Checks that `in` still holds rank r's inputs (an out-of-place call must not touch them).
template <class T>
bool check_inputs(failures& f, const char* what, tutti::op_kind k, int p, int r,
                  const buffer<T>& in) {
  const auto want = one_period<double>(
      0, in.size(), input_period, [&](std::size_t i) { return from(to<T>(input<T>(k, r, i))); });
  const std::size_t i = first_mismatch(in.data(), in.size(), want, same_value);
  if (i == in.size()) return true;
  report(f, (std::string{what} + " changed its input:").c_str(), tutti::dtype_of<T>, k, p,
         in.size(), r, i, false);
  return false;
}

/// out[i] = datum<T>(r, first + i) for i < n.
template <class T>
void fill_data(T* out, int r, std::size_t n, std::size_t first = 0) {
  repeat(out, n,
         one_period<T>(first, n, datum_period, [&](std::size_t i) { return datum<T>(r, i); }));
}

/// Whether got[i] == datum<T>(r, i) for every i < n.
template <class T>
bool holds_data(const T* got, int r, std::size_t n) {
  const auto want =
      one_period<double>(0, n, datum_period, [&](std::size_t i) { return from(datum<T>(r, i)); });
  return first_mismatch(got, n, want, same_value) == n;
}

template <class T, class Op, class Comm>
void all_reduce_case(Comm& comm, failures& f, std::size_t n, bool in_place) {
  constexpr auto k = Op::kind;
  const int p = comm.size(), r = comm.rank();
  buffer<T> in = inputs<T>(k, r, n), out(n, to<T>(0));
  if (in_place)
    comm.all_reduce(std::span<T>(in), Op{});
  else
    comm.all_reduce(std::span<const T>(in), std::span<T>(out), Op{});
  if (check_reduced<T>(f, "all_reduce", k, p, r, n, (in_place ? in : out).data(), 0, in_place) &&
      !in_place)
    check_inputs<T>(f, "all_reduce", k, p, r, in);
}

template <class T, class Op, class Comm>
void reduce_case(Comm& comm, failures& f, std::size_t n, bool in_place) {
  constexpr auto k = Op::kind;
  const int p = comm.size(), r = comm.rank(),
            root = static_cast<int>(n % static_cast<std::size_t>(p));
  buffer<T> in = inputs<T>(k, r, n), out(r == root ? n : 0, to<T>(0));
  if (in_place)
    comm.reduce(std::span<T>(in), Op{}, root);
  else
    comm.reduce(std::span<const T>(in), std::span<T>(out), Op{}, root);
  if (r == root)
    check_reduced<T>(f, "reduce", k, p, r, n, (in_place ? in : out).data(), 0, in_place);
  else
    check_inputs<T>(f, "reduce (non-root)", k, p, r, in);
}

template <class T, class Op, class Comm>
void reduce_scatter_case(Comm& comm, failures& f, std::size_t n, bool in_place) {
  constexpr auto k = Op::kind;
  const int p = comm.size(), r = comm.rank();
  const std::size_t total = n * static_cast<std::size_t>(p), mine = n * static_cast<std::size_t>(r);
  buffer<T> in = inputs<T>(k, r, total), out(n, to<T>(0));
  if (in_place)
    comm.reduce_scatter(std::span<T>(in), Op{});
  else
    comm.reduce_scatter(std::span<const T>(in), std::span<T>(out), Op{});
  check_reduced<T>(f, "reduce_scatter", k, p, r, n, in_place ? in.data() + mine : out.data(), mine,
                   in_place);
}

template <class P, class T, class Op, class Comm>
void reducing_sweep(Comm& comm, failures& f) {
  using tr = typename Comm::transport_type;
  for (std::size_t n : counts_for(comm.size()))
    for (bool in_place : {false, true}) {
      if constexpr (tutti::detail::has_all_reduce<P, tr>)
        all_reduce_case<T, Op>(comm, f, n, in_place);
      if constexpr (tutti::detail::has_reduce<P, tr>) reduce_case<T, Op>(comm, f, n, in_place);
      if constexpr (tutti::detail::has_reduce_scatter<P, tr>)
        reduce_scatter_case<T, Op>(comm, f, n, in_place);
    }
}

// ---- data-movement collectives ---------------------------------------------------------------

template <class T, class Comm>
void broadcast_case(Comm& comm, failures& f, std::size_t n) {
  const int p = comm.size(), r = comm.rank(),
            root = static_cast<int>((n + 1) % static_cast<std::size_t>(p));
  buffer<T> buf(n);
  if (r == root)
    fill_data(buf.data(), root, n);
  else
    fill_data(buf.data(), 99, n, 1);
  comm.broadcast(std::span<T>(buf), root);
  if (!holds_data(buf.data(), root, n))
    f.add("broadcast " + tname<T>() + " p=" + std::to_string(p) + " n=" + std::to_string(n));
}

template <class T, class Comm>
void all_gather_case(Comm& comm, failures& f, std::size_t n, bool in_place) {
  const int p = comm.size(), r = comm.rank();
  const auto up = static_cast<std::size_t>(p), ur = static_cast<std::size_t>(r);
  buffer<T> in(n), out(n * up, datum<T>(99, 0));
  fill_data(in.data(), r, n);
  if (in_place) {
    for (std::size_t i = 0; i < n; ++i) out[ur * n + i] = in[i];
    comm.all_gather(std::span<T>(out));
  } else {
    comm.all_gather(std::span<const T>(in), std::span<T>(out));
  }
  for (std::size_t q = 0; q < up; ++q)
    if (!holds_data(out.data() + q * n, static_cast<int>(q), n)) {
      f.add("all_gather " + tname<T>() + " p=" + std::to_string(p) + " n=" + std::to_string(n));
      return;
    }
}

template <class T, class Comm>
void gather_scatter_case(Comm& comm, failures& f, std::size_t n) {
  const int p = comm.size(), r = comm.rank(),
            root = static_cast<int>((n + 2) % static_cast<std::size_t>(p));
  const auto up = static_cast<std::size_t>(p);
  buffer<T> in(n), all(r == root ? n * up : 0, datum<T>(99, 0));
  fill_data(in.data(), r, n);
  comm.gather(std::span<const T>(in), std::span<T>(all), root);
  if (r == root)
    for (std::size_t q = 0; q < up; ++q)
      if (!holds_data(all.data() + q * n, static_cast<int>(q), n)) {
        f.add("gather " + tname<T>() + " p=" + std::to_string(p) + " n=" + std::to_string(n));
        return;
      }
  // Scatter it back: everyone must get its own block again.
  buffer<T> back(n, datum<T>(98, 0));
  comm.scatter(std::span<const T>(all), std::span<T>(back), root);
  if (!holds_data(back.data(), r, n))
    f.add("scatter " + tname<T>() + " p=" + std::to_string(p) + " n=" + std::to_string(n));
}

template <class T, class Comm>
void all_to_all_case(Comm& comm, failures& f, std::size_t n, bool in_place) {
  const int p = comm.size(), r = comm.rank();
  const auto up = static_cast<std::size_t>(p);
  buffer<T> in(n * up), out(n * up, datum<T>(99, 0));
  for (std::size_t q = 0; q < up; ++q) fill_data(in.data() + q * n, r * 8 + static_cast<int>(q), n);
  if (in_place) {
    out = in;
    comm.all_to_all(std::span<T>(out));
  } else {
    comm.all_to_all(std::span<const T>(in), std::span<T>(out));
  }
  for (std::size_t q = 0; q < up; ++q)
    if (!holds_data(out.data() + q * n, static_cast<int>(q) * 8 + r, n)) {
      f.add("all_to_all " + tname<T>() + " p=" + std::to_string(p) + " n=" + std::to_string(n) +
            (in_place ? " in place" : ""));
      return;
    }
}

/// Per-rank counts for the v-variants: uneven, with zeros, summing to about p * n.
std::vector<std::size_t> v_counts(int p, std::size_t n, int salt) {
  std::vector<std::size_t> c(static_cast<std::size_t>(p));
  for (int q = 0; q < p; ++q)
    c[static_cast<std::size_t>(q)] =
        (q + salt) % 3 == 0 ? 0 : n + static_cast<std::size_t>((q * 7 + salt) % 5);
  return c;
}

template <class T, class Comm>
void vector_case(Comm& comm, failures& f, std::size_t n) {
  const int p = comm.size(), r = comm.rank();
  const auto up = static_cast<std::size_t>(p), ur = static_cast<std::size_t>(r);
  const auto counts = v_counts(p, n, 1);
  const auto off = tutti_harness::prefix_offsets(counts);
  const std::size_t total = off.back();
  const int root = static_cast<int>(n % up);
  auto fail = [&](const char* what) {
    f.add(std::string{what} + " " + tname<T>() + " p=" + std::to_string(p) +
          " n=" + std::to_string(n));
  };
  buffer<T> in(counts[ur]);
  fill_data(in.data(), r, in.size());

  buffer<T> all(total, datum<T>(99, 0));
  comm.all_gatherv(std::span<const T>(in), std::span<T>(all), std::span<const std::size_t>(counts));
  for (std::size_t q = 0; q < up; ++q)
    if (!holds_data(all.data() + off[q], static_cast<int>(q), counts[q]))
      return fail("all_gatherv");

  buffer<T> g(r == root ? total : 0, datum<T>(99, 0));
  comm.gatherv(std::span<const T>(in), std::span<T>(g), std::span<const std::size_t>(counts), root);
  if (r == root && g != all) return fail("gatherv");

  buffer<T> s(counts[ur], datum<T>(98, 0));
  comm.scatterv(std::span<const T>(r == root ? all : buffer<T>{}), std::span<T>(s),
                std::span<const std::size_t>(counts), root);
  if (s != in) return fail("scatterv");

  // all_to_allv: rank r sends sc[q] = (r + 2q + n) % 4 elements to q.
  std::vector<std::size_t> sc(up), rc(up);
  for (std::size_t q = 0; q < up; ++q) {
    sc[q] = (ur + 2 * q + n) % 4;
    rc[q] = (q + 2 * ur + n) % 4;
  }
  const auto so = tutti_harness::prefix_offsets(sc), ro = tutti_harness::prefix_offsets(rc);
  buffer<T> a(so.back()), b(ro.back(), datum<T>(99, 0));
  for (std::size_t q = 0; q < up; ++q)
    fill_data(a.data() + so[q], r * 8 + static_cast<int>(q), sc[q]);
  comm.all_to_allv(std::span<const T>(a), std::span<const std::size_t>(sc), std::span<T>(b),
                   std::span<const std::size_t>(rc));
  for (std::size_t q = 0; q < up; ++q)
    if (!holds_data(b.data() + ro[q], static_cast<int>(q) * 8 + r, rc[q]))
      return fail("all_to_allv");
}

template <class P, class T, class Comm>
void moving_sweep(Comm& comm, failures& f) {
  using tr = typename Comm::transport_type;
  for (std::size_t n : counts_for(comm.size())) {
    if constexpr (tutti::detail::has_broadcast<P, tr>) broadcast_case<T>(comm, f, n);
    if constexpr (tutti::detail::has_gather<P, tr> && tutti::detail::has_scatter<P, tr>)
      gather_scatter_case<T>(comm, f, n);
    if constexpr (tutti::detail::has_all_gatherv<P, tr> && tutti::detail::has_gatherv<P, tr> &&
                  tutti::detail::has_scatterv<P, tr> && tutti::detail::has_all_to_allv<P, tr>)
      vector_case<T>(comm, f, n);
    for (bool in_place : {false, true}) {
      if constexpr (tutti::detail::has_all_gather<P, tr>) all_gather_case<T>(comm, f, n, in_place);
      if constexpr (tutti::detail::has_all_to_all<P, tr>) all_to_all_case<T>(comm, f, n, in_place);
    }
  }
  if constexpr (tutti::detail::has_barrier<P, tr>) comm.barrier();
}

/// The whole sweep on `comm`, for policy P (which must be comm's algorithm), over the element
/// types in the tuple `Types` (default: harness::sweep_types).
template <class P, class Types = sweep_types, class Comm>
void run_suite(Comm& comm, failures& f) {
  using tr = typename Comm::transport_type;
  for_each_type<Types>([&]<class T>() {
    moving_sweep<P, T>(comm, f);
    for_each_type<all_ops>([&]<class Op>() {
      if constexpr (tutti::reducible<Op, T>) reducing_sweep<P, T, Op>(comm, f);
    });
  });
  if (large_here(comm.size())) {
    for_each_type<Types>([&]<class T>() {
      if constexpr (large_type<T>) {
        for (bool in_place : {false, true}) {
          if constexpr (tutti::detail::has_all_reduce<P, tr>)
            all_reduce_case<T, tutti::sum_t>(comm, f, large_count + 3, in_place);
          if constexpr (tutti::detail::has_reduce_scatter<P, tr>)
            reduce_scatter_case<T, tutti::sum_t>(comm, f, large_count / 8 + 1, in_place);
          if constexpr (tutti::detail::has_all_gather<P, tr>)
            all_gather_case<T>(comm, f, large_count / 8 + 1, in_place);
        }
        if constexpr (tutti::detail::has_reduce<P, tr>)
          reduce_case<T, tutti::sum_t>(comm, f, large_count + 1, false);
        if constexpr (tutti::detail::has_broadcast<P, tr>)
          broadcast_case<T>(comm, f, large_count + 5);
      }
    });
  }
}

}  // namespace suite

// tutti-soak (issue 9, item 3): random collectives on several communicators at once, every
// output element checked bit for bit against a reference.
//
// Every rank draws the same sequence from std::mt19937_64(seed): for each op the communicator
// (one per policy: automatic, ring, tree, direct, all over the same transport and alive at
// once), the collective (only ones that policy implements), element type, op, count, root, in
// place or not, sync or async. Inputs are small integers hashed from (seed, op index, rank,
// element), so every rank computes the expected result of every op from all ranks' inputs in
// exact integer arithmetic, and sums and products stay exact in every type (bfloat16 holds
// integers up to 256). Async ops stay outstanding (up to four, across communicators) and are
// waited in random order. On a wrong value a rank prints what it ran and exits 1.
//
//   tutti-soak [--ops N] [--seed S] [--np N] [--transport inproc|shm|gloo] [--max-count C]
//              [--corrupt-at K]   (self-test: rank 0 flips one output of op K; must exit 1)

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <tutti/tutti.hpp>
#ifdef TUTTI_HAVE_GLOO
#include <tutti/transport/gloo.hpp>
#endif

#include "../harness_common.hpp"

namespace {

using tutti_harness::prefix_offsets;
using tutti_harness::with_op;

enum class coll : int {
  all_reduce,
  reduce,
  broadcast,
  all_gather,
  reduce_scatter,
  gather,
  scatter,
  all_to_all,
  all_gatherv,
  all_to_allv,
  barrier
};
constexpr int n_colls = 11;
constexpr std::array<const char*, n_colls> coll_names{
    "all_reduce", "reduce",     "broadcast",   "all_gather",  "reduce_scatter", "gather",
    "scatter",    "all_to_all", "all_gatherv", "all_to_allv", "barrier"};

constexpr std::array<const char*, 7> type_names{"float", "double", "int32",   "int64",
                                                "uint8", "half",   "bfloat16"};
/// The types drawn under the sanitizers: float, int64 and half (4, 8 and 2 bytes; floating
/// and integer). Every type is instantiated for each communicator and collective, and the
/// seven cost 415 s of compile alone under ASan+UBSan (155 s at -O3); what the other four add
/// is their size and kernel, which Release's run and the sanitizers' sweeps cover.
constexpr std::array<int, 3> drawn_few_types{0, 3, 5};
/// The element types, in type_names' order (drawn_few_types' under few_types).
using soak_types =
    std::conditional_t<tutti_harness::few_types, std::tuple<float, std::int64_t, tutti::half>,
                       std::tuple<float, double, std::int32_t, std::int64_t, std::uint8_t,
                                  tutti::half, tutti::bfloat16>>;

[[nodiscard]] int draw_type(std::uint64_t x) {
  if constexpr (tutti_harness::few_types)
    return drawn_few_types[static_cast<std::size_t>(x % drawn_few_types.size())];
  return static_cast<int>(x % type_names.size());
}
constexpr std::array<tutti::op_kind, 5> op_kinds{tutti::op_kind::sum, tutti::op_kind::prod,
                                                 tutti::op_kind::min, tutti::op_kind::max,
                                                 tutti::op_kind::avg};

struct config {
  long ops = 10'000;
  std::uint64_t seed = 1;
  int np = 4;
  std::string transport = "shm";
  std::size_t max_count = 4096;
  long corrupt_at = -1;
};

/// One drawn op: the same on every rank.
struct op_desc {
  long index = 0;
  coll c = coll::barrier;
  int comm = 0;
  const char* policy = "";
  int type = 0;
  tutti::op_kind op = tutti::op_kind::none;
  std::size_t n = 0;
  int root = 0;
  bool in_place = false;
  bool async = false;
  bool empty_off_root = false;      // pass empty buffers where the API allows it off the root
  std::vector<std::size_t> counts;  // all_gatherv: p; all_to_allv: p x p, row = sender
  std::uint64_t seed = 0;
  int p = 1;
  int rank = 0;
  bool corrupt = false;
};

[[nodiscard]] std::uint64_t mix(std::uint64_t x) noexcept {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// The integer rank `r` contributes at element `i` of op `d`. Ranges keep every reduction
/// exact in every type: |sum| <= 240, |product| <= 2^p, min/max within +-100.
template <class T>
[[nodiscard]] std::int64_t value(const op_desc& d, int r, std::size_t i) noexcept {
  const std::uint64_t h = mix(
      mix(mix(mix(d.seed) + static_cast<std::uint64_t>(d.index)) + static_cast<std::uint64_t>(r)) +
      i);
  constexpr bool unsigned_t = std::is_unsigned_v<T>;
  const auto pick = [h](std::int64_t lo, std::int64_t hi) {
    return lo + static_cast<std::int64_t>(h % static_cast<std::uint64_t>(hi - lo + 1));
  };
  const std::int64_t span = std::max<std::int64_t>(1, 240 / d.p);
  switch (d.op) {
    case tutti::op_kind::sum:
      return unsigned_t ? pick(0, span) : pick(-span, span);
    case tutti::op_kind::avg:
      return pick(0, span);  // non-negative: integer avg's rounding is then plain floor
    case tutti::op_kind::prod: {
      const std::int64_t v = pick(0, 2);
      return v == 0 ? (unsigned_t ? 1 : -1) : v;
    }
    default:
      return unsigned_t ? pick(0, 200) : pick(-100, 100);
  }
}

template <class T>
[[nodiscard]] T to(std::int64_t v) noexcept {
  if constexpr (std::is_same_v<T, tutti::half> || std::is_same_v<T, tutti::bfloat16>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

template <class T>
[[nodiscard]] double as_double(T v) noexcept {
  if constexpr (std::is_same_v<T, tutti::half> || std::is_same_v<T, tutti::bfloat16>)
    return static_cast<double>(static_cast<float>(v));
  else
    return static_cast<double>(v);
}

template <class T>
[[nodiscard]] T input(const op_desc& d, int r, std::size_t i) noexcept {
  return to<T>(value<T>(d, r, i));
}

/// Filler for outputs before the call (77..126, different per rank and element), so that an
/// element the collective failed to write shows up as a wrong value.
template <class T>
[[nodiscard]] T poison(const op_desc& d, std::size_t i) noexcept {
  return to<T>(77 + static_cast<std::int64_t>((static_cast<std::size_t>(d.rank) * 7 + i) % 50));
}

/// The reduction over every rank of element `i`, computed exactly, in T.
template <class T>
[[nodiscard]] T reduced(const op_desc& d, std::size_t i) noexcept {
  const std::int64_t acc =
      tutti_harness::reduce_exact(d.op, d.p, [&](int r) { return value<T>(d, r, i); });
  if (d.op != tutti::op_kind::avg) return to<T>(acc);
  // avg divides the exact sum by the world size as the library documents: integer division
  // for integers, in T for float and double, through float for the 16-bit types.
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(acc / d.p);
  else if constexpr (std::is_floating_point_v<T>)
    return static_cast<T>(static_cast<T>(acc) / static_cast<T>(d.p));
  else
    return T(static_cast<float>(acc) / static_cast<float>(d.p));
}

[[noreturn]] void fail(const op_desc& d, const char* what, std::size_t i, double got, double want) {
  std::fprintf(stderr,
               "tutti-soak: MISMATCH at op %ld: %s on %s, %s %s, count %zu, root %d, %s, %s, "
               "rank %d of %d: %s element %zu is %g, expected %g (seed %llu)\n",
               d.index, coll_names[static_cast<std::size_t>(d.c)], d.policy,
               type_names[static_cast<std::size_t>(d.type)], std::string{tutti::name(d.op)}.c_str(),
               d.n, d.root, d.in_place ? "in place" : "out of place", d.async ? "async" : "sync",
               d.rank, d.p, what, i, got, want, static_cast<unsigned long long>(d.seed));
  std::fflush(stderr);
  std::_Exit(1);
}

/// The bits of a value, as an unsigned integer of its size.
template <class T>
auto bits_of(const T& v) noexcept {
  if constexpr (sizeof(T) == 1)
    return std::bit_cast<std::uint8_t>(v);
  else if constexpr (sizeof(T) == 2)
    return std::bit_cast<std::uint16_t>(v);
  else if constexpr (sizeof(T) == 4)
    return std::bit_cast<std::uint32_t>(v);
  else
    return std::bit_cast<std::uint64_t>(v);
}

/// Compares got[i] with want(i) bit for bit for every i.
template <class T, class Want>
void expect(const op_desc& d, const char* what, std::span<const T> got, Want&& want) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    const T w = want(i);
    if (bits_of(got[i]) != bits_of(w)) fail(d, what, i, as_double(got[i]), as_double(w));
  }
}

/// The buffers of one op; shared with the check of an async op so they outlive the call.
template <class T>
struct buffers {
  std::vector<T> in, out;
};

struct pending {
  tutti::work w;
  std::function<void()> check;
};

/// Which collectives policy A implements over transport X, as a bit mask over `coll`.
template <class A, class X>
constexpr unsigned capabilities() {
  return tutti_harness::capabilities<A, X, coll>();
}

/// One op of element type T on `comm`: its buffers, the call (blocking, or async into `w`) and
/// `check`, which tests what the call left. Each collective has a member that fills the
/// buffers, makes the call and sets `check`; call() runs the one drawn.
template <class T, class Comm>
struct op_runner {
  op_runner(Comm& c, const op_desc& od) : comm(c), d(od) {}

  Comm& comm;
  const op_desc& d;
  const std::size_t n = d.n, p = static_cast<std::size_t>(d.p),
                    me = static_cast<std::size_t>(d.rank);
  const bool root = d.rank == d.root;
  std::shared_ptr<buffers<T>> b = std::make_shared<buffers<T>>();
  tutti::work w;
  // The checks copy what they read (`b`, `d`, the sizes), never `this`: an async op's check
  // runs after its runner is gone.
  std::function<void()> check;
  std::span<T> in_s, out_s;

  /// Runs the drawn collective if the policy implements it; `check` stays empty if not.
  void call() {
    tutti_harness::call_drawn<typename Comm::algorithm_type, typename Comm::transport_type>(d.c,
                                                                                            *this);
  }

  /// Sizes the input to `len` elements of this rank's input values.
  void fill_in(std::size_t len) {
    b->in.resize(len);
    for (std::size_t i = 0; i < len; ++i) b->in[i] = input<T>(d, d.rank, i);
  }
  /// Sizes the output to `len` elements of poison.
  void fill_out(std::size_t len) {
    b->out.resize(len);
    for (std::size_t i = 0; i < len; ++i) b->out[i] = poison<T>(d, i);
  }
  /// Points in_s and out_s at the buffers as last sized.
  void spans() {
    in_s = std::span<T>(b->in);
    out_s = std::span<T>(b->out);
  }
  /// The check that the input is as fill_in() left it: an out-of-place call must not change it.
  [[nodiscard]] auto input_check() const {
    return [b = b, d = d] {
      expect<T>(d, "input", b->in, [&](std::size_t i) { return input<T>(d, d.rank, i); });
    };
  }

  /// all_reduce: every rank holds the reduction.
  void all_reduce() {
    fill_in(n);
    fill_out(d.in_place ? 0 : n);
    spans();
    with_op(d.op, [&](auto op) {
      if (d.in_place)
        d.async ? void(w = comm.all_reduce_async(in_s, op)) : comm.all_reduce(in_s, op);
      else
        d.async ? void(w = comm.all_reduce_async(std::span<const T>(in_s), out_s, op))
                : comm.all_reduce(std::span<const T>(in_s), out_s, op);
    });
    check = [b = b, d = d, input_kept = input_check()] {
      expect<T>(d, "result", d.in_place ? b->in : b->out,
                [&](std::size_t i) { return reduced<T>(d, i); });
      if (!d.in_place) input_kept();
    };
  }

  /// reduce: the root holds the reduction, the others' buffers are untouched.
  void reduce() {
    fill_in(n);
    fill_out(d.in_place || (!root && d.empty_off_root) ? 0 : n);
    spans();
    with_op(d.op, [&](auto op) {
      if (d.in_place)
        comm.reduce(in_s, op, d.root);
      else if (d.async)
        w = comm.reduce_async(std::span<const T>(in_s), out_s, op, d.root);
      else
        comm.reduce(std::span<const T>(in_s), out_s, op, d.root);
    });
    check = [b = b, d = d, root = root, input_kept = input_check()] {
      if (d.in_place) {
        if (root)
          expect<T>(d, "result", b->in, [&](std::size_t i) { return reduced<T>(d, i); });
        else
          input_kept();  // documented: non-roots' buf is not changed
        return;
      }
      if (root)
        expect<T>(d, "result", b->out, [&](std::size_t i) { return reduced<T>(d, i); });
      else
        expect<T>(d, "untouched output", b->out, [&](std::size_t i) { return poison<T>(d, i); });
      input_kept();
    };
  }

  /// broadcast: every rank holds the root's input.
  void broadcast() {
    fill_in(n);
    if (!root)
      for (std::size_t i = 0; i < n; ++i) b->in[i] = poison<T>(d, i);
    spans();
    d.async ? void(w = comm.broadcast_async(in_s, d.root)) : comm.broadcast(in_s, d.root);
    check = [b = b, d = d] {
      expect<T>(d, "result", b->in, [&](std::size_t i) { return input<T>(d, d.root, i); });
    };
  }

  /// all_gather: every rank holds every rank's input, in rank order.
  void all_gather() {
    if (d.in_place) {
      fill_out(p * n);
      for (std::size_t i = 0; i < n; ++i) b->out[me * n + i] = input<T>(d, d.rank, i);
      spans();
      comm.all_gather(out_s);
    } else {
      fill_in(n);
      fill_out(p * n);
      spans();
      d.async ? void(w = comm.all_gather_async(std::span<const T>(in_s), out_s))
              : comm.all_gather(std::span<const T>(in_s), out_s);
    }
    check = [b = b, d = d, n = n, input_kept = input_check()] {
      expect<T>(d, "result", b->out,
                [&](std::size_t i) { return input<T>(d, static_cast<int>(i / n), i % n); });
      if (!d.in_place) input_kept();
    };
  }

  /// reduce_scatter: each rank holds its block of the reduction.
  void reduce_scatter() {
    fill_in(p * n);
    fill_out(d.in_place ? 0 : n);
    spans();
    with_op(d.op, [&](auto op) {
      if (d.in_place)
        comm.reduce_scatter(in_s, op);
      else if (d.async)
        w = comm.reduce_scatter_async(std::span<const T>(in_s), out_s, op);
      else
        comm.reduce_scatter(std::span<const T>(in_s), out_s, op);
    });
    check = [b = b, d = d, n = n, me = me, input_kept = input_check()] {
      const std::span<const T> res =
          d.in_place ? std::span<const T>(b->in).subspan(me * n, n) : std::span<const T>(b->out);
      expect<T>(d, "result", res, [&](std::size_t i) { return reduced<T>(d, me * n + i); });
      if (!d.in_place) input_kept();
    };
  }

  /// gather: the root holds every rank's input, the others' outputs are untouched.
  void gather() {
    fill_in(n);
    fill_out(root || !d.empty_off_root ? p * n : 0);
    spans();
    d.async ? void(w = comm.gather_async(std::span<const T>(in_s), out_s, d.root))
            : comm.gather(std::span<const T>(in_s), out_s, d.root);
    check = [b = b, d = d, n = n, root = root, input_kept = input_check()] {
      if (root)
        expect<T>(d, "result", b->out,
                  [&](std::size_t i) { return input<T>(d, static_cast<int>(i / n), i % n); });
      else
        expect<T>(d, "untouched output", b->out, [&](std::size_t i) { return poison<T>(d, i); });
      input_kept();
    };
  }

  /// scatter: each rank holds its block of the root's input.
  void scatter() {
    fill_in(root || !d.empty_off_root ? p * n : 0);
    fill_out(n);
    spans();
    d.async ? void(w = comm.scatter_async(std::span<const T>(in_s), out_s, d.root))
            : comm.scatter(std::span<const T>(in_s), out_s, d.root);
    check = [b = b, d = d, n = n, me = me, input_kept = input_check()] {
      expect<T>(d, "result", b->out,
                [&](std::size_t i) { return input<T>(d, d.root, me * n + i); });
      input_kept();
    };
  }

  /// all_to_all: block r of each rank's result is its block of rank r's input.
  void all_to_all() {
    fill_in(p * n);
    fill_out(d.in_place ? 0 : p * n);
    spans();
    if (d.in_place)
      comm.all_to_all(in_s);
    else
      d.async ? void(w = comm.all_to_all_async(std::span<const T>(in_s), out_s))
              : comm.all_to_all(std::span<const T>(in_s), out_s);
    check = [b = b, d = d, n = n, me = me, input_kept = input_check()] {
      expect<T>(d, "result", d.in_place ? b->in : b->out, [&](std::size_t i) {
        return input<T>(d, static_cast<int>(i / n), me * n + i % n);
      });
      if (!d.in_place) input_kept();
    };
  }

  /// all_gatherv: every rank holds every rank's input, of the drawn counts, in rank order.
  void all_gatherv() {
    const auto off = prefix_offsets(d.counts);
    fill_in(d.counts[me]);
    fill_out(off.back());
    spans();
    comm.all_gatherv(std::span<const T>(in_s), out_s, std::span<const std::size_t>(d.counts));
    check = [b = b, d = d, off, input_kept = input_check()] {
      std::size_t r = 0;
      expect<T>(d, "result", b->out, [&](std::size_t i) {
        while (i >= off[r + 1]) ++r;
        return input<T>(d, static_cast<int>(r), i - off[r]);
      });
      input_kept();
    };
  }

  /// all_to_allv, of the drawn p x p counts: block r of each rank's result is what rank r
  /// sent it.
  void all_to_allv() {
    // Element k of the block rank s sends to rank t is input(s, t * stride + k).
    const std::size_t stride = d.n + 1;
    std::vector<std::size_t> sc(p), rc(p);
    for (std::size_t j = 0; j < p; ++j) {
      sc[j] = d.counts[me * p + j];
      rc[j] = d.counts[j * p + me];
    }
    const auto soff = prefix_offsets(sc), roff = prefix_offsets(rc);
    b->in.resize(soff.back());
    for (std::size_t j = 0; j < p; ++j)
      for (std::size_t k = 0; k < sc[j]; ++k)
        b->in[soff[j] + k] = input<T>(d, d.rank, j * stride + k);
    fill_out(roff.back());
    spans();
    auto counts = std::make_shared<std::array<std::vector<std::size_t>, 2>>(
        std::array<std::vector<std::size_t>, 2>{sc, rc});
    const std::span<const std::size_t> scs((*counts)[0]), rcs((*counts)[1]);
    d.async ? void(w = comm.all_to_allv_async(std::span<const T>(in_s), scs, out_s, rcs))
            : comm.all_to_allv(std::span<const T>(in_s), scs, out_s, rcs);
    check = [b = b, d = d, me = me, stride, soff, roff, counts] {
      std::size_t r = 0;
      expect<T>(d, "result", b->out, [&](std::size_t i) {
        while (i >= roff[r + 1]) ++r;
        return input<T>(d, static_cast<int>(r), me * stride + (i - roff[r]));
      });
      expect<T>(d, "input", b->in, [&](std::size_t i) {
        std::size_t j = 0;
        while (i >= soff[j + 1]) ++j;
        return input<T>(d, d.rank, j * stride + (i - soff[j]));
      });
    };
  }

  /// barrier: nothing to check but that it returns.
  void barrier() {
    d.async ? void(w = comm.barrier_async()) : comm.barrier();
    check = [] {};
  }
};

/// Runs op `d` with element type T on `comm`: blocking and checked at once, or async and
/// queued on `queue` with its check.
template <class T, class Comm>
void run_op(Comm& comm, const op_desc& d, std::vector<pending>& queue, bool& corrupted) {
  op_runner<T, Comm> r(comm, d);
  r.call();
  if (!r.check) {
    std::fprintf(stderr, "tutti-soak: internal error: %s drawn for %s, which lacks it\n",
                 coll_names[static_cast<std::size_t>(d.c)], d.policy);
    std::_Exit(2);
  }
  if (d.corrupt && !(r.b->out.empty() && r.b->in.empty())) {
    // Self-test: spoil one element after the call; the check must catch it.
    r.check = [b = r.b, inner = std::move(r.check)] {
      std::vector<T>& res = b->out.empty() ? b->in : b->out;
      res[0] = to<T>(as_double(res[0]) == 99.0 ? 98 : 99);
      inner();
    };
    corrupted = true;
  }
  if (d.async)
    queue.push_back({std::move(r.w), std::move(r.check)});
  else
    r.check();
}

template <class Comm>
void run_typed(Comm& comm, const op_desc& d, std::vector<pending>& queue, bool& corrupted) {
  tutti_harness::with_type<soak_types>(tutti_harness::type_slot(d.type, drawn_few_types),
                                       [&]<class T>() { run_op<T>(comm, d, queue, corrupted); });
}

[[nodiscard]] bool has_async(coll c, bool in_place) {
  switch (c) {
    case coll::all_gatherv:
      return false;
    case coll::all_reduce:
    case coll::broadcast:
    case coll::barrier:
      return true;
    default:
      return !in_place;  // the in-place forms of the rest are blocking only
  }
}

[[nodiscard]] bool has_in_place(coll c) {
  return c == coll::all_reduce || c == coll::reduce || c == coll::all_gather ||
         c == coll::reduce_scatter || c == coll::all_to_all;
}

[[nodiscard]] bool reducing(coll c) {
  return c == coll::all_reduce || c == coll::reduce || c == coll::reduce_scatter;
}

/// The next draw of `rng`, reduced to [0, n).
[[nodiscard]] std::size_t below(std::mt19937_64& rng, std::size_t n) {
  return static_cast<std::size_t>(rng() % n);
}

/// This rank's place in the world and its N communicators' policies and capabilities() masks.
template <std::size_t N>
struct soak_world {
  int rank = 0;
  int p = 1;
  std::array<const char*, N> policies{};
  std::array<unsigned, N> caps{};

  /// Prints the collectives each communicator implements.
  void print_capabilities() const {
    for (std::size_t k = 0; k < N; ++k) {
      std::printf("communicator %zu (%s):", k, policies[k]);
      for (int c = 0; c < n_colls; ++c)
        if ((caps[k] >> c) & 1U) std::printf(" %s", coll_names[static_cast<std::size_t>(c)]);
      std::printf("\n");
    }
  }
};

/// Draws a collective among those that `cap`, a capabilities() mask, holds.
[[nodiscard]] coll draw_coll(std::mt19937_64& rng, unsigned cap) {
  std::array<int, n_colls> choices{};
  std::size_t m = 0;
  for (int c = 0; c < n_colls; ++c)
    if ((cap >> c) & 1U) choices[m++] = c;
  coll drawn = coll::barrier;
  // A barrier checks little: redraw it three times in four.
  do drawn = static_cast<coll>(choices[below(rng, m)]);
  while (drawn == coll::barrier && below(rng, 4) != 0);
  return drawn;
}

/// Draws an op's count: 0 or 1, around the world size `p`, odd, or any up to `max_count`.
[[nodiscard]] std::size_t draw_count(std::mt19937_64& rng, std::size_t max_count, int p) {
  switch (below(rng, 4)) {
    case 0:
      return below(rng, 2);  // 0 or 1
    case 1:
      return 2 + below(rng, 2 * static_cast<std::size_t>(p));  // around the world size
    case 2:
      return std::min(max_count, 2 * below(rng, max_count / 2 + 1) + 1);  // odd
    default:
      return below(rng, max_count + 1);
  }
}

/// Draws the counts of a v-collective (all_gatherv: p; all_to_allv: p x p, row = sender) of
/// at most `d.n` each; none for the other collectives.
[[nodiscard]] std::vector<std::size_t> draw_counts(std::mt19937_64& rng, const op_desc& d) {
  const auto p = static_cast<std::size_t>(d.p);
  std::vector<std::size_t> counts;
  if (d.c == coll::all_gatherv) {
    counts.resize(p);
    for (auto& k : counts) k = below(rng, 2) == 0 ? 0 : below(rng, d.n + 1);
  } else if (d.c == coll::all_to_allv) {
    counts.resize(p * p);
    for (auto& k : counts) k = below(rng, 3) == 0 ? 0 : below(rng, d.n + 1);
  }
  return counts;
}

/// Draws op `index` on `world`: the same op on every rank, but for `rank`.
template <std::size_t N>
[[nodiscard]] op_desc draw_op(std::mt19937_64& rng, const config& cfg, const soak_world<N>& world,
                              long index) {
  op_desc d;
  d.index = index;
  d.seed = cfg.seed;
  d.p = world.p;
  d.rank = world.rank;
  d.comm = static_cast<int>(below(rng, N));
  d.policy = world.policies[static_cast<std::size_t>(d.comm)];
  d.c = draw_coll(rng, world.caps[static_cast<std::size_t>(d.comm)]);
  d.type = draw_type(rng());
  d.op = reducing(d.c) ? op_kinds[below(rng, op_kinds.size())] : tutti::op_kind::none;
  d.n = draw_count(rng, cfg.max_count, world.p);
  d.root = static_cast<int>(below(rng, static_cast<std::size_t>(world.p)));
  d.in_place = has_in_place(d.c) && below(rng, 2) == 0;
  d.async = has_async(d.c, d.in_place) && below(rng, 2) == 0;
  d.empty_off_root = below(rng, 2) == 0;
  d.counts = draw_counts(rng, d);
  return d;
}

/// Waits for an outstanding async op drawn at random, runs its check and drops it.
void drain_one(std::mt19937_64& rng, std::vector<pending>& queue) {
  const std::size_t i = below(rng, queue.size());
  queue[i].w.wait();
  queue[i].check();
  queue.erase(queue.begin() + static_cast<std::ptrdiff_t>(i));
}

/// How many ops of each kind this rank ran, for rank 0's summary.
struct soak_tally {
  std::array<long, n_colls> done{};
  long n_async = 0, n_in_place = 0;

  /// Counts op `d`.
  void add(const op_desc& d) {
    ++done[static_cast<std::size_t>(d.c)];
    n_async += d.async ? 1 : 0;
    n_in_place += d.in_place ? 1 : 0;
  }

  /// Prints the count of each collective and the closing line of a soak on `p` ranks.
  void print(const config& cfg, int p, double secs) const {
    long total = 0;
    for (int c = 0; c < n_colls; ++c) {
      std::printf("%-15s %ld\n", coll_names[static_cast<std::size_t>(c)],
                  done[static_cast<std::size_t>(c)]);
      total += done[static_cast<std::size_t>(c)];
    }
    std::printf(
        "tutti-soak: %ld collectives checked on %d ranks (%ld async, %ld in place), "
        "seed %llu, max count %zu: all correct, %.1f s\n",
        total, p, n_async, n_in_place, static_cast<unsigned long long>(cfg.seed), cfg.max_count,
        secs);
    std::fflush(stdout);
  }
};

/// The soak on one rank: `comms` are this rank's communicators, one per policy.
template <class... Comm>
int soak(const config& cfg, Comm&... comms) {
  const auto& first = std::get<0>(std::forward_as_tuple(comms...));
  const soak_world<sizeof...(Comm)> world{
      first.rank(),
      first.size(),
      {Comm::algorithm_type::name...},
      {capabilities<typename Comm::algorithm_type, typename Comm::transport_type>()...}};
  if (world.rank == 0) world.print_capabilities();

  std::mt19937_64 rng(cfg.seed);
  std::vector<pending> queue;
  bool corrupted = false;
  soak_tally tally;
  const auto start = std::chrono::steady_clock::now();
  for (long index = 0; index < cfg.ops; ++index) {
    op_desc d = draw_op(rng, cfg, world, index);
    // --corrupt-at K: rank 0 spoils the first op from K on that has a buffer.
    d.corrupt = world.rank == 0 && cfg.corrupt_at >= 0 && index >= cfg.corrupt_at && !corrupted;
    tally.add(d);

    std::size_t k = 0;
    ((k++ == static_cast<std::size_t>(d.comm) ? run_typed(comms, d, queue, corrupted) : void()),
     ...);

    const std::size_t cap = 1 + below(rng, 4);  // up to 4 outstanding, across communicators
    while (queue.size() > cap) drain_one(rng, queue);
    if (below(rng, 8) == 0 && !queue.empty()) drain_one(rng, queue);
  }
  while (!queue.empty()) drain_one(rng, queue);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (world.rank == 0) tally.print(cfg, world.p, secs);
  return 0;
}

template <class X>
int soak_process(const config& cfg) {
  auto a = tutti::communicator<X, tutti::automatic>::from_env();
  auto b = tutti::communicator<X, tutti::ring>::from_env();
  auto c = tutti::communicator<X, tutti::tree>::from_env();
  auto d = tutti::communicator<X, tutti::direct>::from_env();
  return soak(cfg, a, b, c, d);
}

int soak_inproc(const config& cfg) {
  // inproc::run makes one world; the other communicators get worlds of their own, built the
  // way inproc::run builds its one.
  const auto w1 = std::make_shared<tutti::detail::inproc_world>(cfg.np);
  const auto w2 = std::make_shared<tutti::detail::inproc_world>(cfg.np);
  const auto w3 = std::make_shared<tutti::detail::inproc_world>(cfg.np);
  tutti::inproc::run<tutti::automatic>(cfg.np, [&](auto& a) {
    const int r = a.rank();
    tutti::communicator<tutti::inproc, tutti::ring> b(tutti::inproc(w1, r));
    tutti::communicator<tutti::inproc, tutti::tree> c(tutti::inproc(w2, r));
    tutti::communicator<tutti::inproc, tutti::direct> d(tutti::inproc(w3, r));
    (void)soak(cfg, a, b, c, d);
  });
  return 0;
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "tutti-soak: %s\nusage: tutti-soak [--ops N] [--seed S] [--np N] "
               "[--transport inproc|shm|gloo] [--max-count C] [--corrupt-at K]\n",
               why);
  std::exit(2);
}

config parse(int argc, char** argv) {
  config cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (i + 1 >= argc) usage(("missing value after " + std::string{a}).c_str());
    const char* v = argv[++i];
    char* end = nullptr;
    const unsigned long long x = std::strtoull(v, &end, 10);
    const bool number = end != v && *end == '\0';
    if (a == "--transport") {
      cfg.transport = v;
      continue;
    }
    if (!number) usage(("not a number: " + std::string{v}).c_str());
    if (a == "--ops")
      cfg.ops = static_cast<long>(x);
    else if (a == "--seed")
      cfg.seed = x;
    else if (a == "--np")
      cfg.np = static_cast<int>(x);
    else if (a == "--max-count")
      cfg.max_count = static_cast<std::size_t>(x);
    else if (a == "--corrupt-at")
      cfg.corrupt_at = static_cast<long>(x);
    else
      usage(("unknown option " + std::string{a}).c_str());
  }
  // Products reach 2^np: keep them inside half's range; counts index values below 2^32.
  if (cfg.np < 1 || cfg.np > 12) usage("--np must be 1..12");
  if (cfg.max_count < 1 || cfg.max_count > (1U << 20)) usage("--max-count must be 1..1048576");
  return cfg;
}

}  // namespace

int main(int argc, char** argv) {
  const config cfg = parse(argc, argv);
  try {
    if (cfg.transport == "inproc") return soak_inproc(cfg);
    if (cfg.transport == "shm")
      return tutti::spawn(cfg.np, [&cfg] { return soak_process<tutti::shm>(cfg); });
#ifdef TUTTI_HAVE_GLOO
    if (cfg.transport == "gloo")
      return tutti::spawn(cfg.np, [&cfg] { return soak_process<tutti::gloo>(cfg); });
#endif
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tutti-soak: %s\n", e.what());
    return 1;
  }
  usage(("unknown transport " + cfg.transport).c_str());
}

// tutti-mismatch (issue 9, item 2): randomised mismatched calls. Every trial starts a fresh
// world (threads for inproc; forked processes meeting through a file:// store for shm and
// gloo), runs a few agreed calls checked exactly, then one call where one or more ranks deviate
// in one field: count, element type, reduction op, root, collective, or a missing call. Every
// rank that makes the mismatched call must raise tutti::error; a rank that returns normally is
// SILENT, a world still running at the hard deadline is a HANG. Control trials (no deviation)
// must complete with exact values, so the harness passes only when the library is right.
//
// A trial is derived from (seed, transport, trial index) alone: `--only K` reruns trial K.
//
// Missing-call variants (the deviating ranks never make the call):
//   exit   the deviants leave (the thread returns, the process closes its communicator);
//   stall  the deviants stay alive without calling until the others are done (a timeout case);
//   next   the deviants skip it and make the call after it (the first agreed follow-up) early.
// A rank whose mismatched call returns normally goes on with the agreed follow-up calls (four
// random ones, then a barrier) until one raises. Every value a rank gets back from a call that
// returned normally is checked exactly against what that call, as this rank made it, must produce.
// Outcomes:
//   raised  the rank raised in the mismatched call itself;
//   late    it returned from the mismatched call with right values and raised at a later call
//           (the communicator documents this for ranks the disagreement does not reach);
//   SILENT  a call returned a wrong value, or the rank got through every follow-up without
//           ever raising (with --strict, late counts as SILENT too).

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <new>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
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

using clock_type = std::chrono::steady_clock;

// ---- vocabulary --------------------------------------------------------------------------

enum class coll : int {
  all_reduce,
  reduce,
  broadcast,
  all_gather,
  gather,
  scatter,
  reduce_scatter,
  all_to_all,
  all_gatherv,
  all_to_allv,
  barrier
};
constexpr int n_colls = 11;
constexpr std::array<const char*, n_colls> coll_names{
    "all_reduce",     "reduce",     "broadcast",   "all_gather",  "gather", "scatter",
    "reduce_scatter", "all_to_all", "all_gatherv", "all_to_allv", "barrier"};

constexpr std::array<const char*, 5> type_names{"float", "double", "int32", "int64", "uint8"};
/// The types drawn under the sanitizers: float, int32 and uint8 (two of one size, so a type
/// that differs in kind alone is still drawn; and an odd size). Every type is instantiated
/// for each transport, policy and collective: the five cost minutes of compile there.
constexpr std::array<int, 3> drawn_few_types{0, 2, 4};
/// The element types, in type_names' order (drawn_few_types' under few_types).
using mismatch_types =
    std::conditional_t<tutti_harness::few_types, std::tuple<float, std::int32_t, std::uint8_t>,
                       std::tuple<float, double, std::int32_t, std::int64_t, std::uint8_t>>;
constexpr std::array<tutti::op_kind, 5> op_kinds{tutti::op_kind::sum, tutti::op_kind::prod,
                                                 tutti::op_kind::min, tutti::op_kind::max,
                                                 tutti::op_kind::avg};

enum class field : int { count, type, op, root, collective, missing, control };
constexpr int n_fields = 7;
constexpr std::array<const char*, n_fields> field_names{"count",      "type",    "op",     "root",
                                                        "collective", "missing", "control"};

enum class missing_kind : int { exit, stall, next };
constexpr std::array<const char*, 3> missing_names{"exit", "stall", "next"};

constexpr std::array<const char*, 3> transport_names{"inproc", "shm", "gloo"};
constexpr int n_policies = 8;
constexpr std::array<const char*, n_policies> policy_names{
    "automatic",          "ring",   "tree",  "recursive_halving",
    "recursive_doubling", "direct", "bruck", "native"};

[[nodiscard]] bool reducing(coll c) {
  return c == coll::all_reduce || c == coll::reduce || c == coll::reduce_scatter;
}
[[nodiscard]] bool rooted(coll c) {
  return c == coll::reduce || c == coll::broadcast || c == coll::gather || c == coll::scatter;
}

[[nodiscard]] std::uint64_t mix(std::uint64_t x) noexcept {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// Appends text and numbers to `s` (appends only: GCC 12's -Wrestrict misfires on
/// "literal" + std::string).
template <class... Part>
void append(std::string& s, const Part&... parts) {
  const auto one = [&s](const auto& x) {
    if constexpr (std::is_arithmetic_v<std::remove_cvref_t<decltype(x)>>)
      s += std::to_string(x);
    else
      s += std::string_view(x);
  };
  (one(parts), ...);
}
template <class... Part>
[[nodiscard]] std::string append_str(const Part&... parts) {
  std::string s;
  append(s, parts...);
  return s;
}

/// One call as one rank makes it.
struct call_desc {
  coll c = coll::barrier;
  int type = 0;
  tutti::op_kind op = tutti::op_kind::none;
  std::size_t n = 0;
  int root = 0;
  std::vector<std::size_t> counts;  // all_gatherv: p; all_to_allv: p x p, row = sender
  bool async = false;
  std::uint64_t salt = 0;  // inputs derive from it

  [[nodiscard]] std::string describe() const {
    std::string s;
    append(s, coll_names[static_cast<std::size_t>(c)], "(");
    if (c != coll::barrier) {
      append(s, type_names[static_cast<std::size_t>(type)]);
      if (c == coll::all_gatherv || c == coll::all_to_allv) {
        append(s, ", counts");
        for (std::size_t k : counts) append(s, " ", k);
      } else {
        append(s, ", n ", n);
      }
      if (reducing(c)) append(s, ", ", tutti::name(op));
      if (rooted(c)) append(s, ", root ", root);
    }
    append(s, async ? ", async)" : ")");
    return s;
  }
};

/// A whole trial: the same on every rank.
struct trial_desc {
  long index = 0;
  std::uint64_t seed = 0;
  int transport = 0;
  int p = 2;
  int policy = 0;
  field f = field::control;
  missing_kind missing = missing_kind::exit;
  unsigned deviants = 0;  // bit r: rank r deviates
  std::vector<call_desc> warm;
  call_desc base;                 // the call as the agreeing ranks make it
  call_desc deviant;              // as the deviants make it (unused for a missing call)
  std::vector<call_desc> follow;  // the agreed calls after it
  bool expect_raise = true;

  /// all_to_allv's fingerprint leaves the counts out (they differ per rank by design): a count
  /// deviation shows only as a size mismatch between one pair.
  [[nodiscard]] bool same_fingerprint() const noexcept {
    return f == field::count && base.c == coll::all_to_allv;
  }

  [[nodiscard]] bool deviates(int r) const noexcept { return ((deviants >> r) & 1U) != 0; }
  [[nodiscard]] std::string describe() const {
    std::string s;
    append(s, "trial ", index, " (seed ", seed,
           "): ", transport_names[static_cast<std::size_t>(transport)], " p=", p, " ",
           policy_names[static_cast<std::size_t>(policy)],
           " field=", field_names[static_cast<std::size_t>(f)]);
    if (f == field::missing) append(s, "/", missing_names[static_cast<std::size_t>(missing)]);
    append(s, "; warm-ups:");
    for (const auto& w : warm) append(s, " ", w.describe());
    append(s, "; call: ", base.describe());
    if (f != field::control) {
      append(s, "; ranks");
      for (int r = 0; r < p; ++r)
        if (deviates(r)) append(s, " ", r);
      if (f == field::missing)
        append(s, missing == missing_kind::next   ? " skip it and call the follow-up early"
                  : missing == missing_kind::exit ? " skip it and leave"
                                                  : " skip it and stay idle");
      else
        append(s, " call ", deviant.describe());
    }
    append(s, "; follow-ups:");
    for (const auto& w : follow) append(s, " ", w.describe());
    return s;
  }
};

// ---- what ranks report, in memory shared across fork ---------------------------------------

constexpr int max_ranks = 8;
constexpr int not_called = -1;
constexpr int other_exception = -2;

struct rank_report {
  std::atomic<int> stage{0};  // 0 started, 1 warm-ups done, 2 mismatched call done, 3 finished
  std::atomic<int> warm_failed{0};    // 1: an agreed warm-up raised or gave a wrong value
  std::atomic<int> warm_kind{0};      // the errc it raised, 0 for none (or not a tutti::error)
  std::atomic<int> kind{not_called};  // mismatched call: 0 returned, errc, or other_exception
  std::atomic<int> peer{-9};
  std::atomic<int> err_rank{-9};
  std::atomic<long long> err_seq{-9};
  std::atomic<int> wrong_name{0};  // the error named another collective than the one called
  std::atomic<long long> micros{0};
  std::atomic<int> wrong_value{0};           // a control call returned with a wrong value
  std::atomic<int> follow_kind{not_called};  // the follow-up that raised: its errc, or 0
  std::atomic<int> follow_at{0};             // which follow-up raised (1-based); 0: none did
  char what[240] = {};
};

struct world_report {
  rank_report r[max_ranks];
  char segment[64] = {};
};

void copy_text(char* dst, std::size_t cap, const char* src) {
  std::size_t n = std::strlen(src);
  n = std::min(n, cap - 1);
  std::memcpy(dst, src, n);
  dst[n] = '\0';
}

// ---- values --------------------------------------------------------------------------------

/// The integer rank `r` contributes at element `i` of call `d`: every reduction stays exact in
/// every type (sums <= 80 with 8 ranks, products <= 2, min/max within 0..100).
[[nodiscard]] std::int64_t value(const call_desc& d, int p, int r, std::size_t i) noexcept {
  if (d.op == tutti::op_kind::prod)
    return (static_cast<std::size_t>(r) + i) % static_cast<std::size_t>(p) == 0 ? 2 : 1;
  const std::uint64_t h = mix(mix(mix(d.salt) + static_cast<std::uint64_t>(r)) + i);
  const bool small = d.op == tutti::op_kind::sum || d.op == tutti::op_kind::avg;
  return static_cast<std::int64_t>(h % (small ? 11U : 101U));
}

template <class T>
[[nodiscard]] T input(const call_desc& d, int p, int r, std::size_t i) noexcept {
  return static_cast<T>(value(d, p, r, i));
}
template <class T>
[[nodiscard]] T poison(std::size_t i) noexcept {
  return static_cast<T>(std::size_t{200} + i % 37);
}

template <class T>
[[nodiscard]] T reduced(const call_desc& d, int p, std::size_t i) noexcept {
  const std::int64_t acc =
      tutti_harness::reduce_exact(d.op, p, [&](int r) { return value(d, p, r, i); });
  if (d.op != tutti::op_kind::avg) return static_cast<T>(acc);
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(acc / p);
  else
    return static_cast<T>(static_cast<T>(acc) / static_cast<T>(p));
}

/// The bits of a value, as an unsigned integer of its size.
template <class T>
auto bits_of(const T& v) noexcept {
  if constexpr (sizeof(T) == 1)
    return std::bit_cast<std::uint8_t>(v);
  else if constexpr (sizeof(T) == 4)
    return std::bit_cast<std::uint32_t>(v);
  else
    return std::bit_cast<std::uint64_t>(v);
}

/// True if got[i] equals want(i) bit for bit for every i.
template <class T>
[[nodiscard]] bool same(std::span<const T> got, auto&& want) {
  for (std::size_t i = 0; i < got.size(); ++i)
    if (bits_of(got[i]) != bits_of(static_cast<T>(want(i)))) return false;
  return true;
}

/// Which collectives policy A implements over transport X, as a bit mask over `coll`.
template <class A, class X>
constexpr unsigned capabilities() {
  return tutti_harness::capabilities<A, X, coll>();
}

// ---- running one call --------------------------------------------------------------------

/// One call `d` with element type T on `comm`: its buffers, and one member per collective that
/// makes the call (waiting for it when async, through `w`) and checks what it returned (only
/// when `check`). A failing call raises. The caller keeps `w` until it has read the error: the
/// progress thread may drop its reference to the exception last, and ThreadSanitizer cannot see
/// libstdc++'s (uninstrumented) exception reference count order that after this thread's read.
template <class T, class Comm>
class typed_call {
  using A = typename Comm::algorithm_type;
  using X = typename Comm::transport_type;

 public:
  typed_call(Comm& comm, const call_desc& d, bool check, tutti::work& w)
      : comm_(comm),
        d_(d),
        check_(check),
        w_(w),
        p_(comm.size()),
        rank_(comm.rank()),
        up_(static_cast<std::size_t>(p_)),
        me_(static_cast<std::size_t>(rank_)),
        n_(d.n) {}

  /// Makes the call; false if it returned with a wrong value. A collective the policy lacks is
  /// never drawn, nor instantiated (tutti_harness::call_drawn).
  bool run() { return tutti_harness::call_drawn<A, X>(d_.c, *this); }

 private:
  /// Sizes the input to `len` elements and fills it with this rank's inputs.
  void fill_in(std::size_t len) {
    in_.resize(len);
    for (std::size_t i = 0; i < len; ++i) in_[i] = input<T>(d_, p_, rank_, i);
  }
  /// Sizes the output to `len` elements and poisons it, so elements the call leaves show.
  void fill_out(std::size_t len) {
    out_.resize(len);
    for (std::size_t i = 0; i < len; ++i) out_[i] = poison<T>(i);
  }
  /// The buffers, as the calls take them.
  [[nodiscard]] std::span<const T> cin() const { return in_; }
  [[nodiscard]] std::span<T> sout() { return out_; }
  /// Waits for an async call.
  void finish() {
    if (d_.async) w_.wait();
  }

  /// True if output element i is the reduction of element `from + i` for every i.
  [[nodiscard]] bool out_reduced(std::size_t from) const {
    return same<T>(out_, [&](std::size_t i) { return reduced<T>(d_, p_, from + i); });
  }
  /// True if the output is still all poison (a non-root's).
  [[nodiscard]] bool out_untouched() const {
    return same<T>(out_, [](std::size_t i) { return poison<T>(i); });
  }
  /// True if the output is every rank's n inputs in rank order.
  [[nodiscard]] bool out_gathered() const {
    return same<T>(
        out_, [&](std::size_t i) { return input<T>(d_, p_, static_cast<int>(i / n_), i % n_); });
  }
  /// True if element k of output block r (the blocks start at `off`) is want(r, k) for all.
  [[nodiscard]] bool out_blocks(const std::vector<std::size_t>& off, auto&& want) const {
    std::size_t r = 0;
    return same<T>(out_, [&](std::size_t i) {
      while (i >= off[r + 1]) ++r;
      return want(r, i - off[r]);
    });
  }

 public:
  // The collectives, one member each: fill the buffers, make the call, check what it returned.
  bool all_reduce() {
    fill_in(n_);
    fill_out(n_);
    with_op(d_.op, [&](auto op) {
      d_.async ? void(w_ = comm_.all_reduce_async(cin(), sout(), op))
               : comm_.all_reduce(cin(), sout(), op);
    });
    finish();
    return !check_ || out_reduced(0);
  }
  bool reduce() {
    fill_in(n_);
    fill_out(n_);
    with_op(d_.op, [&](auto op) {
      d_.async ? void(w_ = comm_.reduce_async(cin(), sout(), op, d_.root))
               : comm_.reduce(cin(), sout(), op, d_.root);
    });
    finish();
    if (!check_) return true;
    return rank_ == d_.root ? out_reduced(0) : out_untouched();
  }
  bool broadcast() {
    fill_in(n_);
    if (rank_ != d_.root)
      for (std::size_t i = 0; i < n_; ++i) in_[i] = poison<T>(i);
    d_.async ? void(w_ = comm_.broadcast_async(std::span<T>(in_), d_.root))
             : comm_.broadcast(std::span<T>(in_), d_.root);
    finish();
    return !check_ || same<T>(cin(), [&](std::size_t i) { return input<T>(d_, p_, d_.root, i); });
  }
  bool all_gather() {
    fill_in(n_);
    fill_out(up_ * n_);
    d_.async ? void(w_ = comm_.all_gather_async(cin(), sout())) : comm_.all_gather(cin(), sout());
    finish();
    return !check_ || out_gathered();
  }
  bool gather() {
    fill_in(n_);
    fill_out(up_ * n_);
    d_.async ? void(w_ = comm_.gather_async(cin(), sout(), d_.root))
             : comm_.gather(cin(), sout(), d_.root);
    finish();
    if (!check_) return true;
    return rank_ == d_.root ? out_gathered() : out_untouched();
  }
  bool scatter() {
    fill_in(up_ * n_);
    fill_out(n_);
    d_.async ? void(w_ = comm_.scatter_async(cin(), sout(), d_.root))
             : comm_.scatter(cin(), sout(), d_.root);
    finish();
    return !check_ ||
           same<T>(out_, [&](std::size_t i) { return input<T>(d_, p_, d_.root, me_ * n_ + i); });
  }
  bool reduce_scatter() {
    fill_in(up_ * n_);
    fill_out(n_);
    with_op(d_.op, [&](auto op) {
      d_.async ? void(w_ = comm_.reduce_scatter_async(cin(), sout(), op))
               : comm_.reduce_scatter(cin(), sout(), op);
    });
    finish();
    return !check_ || out_reduced(me_ * n_);
  }
  bool all_to_all() {
    fill_in(up_ * n_);
    fill_out(up_ * n_);
    d_.async ? void(w_ = comm_.all_to_all_async(cin(), sout())) : comm_.all_to_all(cin(), sout());
    finish();
    return !check_ || same<T>(out_, [&](std::size_t i) {
      return input<T>(d_, p_, static_cast<int>(i / n_), me_ * n_ + i % n_);
    });
  }
  bool all_gatherv() {
    const auto off = prefix_offsets(d_.counts);
    fill_in(d_.counts[me_]);
    fill_out(off.back());
    comm_.all_gatherv(cin(), sout(), std::span<const std::size_t>(d_.counts));
    return !check_ || out_blocks(off, [&](std::size_t r, std::size_t k) {
      return input<T>(d_, p_, static_cast<int>(r), k);
    });
  }
  bool all_to_allv() {
    // Element k of the block rank s sends to rank t is input(s, t * stride + k).
    const std::size_t stride = 64;
    std::vector<std::size_t> sc(up_), rc(up_);
    for (std::size_t j = 0; j < up_; ++j) {
      sc[j] = d_.counts[me_ * up_ + j];
      rc[j] = d_.counts[j * up_ + me_];
    }
    const auto soff = prefix_offsets(sc), roff = prefix_offsets(rc);
    in_.resize(soff.back());
    for (std::size_t j = 0; j < up_; ++j)
      for (std::size_t k = 0; k < sc[j]; ++k)
        in_[soff[j] + k] = input<T>(d_, p_, rank_, j * stride + k);
    fill_out(roff.back());
    const std::span<const std::size_t> scs(sc), rcs(rc);
    d_.async ? void(w_ = comm_.all_to_allv_async(cin(), scs, sout(), rcs))
             : comm_.all_to_allv(cin(), scs, sout(), rcs);
    finish();
    return !check_ || out_blocks(roff, [&](std::size_t r, std::size_t k) {
      return input<T>(d_, p_, static_cast<int>(r), me_ * stride + k);
    });
  }
  bool barrier() {
    d_.async ? void(w_ = comm_.barrier_async()) : comm_.barrier();
    finish();
    return true;
  }

 private:
  // The call and where it runs; the world's size and this rank (also as sizes); the count.
  Comm& comm_;
  const call_desc& d_;
  bool check_;
  tutti::work& w_;
  int p_, rank_;
  std::size_t up_, me_, n_;
  std::vector<T> in_, out_;
};

/// Runs `d` on `comm` with the element type it names, as typed_call describes; false if the
/// call returned with a wrong value (checked only when `check`).
template <class Comm>
bool run_call(Comm& comm, const call_desc& d, bool check, tutti::work& w) {
  return tutti_harness::with_type<mismatch_types>(
      tutti_harness::type_slot(d.type, drawn_few_types),
      [&]<class T>() { return typed_call<T, Comm>(comm, d, check, w).run(); });
}

// ---- one rank's part of a trial ----------------------------------------------------------

struct settings {
  std::chrono::milliseconds timeout{1000};
  std::chrono::milliseconds hard{};  // the world's hard deadline
};

/// Waits until every rank not in `skip` has finished (stage 3), or until `limit`.
void await_others(const world_report& rep, const trial_desc& t, clock_type::time_point limit) {
  for (;;) {
    bool all = true;
    for (int q = 0; q < t.p; ++q)
      if (!t.deviates(q) && rep.r[q].stage.load() < 3) all = false;
    if (all || clock_type::now() >= limit) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

/// Runs the agreed warm-ups of trial `t`; false, with the failure recorded in `me`, where one
/// raised or returned a wrong value.
template <class Comm>
bool run_warm_ups(Comm& comm, const trial_desc& t, rank_report& me, tutti::work& held) {
  try {
    for (const auto& w : t.warm)
      if (!run_call(comm, w, true, held)) {
        me.warm_failed = 1;
        copy_text(me.what, sizeof me.what,
                  append_str("wrong value in warm-up ", w.describe()).c_str());
        return false;
      }
  } catch (const tutti::error& e) {
    me.warm_failed = 1;
    me.warm_kind = static_cast<int>(e.kind());
    copy_text(me.what, sizeof me.what, e.what());
    return false;
  } catch (const std::exception& e) {
    me.warm_failed = 1;
    copy_text(me.what, sizeof me.what, e.what());
    return false;
  }
  return true;
}

/// The microseconds since `t0`.
[[nodiscard]] long long micros_since(clock_type::time_point t0) {
  return std::chrono::duration_cast<std::chrono::microseconds>(clock_type::now() - t0).count();
}

/// Makes this rank's part of the mismatched call, `mine`, recording in `me` how it ended: kind
/// 0 where it returned (and whether a value was wrong), else what it raised.
template <class Comm>
void run_mismatched(Comm& comm, const call_desc& mine, rank_report& me, tutti::work& held) {
  const auto t0 = clock_type::now();
  try {
    const bool ok = run_call(comm, mine, true, held);
    me.micros = micros_since(t0);
    if (!ok) me.wrong_value = 1;
    me.kind = 0;
  } catch (const tutti::error& e) {
    me.micros = micros_since(t0);
    me.kind = static_cast<int>(e.kind());
    me.peer = e.peer();
    me.err_rank = e.rank();
    me.err_seq = static_cast<long long>(e.sequence());
    if (e.collective() != coll_names[static_cast<std::size_t>(mine.c)]) me.wrong_name = 1;
    copy_text(me.what, sizeof me.what, e.what());
  } catch (const std::exception& e) {
    me.kind = other_exception;
    copy_text(me.what, sizeof me.what, e.what());
  }
}

/// Makes trial `t`'s agreed follow-ups from index `first` on until one raises, recording in `me`
/// which one raised (1-based) and what; follow_at stays 0 where none did.
template <class Comm>
void run_follow_ups(Comm& comm, const trial_desc& t, std::size_t first, rank_report& me,
                    tutti::work& held) {
  for (std::size_t k = first; k < t.follow.size(); ++k) {
    try {
      if (!run_call(comm, t.follow[k], true, held)) me.wrong_value = 1;
      me.follow_kind = 0;
      continue;
    } catch (const tutti::error& e) {
      me.follow_kind = static_cast<int>(e.kind());
      copy_text(me.what, sizeof me.what, e.what());
    } catch (const std::exception& e) {
      me.follow_kind = other_exception;
      copy_text(me.what, sizeof me.what, e.what());
    }
    me.follow_at = static_cast<int>(k) + 1;
    break;
  }
}

/// Runs rank `comm.rank()`'s part of trial `t`, recording what happened in `rep`.
template <class Comm>
void rank_body(Comm& comm, const trial_desc& t, world_report& rep, const settings& s,
               clock_type::time_point start) {
  const int r = comm.rank();
  rank_report& me = rep.r[r];
  tutti::work held;  // the last async call's handle, kept while its error is read
  if (!run_warm_ups(comm, t, me, held)) {
    me.stage = 3;
    return;
  }
  me.stage = 1;

  const bool dev = t.deviates(r);
  if (dev && t.f == field::missing && t.missing != missing_kind::next) {
    if (t.missing == missing_kind::stall)
      await_others(rep, t, start + s.hard - std::chrono::milliseconds(500));
    me.stage = 3;
    return;  // exit: the caller closes the communicator / returns from the thread
  }
  const call_desc& mine = !dev ? t.base : (t.f == field::missing ? t.follow[0] : t.deviant);
  run_mismatched(comm, mine, me, held);
  me.stage = 2;
  // The agreed follow-ups, made by every rank whose call returned until one raises (a deviant
  // that skipped ahead made the first already).
  if (me.kind.load() == 0) run_follow_ups(comm, t, dev && t.f == field::missing ? 1 : 0, me, held);
  me.stage = 3;
}

// ---- worlds ------------------------------------------------------------------------------

template <class X, class A>
void process_rank(const trial_desc& t, world_report& rep, const settings& s, const std::string& url,
                  int r, clock_type::time_point start) {
  try {
    // The world forms with a generous deadline (8 processes on 2 cores); calls get the short one.
    tutti::options join_opts;
    join_opts.timeout = std::chrono::seconds(30);
    join_opts.algo = "";
    tutti::options call_opts;
    call_opts.timeout = s.timeout;
    call_opts.algo = "";
    tutti::communicator<X, A> comm(X::from_url(url, r, t.p, join_opts), call_opts);
    if constexpr (std::is_same_v<X, tutti::shm>)
      if (r == 0)
        copy_text(rep.segment, sizeof rep.segment, comm.transport().segment_name().c_str());
    rank_body(comm, t, rep, s, start);
  } catch (const std::exception& e) {
    rep.r[r].warm_failed = 1;
    copy_text(rep.r[r].what, sizeof rep.r[r].what, e.what());
    rep.r[r].stage = 3;
  }
}

template <class A>
void inproc_world(const trial_desc& t, world_report& rep, const settings& s,
                  clock_type::time_point start) {
  tutti::options call_opts;
  call_opts.timeout = s.timeout;
  call_opts.algo = "";
  try {
    tutti::inproc::run<A>(
        t.p, [&](auto& comm) { rank_body(comm, t, rep, s, start); }, call_opts);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tutti-mismatch: inproc::run raised: %s\n", e.what());
  }
}

/// Runs `fn<Policy>()` for the policy with index `i`.
template <class Fn>
void with_policy(int i, Fn&& fn) {
  switch (i) {
    case 0:
      return fn.template operator()<tutti::automatic>();
    case 1:
      return fn.template operator()<tutti::ring>();
    case 2:
      return fn.template operator()<tutti::tree>();
    case 3:
      return fn.template operator()<tutti::recursive_halving>();
    case 4:
      return fn.template operator()<tutti::recursive_doubling>();
    case 5:
      return fn.template operator()<tutti::direct>();
    case 6:
      return fn.template operator()<tutti::bruck>();
    default:
      return fn.template operator()<tutti::native>();
  }
}

template <class X>
unsigned caps_of(int policy) {
  unsigned m = 0;
  with_policy(policy, [&m]<class A>() { m = capabilities<A, X>(); });
  return m;
}

[[nodiscard]] unsigned caps(int transport, int policy) {
  switch (transport) {
    case 0:
      return caps_of<tutti::inproc>(policy);
    case 1:
      return caps_of<tutti::shm>(policy);
    default:
#ifdef TUTTI_HAVE_GLOO
      return caps_of<tutti::gloo>(policy);
#else
      return 0;
#endif
  }
}

/// What the parent saw of one world.
struct world_result {
  bool hang = false;
  bool crash = false;
  std::string crash_what;
};

/// A forked process's part of the world of trial `t`: every rank for inproc, rank `r`
/// otherwise. Exits the process when done.
[[noreturn]] void world_process(const trial_desc& t, world_report& rep, const settings& s,
                                const std::string& url, int r, clock_type::time_point start) {
  with_policy(t.policy, [&]<class A>() {
    if (t.transport == 0) {
      if constexpr (capabilities<A, tutti::inproc>() != 0) inproc_world<A>(t, rep, s, start);
    } else if (t.transport == 1) {
      if constexpr (capabilities<A, tutti::shm>() != 0)
        process_rank<tutti::shm, A>(t, rep, s, url, r, start);
    } else {
#ifdef TUTTI_HAVE_GLOO
      if constexpr (capabilities<A, tutti::gloo>() != 0)
        process_rank<tutti::gloo, A>(t, rep, s, url, r, start);
#endif
    }
  });
  std::fflush(nullptr);
  _exit(0);
}

/// Forks the processes of trial `t`'s world (one for inproc, one per rank otherwise) and
/// returns their ids. Where a fork fails, it kills and reaps those forked and exits with 2.
std::vector<pid_t> fork_world(const trial_desc& t, world_report& rep, const settings& s,
                              const std::string& url, clock_type::time_point start) {
  std::vector<pid_t> pids;
  const int procs = t.transport == 0 ? 1 : t.p;
  for (int r = 0; r < procs; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("tutti-mismatch: fork");
      for (pid_t q : pids) kill(q, SIGKILL);
      for (pid_t q : pids) waitpid(q, nullptr, 0);
      std::exit(2);
    }
    if (pid == 0) world_process(t, rep, s, url, r, start);
    pids.push_back(pid);
  }
  return pids;
}

/// Waits for every process in `pids` and returns their wait statuses (in `pids`' order); past
/// `deadline` it kills those still running and sets `res.hang`.
std::vector<int> reap_world(const std::vector<pid_t>& pids, clock_type::time_point deadline,
                            world_result& res) {
  std::vector<int> status(pids.size(), -1);
  std::size_t left = pids.size();
  while (left > 0) {
    for (std::size_t i = 0; i < pids.size(); ++i) {
      if (status[i] != -1) continue;
      int st = 0;
      if (waitpid(pids[i], &st, WNOHANG) == pids[i]) {
        status[i] = st;
        --left;
      }
    }
    if (left == 0) break;
    if (clock_type::now() > deadline && !res.hang) {
      res.hang = true;
      for (std::size_t i = 0; i < pids.size(); ++i)
        if (status[i] == -1) kill(pids[i], SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return status;
}

/// Records in `res` each process whose wait status is not a clean exit (none where it hung).
void note_crashes(const std::vector<int>& status, world_result& res) {
  for (std::size_t i = 0; i < status.size(); ++i) {
    const int st = status[i];
    if (!res.hang && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
      res.crash = true;
      append(res.crash_what, "process ", i,
             WIFSIGNALED(st) ? " killed by signal " : " exited with ",
             WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), "; ");
    }
  }
}

/// Forks the world of trial `t` (one process for inproc, one per rank otherwise), waits for it
/// until the hard deadline and kills whatever still runs then. Leaves nothing behind.
world_result run_world(const trial_desc& t, world_report& rep, const settings& s) {
  std::fflush(nullptr);
  const auto start = clock_type::now();
  tutti_harness::temp_dir dir("tutti-mismatch");
  const std::string url = dir.url();
  const std::vector<pid_t> pids = fork_world(t, rep, s, url, start);
  world_result res;
  const std::vector<int> status = reap_world(pids, start + s.hard, res);
  note_crashes(status, res);
  if (rep.segment[0] != '\0') ::shm_unlink(rep.segment);  // normally gone already
  return res;
}

// ---- drawing trials ----------------------------------------------------------------------

struct config {
  std::vector<int> transports;
  std::vector<int> nps{2, 3, 4, 5, 6, 7, 8};
  long trials = 100;
  std::uint64_t seed = 1;
  std::chrono::milliseconds timeout{1000};
  std::vector<int> fields{0, 1, 2, 3, 4, 5};
  std::vector<int> policies{0, 1, 2, 3, 4, 5, 6, 7};
  std::string json;
  long only = -1;
  bool expect_silent_control = false;
  bool strict = false;
  bool verbose = false;
};

class drawer {
 public:
  explicit drawer(std::uint64_t s) : rng_(s) {}
  std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(rng_() % n); }
  bool coin(unsigned in) { return below(in) == 0; }
  /// An element type's index into type_names (one of drawn_few_types under the sanitizers).
  int type() {
    if constexpr (tutti_harness::few_types) return drawn_few_types[below(drawn_few_types.size())];
    return static_cast<int>(below(type_names.size()));
  }
  template <class V>
  auto pick(const V& v) {
    return v[below(v.size())];
  }

 private:
  std::mt19937_64 rng_;
};

[[nodiscard]] std::vector<coll> supported(unsigned m) {
  std::vector<coll> v;
  for (int c = 0; c < n_colls; ++c)
    if (((m >> c) & 1U) != 0) v.push_back(static_cast<coll>(c));
  return v;
}

/// A well-formed call of collective `c` for `p` ranks.
call_desc draw_call(drawer& g, coll c, int p, std::uint64_t salt, bool async_ok) {
  call_desc d;
  d.c = c;
  d.salt = salt;
  d.type = g.type();
  d.op = reducing(c) ? g.pick(op_kinds) : tutti::op_kind::none;
  switch (g.below(3)) {
    case 0:
      d.n = g.below(3);  // 0, 1, 2
      break;
    case 1:
      d.n = 1 + g.below(2 * static_cast<std::size_t>(p));
      break;
    default:
      d.n = 1 + g.below(3000);  // past shm's line payload, into its slots
  }
  if (c == coll::barrier) d.n = 0;
  d.root = static_cast<int>(g.below(static_cast<std::size_t>(p)));
  const auto up = static_cast<std::size_t>(p);
  if (c == coll::all_gatherv) {
    d.counts.resize(up);
    for (auto& k : d.counts) k = g.coin(3) ? 0 : g.below(d.n + 2);
  } else if (c == coll::all_to_allv) {
    d.counts.resize(up * up);
    for (auto& k : d.counts) k = g.coin(3) ? 0 : g.below(std::min<std::size_t>(d.n, 60) + 2);
  }
  d.async = async_ok && c != coll::all_gatherv && g.coin(2);
  return d;
}

/// A value of `n` other than `old`.
std::size_t other_count(drawer& g, std::size_t old, int p) {
  std::size_t n = old;
  while (n == old) n = g.coin(3) ? g.below(3) : 1 + g.below(4 * static_cast<std::size_t>(p) + 40);
  return n;
}

/// Applies field `f`'s deviation to `base`; false if `f` does not apply to this call.
bool deviate(drawer& g, field f, const call_desc& base, call_desc& dev, int p, unsigned deviants,
             const std::vector<coll>& colls) {
  dev = base;
  const auto up = static_cast<std::size_t>(p);
  switch (f) {
    case field::count:
      if (base.c == coll::barrier) return false;
      if (base.c == coll::all_gatherv) {
        const std::size_t k = g.below(up);
        dev.counts[k] = other_count(g, base.counts[k], p);
      } else if (base.c == coll::all_to_allv) {
        // Entry (a, b) of the count matrix, where exactly one of sender a and receiver b
        // deviates: that pair disagrees on the size of one block.
        std::vector<int> in_set, out_set;
        for (int r = 0; r < p; ++r) (((deviants >> r) & 1U) != 0 ? in_set : out_set).push_back(r);
        int a = g.pick(in_set), b = g.pick(out_set);
        if (g.coin(2)) std::swap(a, b);
        const std::size_t k = static_cast<std::size_t>(a) * up + static_cast<std::size_t>(b);
        dev.counts[k] = other_count(g, base.counts[k], p);
      } else {
        dev.n = other_count(g, base.n, p);
      }
      return true;
    case field::type:
      if (base.c == coll::barrier) return false;
      while (dev.type == base.type) dev.type = g.type();
      return true;
    case field::op:
      if (!reducing(base.c)) return false;
      while (dev.op == base.op) dev.op = g.pick(op_kinds);
      return true;
    case field::root:
      if (!rooted(base.c) || p < 2) return false;
      while (dev.root == base.root) dev.root = static_cast<int>(g.below(up));
      return true;
    case field::collective: {
      std::vector<coll> others;
      for (coll c : colls)
        if (c != base.c) others.push_back(c);
      if (others.empty()) return false;
      const call_desc fresh = draw_call(g, g.pick(others), p, base.salt, true);
      dev.c = fresh.c;
      dev.counts = fresh.counts;
      if (dev.c == coll::barrier) dev.n = 0;
      if (dev.n == 0 && base.c == coll::barrier) dev.n = fresh.n;
      dev.op = reducing(dev.c) ? (reducing(base.c) ? base.op : fresh.op) : tutti::op_kind::none;
      dev.async = dev.async && dev.c != coll::all_gatherv;
      return true;
    }
    default:
      return true;
  }
}

/// Draws trial `index` for `transport`; the same on every run with the same arguments.
trial_desc draw_trial(const config& cfg, int transport, long index) {
  drawer g(mix(mix(cfg.seed) + static_cast<std::uint64_t>(transport) * 0x100000000ULL +
               static_cast<std::uint64_t>(index)));
  trial_desc t;
  t.index = index;
  t.seed = cfg.seed;
  t.transport = transport;
  t.p = g.pick(cfg.nps);
  // One control trial in eight: no deviation, exact values.
  t.f = g.coin(8) ? field::control : static_cast<field>(g.pick(cfg.fields));
  for (int attempt = 0;; ++attempt) {
    if (attempt == 100000) {
      std::fprintf(stderr, "tutti-mismatch: no %s trial fits --field and --policy\n",
                   transport_names[static_cast<std::size_t>(transport)]);
      std::exit(2);
    }
    t.policy = g.pick(cfg.policies);
    const unsigned m = caps(transport, t.policy);
    const auto colls = supported(m);
    if (colls.empty()) continue;
    const auto up = static_cast<std::size_t>(t.p);
    std::uint64_t salt = mix(cfg.seed ^ (static_cast<std::uint64_t>(index) << 20));
    t.warm.clear();
    for (std::size_t k = 1 + g.below(3); k > 0; --k)
      t.warm.push_back(draw_call(g, g.pick(colls), t.p, ++salt, true));
    t.base = draw_call(g, g.pick(colls), t.p, ++salt, true);
    // One or more deviants, never all of them.
    t.deviants = 0;
    const std::size_t nd = 1 + g.below(up - 1);
    while (static_cast<std::size_t>(__builtin_popcount(t.deviants)) < nd)
      t.deviants |= 1U << g.below(up);
    if (t.f == field::missing) t.missing = static_cast<missing_kind>(g.below(3));
    if (t.f == field::control) t.deviants = 0;
    if (!deviate(g, t.f, t.base, t.deviant, t.p, t.deviants, colls)) continue;
    // The follow-up must differ from the call it follows, so a deviant that skips ahead is
    // a mismatch and not a shifted copy.
    std::vector<coll> others;
    for (coll c : colls)
      if (c != t.base.c) others.push_back(c);
    if (others.empty()) continue;
    t.follow.clear();
    t.follow.push_back(draw_call(g, g.pick(others), t.p, ++salt, true));
    for (int k = 0; k < 3; ++k) t.follow.push_back(draw_call(g, g.pick(colls), t.p, ++salt, true));
    // Last a barrier, which every rank must reach: a rank whose calls since the mismatch were
    // all sends that fit in the transport's buffers (a scatter root, a gather leaf) can return
    // from each before any rank found the disagreement; it learns of it here at the latest.
    t.follow.push_back(call_desc{});
    t.expect_raise = t.f != field::control || cfg.expect_silent_control;
    return t;
  }
}

// ---- outcomes ----------------------------------------------------------------------------

struct tally {
  long trials = 0;
  long slow = 0;                  // an agreed warm-up timed out: the trial was not judged
  long raised_all = 0;            // every rank that made the mismatched call raised in it
  long early = 0;                 // a rank raised in the last agreed call, aborted by the mismatch
  std::array<long, 7> by_code{};  // ranks raising in the mismatched call, by errc (1..6)
  long other = 0;                 // errors of another kind than the four expected
  long late = 0;                  // a rank returned from the mismatched call, raised at a later one
  int max_late = 0;               // how many calls later, at most
  long silent = 0;                // a wrong value, or a rank that never raised
  long hang = 0;
  long bad_peer = 0;  // an error named this rank itself, or (mismatch) a rank that agrees with it
  long broken = 0;    // a warm-up failed, a process crashed, an odd error
  long long max_micros = 0;
};

struct verdict {
  bool silent = false, late = false, early = false, hang = false, broken = false, bad_peer = false,
       slow = false, raised_all = false;
  std::string why;
};

// Rank r's agreed warm-up failed. Another rank already in the mismatched call may abort the
// world while this one still finishes the last agreed call: a raise there (mismatch or aborted,
// never a lost peer: every rank made its part of the agreed calls) is early, not wrong. False
// where it is wrong.
bool judge_warm_failed(const trial_desc& t, const world_report& rep, int r, verdict& v) {
  const rank_report& m = rep.r[r];
  const auto wk = static_cast<tutti::errc>(m.warm_kind.load());
  bool others_in = false;
  for (int q = 0; q < t.p; ++q)
    others_in = others_in || (rep.r[q].warm_failed.load() == 0 && rep.r[q].stage.load() >= 1);
  if (t.expect_raise && t.f != field::control && others_in &&
      (wk == tutti::errc::mismatch || wk == tutti::errc::aborted)) {
    v.early = true;
    return true;
  }
  v.broken = true;
  append(v.why, append_str(" rank ", r, ": "), "agreed warm-up failed: ", m.what, ";");
  return false;
}

// Rank r returned normally from the call: right for a control call with right values and no
// raise after it; else silent, or late where it raised at a follow-up (silent too if `strict`).
void judge_returned(const trial_desc& t, const rank_report& m, int r, verdict& v, tally& ty,
                    bool strict) {
  const std::string who = append_str(" rank ", r, ": ");
  const int fk = m.follow_kind.load();
  const int at = m.follow_at.load();
  if (!t.expect_raise) {
    if (m.wrong_value.load() != 0 || at != 0) {
      v.broken = true;
      append(v.why, who, "control call ",
             m.wrong_value.load() != 0 ? "returned a wrong value" : "follow-up raised: ",
             m.wrong_value.load() != 0 ? "" : m.what, ";");
    }
    return;
  }
  if (m.wrong_value.load() != 0) {
    v.silent = true;
    append(v.why, who, "SILENT: a call returned normally with a wrong value;");
  } else if (at == 0) {
    v.silent = true;
    append(v.why, who, "SILENT: returned normally from the mismatched call and from all ",
           t.follow.size(), " follow-ups;");
  } else if (strict) {
    v.silent = true;
    append(v.why, who, "SILENT (strict): returned normally, raised at follow-up ", at, ";");
  } else {
    v.late = true;
    ty.max_late = std::max(ty.max_late, at);
    append(v.why, who, "returned normally with right values, raised at follow-up ", at, " (",
           fk > 0 ? tutti::make_error_code(static_cast<tutti::errc>(fk)).message()
                  : std::string("a non-tutti exception"),
           ");");
  }
}

// Rank r raised a tutti::error of kind k in the call: wrong in a control call; else what it
// says about itself is checked. False for a control call.
bool judge_raised(const trial_desc& t, const rank_report& m, int r, int k, verdict& v, tally& ty) {
  const std::string who = append_str(" rank ", r, ": ");
  const auto code = static_cast<tutti::errc>(k);
  const int peer = m.peer.load();
  const bool known = code == tutti::errc::mismatch || code == tutti::errc::timeout ||
                     code == tutti::errc::peer_lost || code == tutti::errc::aborted;
  const std::uint64_t seq = t.warm.size() + 1;
  if (!t.expect_raise) {
    v.broken = true;
    append(v.why, who, "control call raised: ", m.what, ";");
    return false;
  }
  if (k >= 1 && k < 7) ++ty.by_code[static_cast<std::size_t>(k)];
  ty.max_micros = std::max(ty.max_micros, m.micros.load());
  if (peer == r && code != tutti::errc::aborted) {
    // The error is about another rank (the other side of a mismatch, a lost peer): naming
    // this rank itself points the user at the wrong process.
    v.bad_peer = true;
    append(v.why, who, "names itself as the peer: ", m.what, ";");
  } else if (code == tutti::errc::mismatch && t.f != field::control && !t.same_fingerprint() &&
             (peer < 0 || peer >= t.p || t.deviates(peer) == t.deviates(r))) {
    // Every disagreement is between a deviating rank and an agreeing one (the deviants all
    // make the same call): a mismatch must name a rank whose call differs from this rank's.
    // (Where the calls' fingerprints agree, only the pair whose message sizes disagree can
    // know which ranks are party to it.)
    v.bad_peer = true;
    append(v.why, who, "names rank ", peer, ", whose call is the same as its own: ", m.what, ";");
  } else if (!known || m.err_rank.load() != r || peer < -1 || peer >= t.p ||
             m.err_seq.load() != static_cast<long long>(seq) || m.wrong_name.load() != 0) {
    if (!known) ++ty.other;
    v.broken = true;
    append(v.why, who, "odd error (kind ", k, ", rank ", m.err_rank.load(), ", peer ", peer,
           ", seq ", m.err_seq.load(), "): ", m.what, ";");
  }
  return true;
}

// Rank r's part of the trial; false where it did not raise in the mismatched call as it
// should (or broke), which rules out "every rank raised".
bool judge_rank(const trial_desc& t, const world_report& rep, const world_result& res, int r,
                verdict& v, tally& ty, bool strict) {
  const rank_report& m = rep.r[r];
  if (m.warm_failed.load() != 0) return judge_warm_failed(t, rep, r, v);
  const int k = m.kind.load();
  if (k == not_called) {
    // A deviating rank that skips the call (missing, not "next") never makes it: right.
    if (t.f == field::missing && t.deviates(r) && t.missing != missing_kind::next) return true;
    if (!res.hang) {
      v.broken = true;
      append(v.why, append_str(" rank ", r, ": "), "never finished the call;");
    }
    return false;
  }
  if (k == other_exception) {
    v.broken = true;
    append(v.why, append_str(" rank ", r, ": "), "raised a non-tutti exception: ", m.what, ";");
    return false;
  }
  if (k == 0) {
    judge_returned(t, m, r, v, ty, strict);
    return false;
  }
  return judge_raised(t, m, r, k, v, ty);
}

verdict judge(const trial_desc& t, const world_report& rep, const world_result& res, tally& ty,
              bool strict) {
  verdict v;
  ++ty.trials;
  if (res.hang) {
    v.hang = true;
    v.why = "HANG: still running at the hard deadline;";
  }
  if (res.crash) {
    v.broken = true;
    append(v.why, " CRASH: ", res.crash_what);
  }
  // An agreed warm-up that timed out means the machine was too slow for --timeout-ms (ranks
  // outnumber cores; sanitizers): the trial says nothing about mismatches. Counted apart; the
  // other ranks' warm-ups fail in its wake (lost peer, abort) and are not judged either.
  for (int r = 0; r < t.p && !res.hang && !res.crash; ++r)
    if (rep.r[r].warm_failed.load() != 0 &&
        rep.r[r].warm_kind.load() == static_cast<int>(tutti::errc::timeout)) {
      ++ty.slow;
      v.slow = true;
      v.why = append_str(" rank ", r, ": agreed warm-up timed out: ", rep.r[r].what);
      return v;
    }
  bool all = true;
  for (int r = 0; r < t.p; ++r) {
    const bool raised = judge_rank(t, rep, res, r, v, ty, strict);
    all = all && raised;
  }
  v.raised_all = all && t.expect_raise && !v.hang;
  if (v.raised_all) ++ty.raised_all;
  if (v.silent) ++ty.silent;
  if (v.late) ++ty.late;
  if (v.early) ++ty.early;
  if (v.bad_peer) ++ty.bad_peer;
  if (v.hang) ++ty.hang;
  if (v.broken) ++ty.broken;
  return v;
}

// ---- command line ------------------------------------------------------------------------

[[noreturn]] void usage(const char* why) {
  if (why != nullptr) std::fprintf(stderr, "tutti-mismatch: %s\n", why);
  std::fprintf(
      why != nullptr ? stderr : stdout,
      "usage: tutti-mismatch [--transport inproc|shm|gloo|all] [--np 2-8 | --np 2,4,7]\n"
      "                      [--trials N] [--seed S] [--timeout-ms T]\n"
      "                      [--field count|type|op|root|collective|missing|all] [--json FILE]\n"
      "                      [--policy automatic|ring|tree|recursive_halving|recursive_doubling|\n"
      "                                direct|bruck|native|all] [--only K] [--strict] [--verbose]\n"
      "Randomised mismatched collective calls: every rank must raise tutti::error.\n"
      "  --trials N     trials per transport (default 100); one in eight is a control\n"
      "  --timeout-ms   the communicators' timeout (default 1000); the hard deadline is\n"
      "                 4 x that + 10 s per world\n"
      "  --only K       run trial K alone (the index a failure report names)\n"
      "  --strict       a rank that returns from the mismatched call and raises only at the\n"
      "                 next call counts as SILENT, not late\n");
  std::exit(why != nullptr ? 2 : 0);
}

std::vector<int> parse_np(const std::string& v) {
  std::vector<int> out;
  const auto dash = v.find('-');
  if (dash != std::string::npos) {
    const int lo = std::atoi(v.substr(0, dash).c_str()), hi = std::atoi(v.substr(dash + 1).c_str());
    for (int n = lo; n <= hi; ++n) out.push_back(n);
  } else {
    std::size_t at = 0;
    while (at <= v.size()) {
      const auto comma = v.find(',', at);
      out.push_back(std::atoi(v.substr(at, comma - at).c_str()));
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
  }
  for (int n : out)
    if (n < 2 || n > max_ranks) usage("--np takes world sizes in 2..8");
  if (out.empty()) usage("--np is empty");
  return out;
}

/// Sets the flag option `a` in `cfg`; false if `a` is not a flag.
bool parse_flag(std::string_view a, config& cfg) {
  if (a == "--expect-silent-control") {  // self-test: controls must raise, so they fail
    cfg.expect_silent_control = true;
    return true;
  }
  if (a == "--strict") {
    cfg.strict = true;
    return true;
  }
  if (a == "--verbose") {
    cfg.verbose = true;
    return true;
  }
  return false;
}

/// The index among the first `n` of `names` of the one that is `v`, as a one-element list;
/// exits with "unknown <what> <v>" where none is.
template <std::size_t N>
std::vector<int> parse_name(const std::string& v, const std::array<const char*, N>& names, int n,
                            const char* what) {
  std::vector<int> out;
  for (int k = 0; k < n; ++k)
    if (v == names[static_cast<std::size_t>(k)]) out.push_back(k);
  if (out.empty()) usage(append_str("unknown ", what, " ", v).c_str());
  return out;
}

/// Sets the numeric option `a` to `x` in `cfg`; exits where `a` is no option.
void parse_number(std::string_view a, unsigned long long x, config& cfg) {
  if (a == "--trials") {
    cfg.trials = static_cast<long>(x);
  } else if (a == "--seed") {
    cfg.seed = x;
  } else if (a == "--timeout-ms") {
    if (x < 50 || x > 600000) usage("--timeout-ms must be 50..600000");
    cfg.timeout = std::chrono::milliseconds(static_cast<long long>(x));
  } else if (a == "--only") {
    cfg.only = static_cast<long>(x);
  } else {
    usage(append_str("unknown option ", a).c_str());
  }
}

/// Sets option `a` to value `v` in `cfg` (--transport's in `transport`, checked later); exits
/// where `a` is no option or `v` does not fit it. Any option not named here takes a number.
void parse_value(std::string_view a, const std::string& v, config& cfg, std::string& transport) {
  if (a == "--transport") {
    transport = v;
  } else if (a == "--np") {
    cfg.nps = parse_np(v);
  } else if (a == "--field") {
    if (v != "all") cfg.fields = parse_name(v, field_names, n_fields - 1, "field");
  } else if (a == "--policy") {
    if (v != "all") cfg.policies = parse_name(v, policy_names, n_policies, "policy");
  } else if (a == "--json") {
    cfg.json = v;
  } else {
    char* end = nullptr;
    const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
    if (end == v.c_str() || *end != '\0') usage(append_str("not a number: ", v).c_str());
    parse_number(a, x, cfg);
  }
}

/// The transports that --transport's value names ("all": every one built); exits where it
/// names none, or Gloo in a build without it.
std::vector<int> parse_transports(const std::string& transport) {
  std::vector<int> out;
  for (int k = 0; k < 3; ++k)
    if (transport == "all" || transport == transport_names[static_cast<std::size_t>(k)])
      out.push_back(k);
  if (out.empty()) usage(append_str("unknown transport ", transport).c_str());
#ifndef TUTTI_HAVE_GLOO
  if (transport == "gloo") usage("built without Gloo (configure with -DTUTTI_WITH_GLOO=ON)");
  std::erase(out, 2);
#endif
  return out;
}

config parse(int argc, char** argv) {
  config cfg;
  std::string transport = "all";
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--help" || a == "-h") usage(nullptr);
    if (parse_flag(a, cfg)) continue;
    if (i + 1 >= argc) usage(append_str("missing value after ", a).c_str());
    parse_value(a, argv[++i], cfg, transport);
  }
  cfg.transports = parse_transports(transport);
  return cfg;
}

std::string repro(const config& cfg, const trial_desc& t) {
  std::string np;
  for (int n : cfg.nps) append(np, np.empty() ? "" : ",", n);
  std::string_view fields =
      cfg.fields.size() == 1 ? field_names[static_cast<std::size_t>(cfg.fields[0])] : "all";
  std::string_view policies =
      cfg.policies.size() == 1 ? policy_names[static_cast<std::size_t>(cfg.policies[0])] : "all";
  std::string s;
  append(s, "tutti-mismatch --transport ", transport_names[static_cast<std::size_t>(t.transport)],
         " --np ", np, " --field ", fields, " --policy ", policies, " --seed ", cfg.seed,
         " --timeout-ms ", cfg.timeout.count(), " --only ", t.index,
         cfg.expect_silent_control ? " --expect-silent-control" : "");
  return s;
}

/// The tallies of every cell: tallies[transport][field].
using tally_table = std::array<std::array<tally, n_fields>, 3>;

/// Runs trial `i` for transport `x`, its ranks reporting in `mem` (mapped shared, so that the
/// forked world's reports reach this process); tallies and judges it, and prints it where it
/// failed (or, under --verbose, has a note). True if it failed.
bool run_trial(const config& cfg, const settings& s, int x, long i, void* mem,
               tally_table& tallies) {
  const trial_desc t = draw_trial(cfg, x, i);
  auto* rep = new (mem) world_report;
  if (cfg.verbose) std::printf("%s\n", t.describe().c_str());
  const world_result res = run_world(t, *rep, s);
  tally& ty = tallies[static_cast<std::size_t>(x)][static_cast<std::size_t>(t.f)];
  const verdict v = judge(t, *rep, res, ty, cfg.strict);
  const bool failed = v.silent || v.hang || v.broken || v.bad_peer;
  if (failed || (cfg.verbose && !v.why.empty())) {
    std::printf("%s %s\n  %s\n  reproduce: %s\n", failed ? "FAILED" : "note:", t.describe().c_str(),
                v.why.c_str(), repro(cfg, t).c_str());
    std::fflush(stdout);
  }
  rep->~world_report();
  return failed;
}

/// Runs the trials `cfg` asks for (all, or --only's) on each of its transports; the number of
/// trials that failed.
long run_trials(const config& cfg, const settings& s, void* mem, tally_table& tallies) {
  long failures = 0;
  for (int x : cfg.transports) {
    const long first = cfg.only >= 0 ? cfg.only : 0;
    const long last = cfg.only >= 0 ? cfg.only + 1 : cfg.trials;
    for (long i = first; i < last; ++i)
      if (run_trial(cfg, s, x, i, mem, tallies)) ++failures;
  }
  return failures;
}

/// How many ranks raised `e` in the mismatched call.
[[nodiscard]] long raised_with(const tally& ty, tutti::errc e) {
  return ty.by_code[static_cast<std::size_t>(e)];
}

/// The longest time from entering the mismatched call to raising, in milliseconds.
[[nodiscard]] double max_ms(const tally& ty) { return static_cast<double>(ty.max_micros) / 1000.0; }

/// Prints the table's row for transport `xn` and field `fn`.
void print_row(const char* xn, const char* fn, const tally& ty) {
  std::printf(
      "%-7s %-10s %6ld %4ld %6ld %5ld %8ld %7ld %9ld %7ld %5ld %6d %8.1f %6ld %4ld %7ld "
      "%6ld\n",
      xn, fn, ty.trials, ty.slow, ty.raised_all, ty.early, raised_with(ty, tutti::errc::mismatch),
      raised_with(ty, tutti::errc::timeout), raised_with(ty, tutti::errc::peer_lost),
      raised_with(ty, tutti::errc::aborted), ty.late, ty.max_late, max_ms(ty), ty.silent, ty.hang,
      ty.bad_peer, ty.broken);
}

/// Appends the JSON record of the row for transport `xn` and field `fn` to `json` (after a
/// comma unless it is the first).
void append_json_row(std::string& json, bool first, const char* xn, const char* fn,
                     const tally& ty) {
  append(json, first ? "" : ", ", "{\"transport\": \"", xn, "\", \"field\": \"", fn,
         "\", \"trials\": ", ty.trials, ", \"slow\": ", ty.slow,
         ", \"raised_everywhere\": ", ty.raised_all, ", \"early\": ", ty.early,
         ", \"mismatch\": ", raised_with(ty, tutti::errc::mismatch),
         ", \"timeout\": ", raised_with(ty, tutti::errc::timeout),
         ", \"peer_lost\": ", raised_with(ty, tutti::errc::peer_lost),
         ", \"aborted\": ", raised_with(ty, tutti::errc::aborted), ", \"late\": ", ty.late,
         ", \"late_calls_max\": ", ty.max_late, ", \"max_ms\": ", max_ms(ty),
         ", \"silent\": ", ty.silent, ", \"hang\": ", ty.hang, ", \"bad_peer\": ", ty.bad_peer,
         ", \"broken\": ", ty.broken, "}");
}

/// The failed trials of each kind, summed over the table's rows.
struct failed_counts {
  long silent = 0, hang = 0, broken = 0, bad_peer = 0;
};

/// Prints the table (a row per transport and field that ran trials) and writes the same rows
/// as JSON into `json`; returns the failed trials summed over the rows.
failed_counts print_table(const config& cfg, const tally_table& tallies, long failures,
                          std::string& json) {
  std::printf("\n%-7s %-10s %6s %4s %6s %5s %8s %7s %9s %7s %5s %6s %8s %6s %4s %7s %6s\n",
              "transp", "field", "trials", "slow", "raised", "early", "mismatch", "timeout",
              "peer_lost", "aborted", "late", "+calls", "max_ms", "SILENT", "HANG", "BADPEER",
              "BROKEN");
  failed_counts sum;
  append(json, "{\"seed\": ", cfg.seed, ", \"timeout_ms\": ", cfg.timeout.count(), ", \"rows\": [");
  bool first_row = true;
  for (int x : cfg.transports)
    for (int f = 0; f < n_fields; ++f) {
      const tally& ty = tallies[static_cast<std::size_t>(x)][static_cast<std::size_t>(f)];
      if (ty.trials == 0) continue;
      const char* xn = transport_names[static_cast<std::size_t>(x)];
      const char* fn = field_names[static_cast<std::size_t>(f)];
      print_row(xn, fn, ty);
      sum.silent += ty.silent;
      sum.hang += ty.hang;
      sum.broken += ty.broken;
      sum.bad_peer += ty.bad_peer;
      append_json_row(json, first_row, xn, fn, ty);
      first_row = false;
    }
  append(json, "], \"failures\": ", failures, "}\n");
  return sum;
}

/// Prints what the table's columns mean.
void print_legend() {
  std::printf(
      "raised: trials where every rank that made the mismatched call raised in it (or, early,\n"
      "in the last agreed call, aborted by a rank already in the mismatched one); late: trials\n"
      "where a rank returned from it with right values and raised only at a later call (+calls:\n"
      "how many later, at most); mismatch..aborted: ranks raising each code in the mismatched\n"
      "call; max_ms: the longest time from entering it to raising. Control rows: no deviation;\n"
      "a control that raises or returns a wrong value counts as BROKEN. BADPEER: an error\n"
      "named the raising rank itself as the peer, or a mismatch named a rank whose call\n"
      "is the same as the raising rank's.\n"
      "slow: trials not judged because an agreed warm-up timed out (raise --timeout-ms).\n");
}

}  // namespace

int main(int argc, char** argv) {
  const config cfg = parse(argc, argv);
  settings s;
  s.timeout = cfg.timeout;
  s.hard = 4 * cfg.timeout + std::chrono::seconds(10);

  void* mem = mmap(nullptr, sizeof(world_report), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    std::perror("tutti-mismatch: mmap");
    return 2;
  }
  tally_table tallies{};
  const auto t_start = clock_type::now();
  const long failures = run_trials(cfg, s, mem, tallies);
  munmap(mem, sizeof(world_report));
  const double secs = std::chrono::duration<double>(clock_type::now() - t_start).count();

  std::string json;
  const failed_counts sum = print_table(cfg, tallies, failures, json);
  if (!cfg.json.empty()) {
    std::ofstream out(cfg.json);
    out << json;
  }
  print_legend();
  std::printf("%.1f s\n", secs);
  if (failures == 0) {
    std::printf("tutti-mismatch: OK\n");
    return 0;
  }
  std::printf("tutti-mismatch: FAILED (%ld SILENT, %ld HANG, %ld BADPEER, %ld BROKEN trials)\n",
              sum.silent, sum.hang, sum.bad_peer, sum.broken);
  return 1;
}

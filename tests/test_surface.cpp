// One communicator surface for host and device memory: the forms the device overloads had and
// the host ones lacked, and those every collective now has in both spaces, run on host memory
// with exact expected values: the in-place forms' _async (reduce, all_gather, reduce_scatter,
// all_to_all), the v-variants' _async (all_gatherv, gatherv, scatterv, all_to_allv),
// barrier_async, and non-const inputs. Each world runs the calls blocking, then as one batch of
// async calls waited in reverse order (issue order must still hold), over inproc (threads) and
// shm (processes), world sizes 1-8, counts 0, 1, fewer than the world size and 37. The device
// forms are compiled by tests/nccl_surface.cpp.

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <doctest/doctest.h>

#include "suite.hpp"

namespace {

using host_comm = tutti::communicator<tutti::inproc>;
static_assert(std::is_same_v<host_comm::span_type<float>, std::span<float>>);
static_assert(std::is_same_v<host_comm::memory_space, tutti::host_memory>);
// A collective on host memory takes `{}` for its stream (what a generic caller passes); a CUDA
// stream there is a compile error (tests/compile_fail/stream_on_host.cpp).
template <class C>
concept collective_takes_default_stream =
    requires(C& c, std::span<float> s) { c.all_reduce(s, tutti::sum, {}); };
static_assert(collective_takes_default_stream<host_comm>);

/// Rank r's element i: small integers, so sums are exact in every type used here.
template <class T>
T v(int r, std::size_t i) {
  return static_cast<T>((static_cast<std::size_t>(r) * 31 + i * 7) % 101);
}
template <class T>
T sum_over_ranks(int p, std::size_t i) {
  T s = 0;
  for (int q = 0; q < p; ++q) s += v<T>(q, i);
  return s;
}

/// Calls issued either blocking (each returns when done) or async (all issued, then waited in
/// reverse order); the buffers live until every check ran.
template <class Comm>
struct batch {
  Comm& comm;
  bool async;
  suite::failures& f;
  std::vector<tutti::work> pending;
  std::vector<std::function<void()>> checks;
  std::vector<std::shared_ptr<void>> keep;

  template <class T>
  std::vector<T>& buf(std::size_t n, T fill) {
    auto b = std::make_shared<std::vector<T>>(n, fill);
    keep.push_back(b);
    return *b;
  }
  void add(tutti::work w) { pending.push_back(std::move(w)); }
  void fail(const std::string& what, std::size_t n, std::size_t i) {
    f.add(what + (async ? " (async)" : "") + " p=" + std::to_string(comm.size()) + " n=" +
          std::to_string(n) + " rank " + std::to_string(comm.rank()) + " i=" + std::to_string(i));
  }
  void finish() {
    for (auto w = pending.rbegin(); w != pending.rend(); ++w) w->wait();
    for (auto& c : checks) c();
  }
};

template <class T, class Comm>
void in_place_forms(batch<Comm>& b, std::size_t n) {
  Comm& comm = b.comm;
  const int p = comm.size(), r = comm.rank();
  const auto up = static_cast<std::size_t>(p), ur = static_cast<std::size_t>(r);

  // reduce, in place: root's buf gets the sum; the others' are unchanged.
  const int root = static_cast<int>(n % up);
  auto& red = b.template buf<T>(n, 0);
  for (std::size_t i = 0; i < n; ++i) red[i] = v<T>(r, i);
  if (b.async)
    b.add(comm.reduce_async(std::span<T>(red), tutti::sum, root));
  else
    comm.reduce(std::span<T>(red), tutti::sum, root);
  b.checks.push_back([&b, &red, n, p, r, root] {
    for (std::size_t i = 0; i < n; ++i)
      if (red[i] != (r == root ? sum_over_ranks<T>(p, i) : v<T>(r, i)))
        return b.fail("reduce in place", n, i);
  });

  // all_gather, in place: block q of buf becomes rank q's block.
  auto& ag = b.template buf<T>(n * up, T(-1));
  for (std::size_t i = 0; i < n; ++i) ag[ur * n + i] = v<T>(r, i);
  if (b.async)
    b.add(comm.all_gather_async(std::span<T>(ag)));
  else
    comm.all_gather(std::span<T>(ag));
  b.checks.push_back([&b, &ag, n, up] {
    for (std::size_t j = 0; j < n * up; ++j)
      if (ag[j] != v<T>(static_cast<int>(j / n), j % n)) return b.fail("all_gather in place", n, j);
  });

  // reduce_scatter, in place: block r of buf becomes the sum of every rank's block r.
  auto& rs = b.template buf<T>(n * up, 0);
  for (std::size_t j = 0; j < n * up; ++j) rs[j] = v<T>(r, j);
  if (b.async)
    b.add(comm.reduce_scatter_async(std::span<T>(rs), tutti::sum));
  else
    comm.reduce_scatter(std::span<T>(rs), tutti::sum);
  b.checks.push_back([&b, &rs, n, p, ur] {
    for (std::size_t i = 0; i < n; ++i)
      if (rs[ur * n + i] != sum_over_ranks<T>(p, ur * n + i))
        return b.fail("reduce_scatter in place", n, i);
  });

  // all_to_all, in place: block j (for rank j) is replaced by rank j's block for this rank.
  auto block = [](int from, int to, std::size_t i) {
    return static_cast<T>(from * 1000 + to * 10 + static_cast<int>(i % 10));
  };
  auto& aa = b.template buf<T>(n * up, 0);
  for (std::size_t j = 0; j < n * up; ++j) aa[j] = block(r, static_cast<int>(j / n), j % n);
  if (b.async)
    b.add(comm.all_to_all_async(std::span<T>(aa)));
  else
    comm.all_to_all(std::span<T>(aa));
  b.checks.push_back([&b, &aa, n, up, r, block] {
    for (std::size_t j = 0; j < n * up; ++j)
      if (aa[j] != block(static_cast<int>(j / n), r, j % n))
        return b.fail("all_to_all in place", n, j);
  });
}

/// The v-variants' per-rank counts, with zeros among them: counts[q] = (3q + n) % 5, and
/// at[q] where rank q's block starts (at[p] is the total); both live as long as the batch.
struct v_counts {
  std::vector<std::size_t>& counts;
  std::vector<std::size_t>& at;
};

template <class Comm>
v_counts make_v_counts(batch<Comm>& b, std::size_t n) {
  const auto up = static_cast<std::size_t>(b.comm.size());
  auto& counts = b.template buf<std::size_t>(up, 0);
  auto& at = b.template buf<std::size_t>(up + 1, 0);
  for (std::size_t q = 0; q < up; ++q) {
    counts[q] = (3 * q + n) % 5;
    at[q + 1] = at[q] + counts[q];
  }
  return {counts, at};
}

/// all_gatherv, with a non-const input span; returns this rank's block, which gatherv sends too.
template <class T, class Comm>
std::vector<T>& all_gatherv_form(batch<Comm>& b, std::size_t n, const v_counts& vc) {
  Comm& comm = b.comm;
  const int r = comm.rank();
  const auto up = static_cast<std::size_t>(comm.size()), ur = static_cast<std::size_t>(r);
  auto& at = vc.at;
  const std::span<const std::size_t> cs(vc.counts);
  auto& mine = b.template buf<T>(vc.counts[ur], 0);
  for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = v<T>(r, i);
  auto& all = b.template buf<T>(at[up], T(-1));
  if (b.async)
    b.add(comm.all_gatherv_async(std::span<T>(mine), std::span<T>(all), cs));
  else
    comm.all_gatherv(std::span<T>(mine), std::span<T>(all), cs);
  b.checks.push_back([&b, &all, &at, n, up] {
    for (std::size_t q = 0; q < up; ++q)
      for (std::size_t i = at[q]; i < at[q + 1]; ++i)
        if (all[i] != v<T>(static_cast<int>(q), i - at[q])) return b.fail("all_gatherv", n, i);
  });
  return mine;
}

/// gatherv of `mine` to `root`; off the root `out` is empty.
template <class T, class Comm>
void gatherv_form(batch<Comm>& b, std::size_t n, const v_counts& vc, std::vector<T>& mine,
                  int root) {
  Comm& comm = b.comm;
  const int r = comm.rank();
  const auto up = static_cast<std::size_t>(comm.size());
  auto& at = vc.at;
  const std::span<const std::size_t> cs(vc.counts);
  auto& g = b.template buf<T>(r == root ? at[up] : 0, T(-1));
  if (b.async)
    b.add(comm.gatherv_async(std::span<const T>(mine), std::span<T>(g), cs, root));
  else
    comm.gatherv(std::span<const T>(mine), std::span<T>(g), cs, root);
  b.checks.push_back([&b, &g, &at, n, up] {
    for (std::size_t q = 0; q < up && !g.empty(); ++q)
      for (std::size_t i = at[q]; i < at[q + 1]; ++i)
        if (g[i] != v<T>(static_cast<int>(q), i - at[q])) return b.fail("gatherv", n, i);
  });
}

/// scatterv from `root`: rank q receives block q of root's input, v(q + 50, .).
template <class T, class Comm>
void scatterv_form(batch<Comm>& b, std::size_t n, const v_counts& vc, int root) {
  Comm& comm = b.comm;
  const int r = comm.rank();
  const auto up = static_cast<std::size_t>(comm.size()), ur = static_cast<std::size_t>(r);
  auto& at = vc.at;
  const std::span<const std::size_t> cs(vc.counts);
  auto& src = b.template buf<T>(r == root ? at[up] : 0, 0);
  for (std::size_t q = 0; q < up && r == root; ++q)
    for (std::size_t i = at[q]; i < at[q + 1]; ++i)
      src[i] = v<T>(static_cast<int>(q) + 50, i - at[q]);
  auto& piece = b.template buf<T>(vc.counts[ur], T(-1));
  if (b.async)
    b.add(comm.scatterv_async(std::span<const T>(src), std::span<T>(piece), cs, root));
  else
    comm.scatterv(std::span<const T>(src), std::span<T>(piece), cs, root);
  b.checks.push_back([&b, &piece, n, r] {
    for (std::size_t i = 0; i < piece.size(); ++i)
      if (piece[i] != v<T>(r + 50, i)) return b.fail("scatterv", n, i);
  });
}

/// all_to_allv: rank i sends (i + 2j + n) % 4 elements to rank j, valued 100 i + j.
template <class T, class Comm>
void all_to_allv_form(batch<Comm>& b, std::size_t n) {
  Comm& comm = b.comm;
  const auto up = static_cast<std::size_t>(comm.size()), ur = static_cast<std::size_t>(comm.rank());
  auto pair = [n](std::size_t from, std::size_t to) { return (from + 2 * to + n) % 4; };
  auto& sc = b.template buf<std::size_t>(up, 0);
  auto& rc = b.template buf<std::size_t>(up, 0);
  std::size_t st = 0, rt = 0;
  for (std::size_t q = 0; q < up; ++q) {
    st += sc[q] = pair(ur, q);
    rt += rc[q] = pair(q, ur);
  }
  auto& out = b.template buf<T>(rt, T(-1));
  auto& in = b.template buf<T>(st, 0);
  for (std::size_t q = 0, k = 0; q < up; ++q)
    for (std::size_t i = 0; i < sc[q]; ++i) in[k++] = static_cast<T>(100 * ur + q);
  if (b.async)
    b.add(comm.all_to_allv_async(std::span<const T>(in), std::span<const std::size_t>(sc),
                                 std::span<T>(out), std::span<const std::size_t>(rc)));
  else
    comm.all_to_allv(std::span<const T>(in), std::span<const std::size_t>(sc), std::span<T>(out),
                     std::span<const std::size_t>(rc));
  b.checks.push_back([&b, &out, &rc, n, up, ur] {
    for (std::size_t q = 0, k = 0; q < up; ++q)
      for (std::size_t i = 0; i < rc[q]; ++i, ++k)
        if (out[k] != static_cast<T>(100 * q + ur)) return b.fail("all_to_allv", n, k);
  });
}

/// The v-variants, in this order on every rank: all_gatherv, gatherv and scatterv to and from
/// a root that moves with n, all_to_allv.
template <class T, class Comm>
void vector_forms(batch<Comm>& b, std::size_t n) {
  const v_counts vc = make_v_counts(b, n);
  auto& mine = all_gatherv_form<T>(b, n, vc);
  const int root = static_cast<int>((n + 1) % static_cast<std::size_t>(b.comm.size()));
  gatherv_form<T>(b, n, vc, mine, root);
  scatterv_form<T>(b, n, vc, root);
  all_to_allv_form<T>(b, n);
}

/// Every form above for int32 and double at counts 0, 1, p - 1 and 37, blocking then async,
/// each batch ended by a barrier of the same kind.
template <class Comm>
void surface(Comm& comm, suite::failures& f) {
  for (bool async : {false, true}) {
    batch<Comm> b{comm, async, f, {}, {}, {}};
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, static_cast<std::size_t>(comm.size() - 1),
                          std::size_t{37}}) {
      in_place_forms<std::int32_t>(b, n);
      in_place_forms<double>(b, n);
      vector_forms<std::int32_t>(b, n);
      vector_forms<double>(b, n);
    }
    if (async)
      b.add(comm.barrier_async());
    else
      comm.barrier();
    b.finish();
  }
}

/// The argument checks of the new forms raise at the call, before anything is queued, and
/// leave the communicator usable.
template <class Comm>
void argument_checks(Comm& comm, suite::failures& f) {
  const int p = comm.size();
  if (p == 1) return;
  std::vector<std::int32_t> odd(static_cast<std::size_t>(p) + 1, 1);
  auto raises = [&](const char* what, auto&& call) {
    try {
      call();
      f.add(std::string(what) + ": no error p=" + std::to_string(p));
    } catch (const tutti::error& e) {
      if (e.kind() != tutti::errc::invalid_argument) f.add(std::string(what) + ": " + e.what());
    }
  };
  raises("reduce_scatter_async in place",
         [&] { (void)comm.reduce_scatter_async(std::span<std::int32_t>(odd), tutti::sum); });
  raises("all_to_all_async in place",
         [&] { (void)comm.all_to_all_async(std::span<std::int32_t>(odd)); });
  const std::vector<std::size_t> short_counts(static_cast<std::size_t>(p) - 1, 1);
  raises("all_gatherv_async counts", [&] {
    (void)comm.all_gatherv_async(std::span<const std::int32_t>(odd).first(1),
                                 std::span<std::int32_t>(odd), short_counts);
  });
  std::vector<std::int32_t> one{comm.rank()}, all(static_cast<std::size_t>(p), -1);
  comm.all_gather_async(std::span<const std::int32_t>(one), std::span<std::int32_t>(all)).wait();
  for (int q = 0; q < p; ++q)
    if (all[static_cast<std::size_t>(q)] != q) f.add("all_gather after argument errors");
}

}  // namespace

TEST_CASE("surface: in-place and v-variant forms, blocking and async, on inproc") {
  suite::failures f;
  for (int p = 1; p <= 8; ++p)
    tutti::inproc::run(p, [&](auto& comm) {
      surface(comm, f);
      argument_checks(comm, f);
    });
  CHECK_MESSAGE(f.count.load() == 0, f.text());
}

TEST_CASE("surface: the same forms over direct's shared-segment schedules on inproc") {
  suite::failures f;
  for (int p : {1, 3, 4, 7})
    tutti::inproc::run<tutti::direct>(p, [&](auto& comm) { surface(comm, f); });
  CHECK_MESSAGE(f.count.load() == 0, f.text());
}

TEST_CASE("surface: in-place and v-variant forms, blocking and async, on shm processes") {
  for (int p = 1; p <= 8; ++p) {
    CAPTURE(p);
    const int rc = tutti::spawn(p, [] {
      auto comm = tutti::communicator<tutti::shm>::from_env();
      suite::failures f;
      surface(comm, f);
      argument_checks(comm, f);
      if (f.count.load() == 0) return 0;
      std::fprintf(stderr, "rank %d: %ld failures\n%s", comm.rank(), f.count.load(),
                   f.text().c_str());
      return 1;
    });
    CHECK_MESSAGE(rc == 0, "shm at " << p << " ranks failed (see stderr)");
  }
}

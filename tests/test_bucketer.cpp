// tutti::bucketer: bucket layouts computed by hand (DDP's first-bucket rule, one type per
// bucket, reverse registration order, rebuild), reduction results for every type at 1-4 ranks,
// out-of-order mark_ready, unused gradients, no_sync accumulation, hooks and compression, and
// errors — over tutti::inproc (the bucketer is generic over the communicator).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <tutti/adapters/bucketer.hpp>
#include <tutti/tutti.hpp>

namespace {

using groups = std::vector<std::vector<std::size_t>>;

template <class Comm>
groups grads_of(tutti::bucketer<Comm>& b) {
  groups g;
  for (const auto& info : b.layout()) g.push_back(info.gradients);
  return g;
}

// The layouts below are a single rank's; a world of 1 is enough.
template <class Fn>
void solo(Fn&& fn) {
  tutti::inproc::run(1, [&](auto& comm) { fn(comm); });
}

}  // namespace

TEST_CASE("bucketer: DDP's default capacities, reverse registration order") {
  solo([](auto& comm) {
    tutti::bucketer b(comm);
    // Forward order; bytes 400 K, 600 K, 300 K, 2 M, 100 K, 30 M, 5 M (floats).
    for (std::size_t bytes :
         {400'000U, 600'000U, 300'000U, 2'000'000U, 100'000U, 30'000'000U, 5'000'000U})
      b.template add<float>(bytes / 4);
    // Reverse: 6 (5 MB >= 1 MiB closes the first bucket), 5 (30 MB >= 25 MiB closes the
    // second), then 4 3 2 1 0 (3.4 MB) flushed at the end.
    CHECK(grads_of(b) == groups{{6}, {5}, {4, 3, 2, 1, 0}});
    const auto l = b.layout();
    CHECK(l[0].bytes == 5'000'000);
    CHECK(l[1].count == 7'500'000);
    CHECK(l[2].bytes == 3'400'000);
    CHECK(l[2].type == tutti::dtype::float32);
  });
}

TEST_CASE("bucketer: the first bucket of each type is the small one; types never mix") {
  solo([](auto& comm) {
    tutti::bucketer b(comm, {.first_bucket_bytes = 16, .bucket_bytes = 32});
    for (std::size_t n : {1U, 2U, 3U, 4U, 5U, 6U}) b.template add<float>(n);  // 4..24 bytes
    // Reverse: 5 (24 >= 16: closes), 4 + 3 (36 >= 32: closes), 2 + 1 + 0 flushed.
    CHECK(grads_of(b) == groups{{5}, {4, 3}, {2, 1, 0}});
  });
  solo([](auto& comm) {
    tutti::bucketer b(comm, {.first_bucket_bytes = 16, .bucket_bytes = 32});
    b.template add<float>(4);        // 0: 16 B
    b.template add<tutti::half>(4);  // 1: 8 B
    b.template add<float>(2);        // 2: 8 B
    b.template add<tutti::half>(8);  // 3: 16 B
    b.template add<float>(6);        // 4: 24 B
    b.template add<tutti::half>(4);  // 5: 8 B
    // Reverse: 5 opens half; 4 (float 24 >= 16) closes {4}; 3 (half 24 >= 16) closes {5,3};
    // 2 float, 1 half, 0 float (24 < 32). Flushed in order of first appearance: {1}, {2,0}.
    // Sorted by the position of the first gradient: {5,3} {4} {2,0} {1}.
    CHECK(grads_of(b) == groups{{5, 3}, {4}, {2, 0}, {1}});
    const auto l = b.layout();
    CHECK(l[0].type == tutti::dtype::float16);
    CHECK(l[1].type == tutti::dtype::float32);
    CHECK(l[2].type == tutti::dtype::float32);
    CHECK(l[3].type == tutti::dtype::float16);
    CHECK(l[2].bytes == 24);
    CHECK(l[3].count == 4);
  });
  // A gradient larger than any capacity is never split; zero-sized ones are legal.
  solo([](auto& comm) {
    tutti::bucketer b(comm, {.first_bucket_bytes = 8, .bucket_bytes = 8});
    b.template add<double>(100);
    b.template add<double>(0);
    b.template add<double>(1);
    CHECK(grads_of(b) == groups{{2}, {1, 0}});
    CHECK(b.layout()[1].count == 100);
  });
}

TEST_CASE("bucketer: assign_buckets keeps closing order when not sorting (rebuild)") {
  const std::vector<tutti::dtype> t{tutti::dtype::float32, tutti::dtype::float64,
                                    tutti::dtype::float32, tutti::dtype::float64};
  const std::vector<std::size_t> bytes{8, 8, 8, 24};
  const std::vector<std::size_t> order{0, 1, 2, 3};
  const std::size_t limits[] = {16, 32};
  // float: 0 + 2 (16 >= 16) closes at 2; double: 1 + 3 (32 >= 16) closes at 3.
  CHECK(tutti::detail::assign_buckets(order, t, bytes, limits, false) == groups{{0, 2}, {1, 3}});
  const std::vector<std::size_t> order2{3, 0, 1, 2};
  // double: 3 (24 >= 16) closes first; float 0 + 2 closes; double 1 flushed.
  CHECK(tutti::detail::assign_buckets(order2, t, bytes, limits, false) == groups{{3}, {0, 2}, {1}});
  CHECK(tutti::detail::assign_buckets(order2, t, bytes, limits, true) == groups{{3}, {0, 2}, {1}});
}

namespace {

// Rank r's value of element j of gradient g: a multiple of p, so that dividing by p first is
// exact in every type and the average is an exact small integer.
template <class T>
T value(int p, int r, std::size_t g, std::size_t j) {
  const int v = p * static_cast<int>((static_cast<std::size_t>(r) + g + j) % 5 + 1);
  if constexpr (tutti::detail::is_float16<T>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}
template <class T>
double average(int p, std::size_t g, std::size_t j) {
  double s = 0;
  for (int r = 0; r < p; ++r) s += static_cast<double>(value<T>(p, r, g, j));
  return s / p;
}

template <class T>
void check_type_at(int p) {
  tutti::inproc::run(p, [p](auto& comm) {
    const int r = comm.rank();
    // Two buckets' worth at small capacities, external and owned gradients mixed, marked in a
    // rank-dependent order.
    tutti::bucketer b(comm, {.first_bucket_bytes = 3 * sizeof(T), .bucket_bytes = 7 * sizeof(T)});
    const std::vector<std::size_t> counts{3, 1, 5, 0, 4, 2};
    std::vector<std::vector<T>> mine(counts.size());
    for (std::size_t g = 0; g < counts.size(); ++g) {
      if (g % 2 == 0) {
        mine[g].resize(counts[g]);
        b.add(std::span<T>(mine[g]));
      } else {
        b.template add<T>(counts[g]);
      }
    }
    std::vector<std::size_t> order{0, 1, 2, 3, 4, 5};
    std::rotate(order.begin(), order.begin() + r % 6, order.end());
    for (const std::size_t g : order) {
      auto grad = b.template gradient<T>(g);
      for (std::size_t j = 0; j < grad.size(); ++j) grad[j] = value<T>(p, r, g, j);
      b.mark_ready(g);
    }
    b.finish();
    for (std::size_t g = 0; g < counts.size(); ++g) {
      auto grad = b.template gradient<T>(g);
      REQUIRE(grad.size() == counts[g]);
      for (std::size_t j = 0; j < grad.size(); ++j)
        CHECK(static_cast<double>(grad[j]) == average<T>(p, g, j));
      CHECK(b.used(g));
    }
  });
}

template <class... T>
void check_types(int p) {
  (check_type_at<T>(p), ...);
}

}  // namespace

TEST_CASE("bucketer: every type averages exactly at 1-4 ranks") {
  for (int p = 1; p <= 4; ++p) {
    CAPTURE(p);
    check_types<std::int8_t, std::uint8_t, std::int16_t, std::uint16_t, std::int32_t, std::uint32_t,
                std::int64_t, std::uint64_t, tutti::half, tutti::bfloat16, float, double,
                long double>(p);
  }
}

TEST_CASE("bucketer: sum instead of average; integer average truncates like tutti::avg") {
  tutti::inproc::run(3, [](auto& comm) {
    std::vector<int> g(2, comm.rank() + 1);  // 1 2 3: sum 6
    std::vector<int> h(2, comm.rank());      // 0 1 2: sum 3, avg 1
    {
      tutti::bucketer b(comm, {.average = false});
      b.add(std::span<int>(g));
      b.mark_ready(0);
      b.finish();
      CHECK(g == std::vector<int>{6, 6});
    }
    std::vector<int> k(1, comm.rank() == 0 ? 2 : 0);  // sum 2, avg 0
    tutti::bucketer b(comm);
    b.add(std::span<int>(h));
    b.add(std::span<int>(k));
    b.mark_ready(1);
    b.mark_ready(0);
    b.finish();
    CHECK(h == std::vector<int>{1, 1});
    CHECK(k == std::vector<int>{0});
  });
}

TEST_CASE("bucketer: buckets start in order, each as soon as it and the earlier ones are ready") {
  tutti::inproc::run(2, [](auto& comm) {
    std::vector<std::size_t> launched;  // bucket index
    std::vector<std::size_t> at_mark;   // marks made when it started
    std::size_t marks = 0;
    tutti::bucketer b(comm, {.first_bucket_bytes = 4,
                             .bucket_bytes = 4,
                             .before_all_reduce = [&](const tutti::bucket_view& v) {
                               launched.push_back(v.index);
                               at_mark.push_back(marks);
                               CHECK(v.bucket_count == 4);
                               CHECK(v.is_last() == (v.index == 3));
                             }});
    std::vector<std::vector<float>> g(4, std::vector<float>(1, 1.0f));
    for (auto& x : g) b.add(std::span<float>(x));
    // Buckets: {3} {2} {1} {0}. Mark 0, 1, 3, 2: nothing starts until 3 is ready, then
    // buckets 0 (grad 3) ... after 2, the rest in order.
    REQUIRE(grads_of(b) == groups{{3}, {2}, {1}, {0}});
    for (std::size_t i : {0U, 1U, 3U, 2U}) {
      ++marks;
      b.mark_ready(i);
    }
    b.finish();
    CHECK(launched == std::vector<std::size_t>{0, 1, 2, 3});
    CHECK(at_mark == std::vector<std::size_t>{3, 4, 4, 4});
  });
}

TEST_CASE("bucketer: unmarked gradients contribute zeros; unused ones stay untouched") {
  tutti::inproc::run(3, [](auto& comm) {
    const int r = comm.rank();
    tutti::bucketer b(comm, {.first_bucket_bytes = 8, .bucket_bytes = 8});
    std::vector<double> a(2, 3.0 * (r + 1));  // marked everywhere: (3 + 6 + 9) / 3 = 6
    std::vector<double> c(2, 9.0);            // rank 1 never marks it: (9 + 0 + 9) / 3 = 6
    std::vector<double> d(2, -5.0);           // no rank marks it: untouched
    b.add(std::span<double>(a));
    b.add(std::span<double>(c));
    b.add(std::span<double>(d));
    b.template add<double>(3);  // owned, no rank marks it: reads 0
    {
      auto o = b.template gradient<double>(3);
      std::fill(o.begin(), o.end(), 4.0);
    }
    b.mark_ready(0);
    if (r != 1) b.mark_ready(1);
    b.finish();
    CHECK(a == std::vector<double>{6.0, 6.0});
    CHECK(c == std::vector<double>{6.0, 6.0});
    CHECK(d == std::vector<double>{-5.0, -5.0});
    for (double x : b.template gradient<double>(3)) CHECK(x == 0.0);
    CHECK(b.used(0));
    CHECK(b.used(1));
    CHECK_FALSE(b.used(2));
    CHECK_FALSE(b.used(3));
    // The next iteration starts clean: marking again is fine, and 2 now counts.
    d.assign(2, 3.0);
    b.mark_ready(2);
    b.finish();
    CHECK(d == std::vector<double>{3.0, 3.0});
    CHECK(b.used(2));
    CHECK_FALSE(b.used(0));
  });
}

TEST_CASE("bucketer: no_sync accumulates; the used set is OR-ed over the window") {
  tutti::inproc::run(2, [](auto& comm) {
    const int r = comm.rank();
    tutti::bucketer b(comm);
    std::vector<float> w(3, 0.0f);  // used in every micro-step
    std::vector<float> u(2, 0.0f);  // used only in the first micro-step, under no_sync
    b.add(std::span<float>(w));
    b.add(std::span<float>(u));
    b.template add<float>(1);  // owned, accumulated in place
    auto o = b.template gradient<float>(2);
    for (int step = 0; step < 3; ++step) {
      const float x = static_cast<float>(r + 1) * static_cast<float>(step + 1);
      if (step < 2) {
        auto guard = b.no_sync();
        for (float& v : w) v += x;
        o[0] += x;
        b.mark_ready(0);
        b.mark_ready(0);  // no iteration bookkeeping under no_sync
        b.mark_ready(2);
        if (step == 0) {
          for (float& v : u) v += 10.0f * static_cast<float>(r + 1);
          b.mark_ready(1);
        }
        b.finish();  // a no-op here
      } else {
        for (float& v : w) v += x;
        o[0] += x;
        b.mark_ready(2);
        b.mark_ready(0);
        b.finish();
      }
    }
    // Rank r accumulated (r + 1)(1 + 2 + 3) = 6 (r + 1): average (6 + 12) / 2 = 9.
    CHECK(w == std::vector<float>{9.0f, 9.0f, 9.0f});
    CHECK(o[0] == 9.0f);
    // u: 10 and 20, averaged 15, though nobody marked it in the synchronised step.
    CHECK(u == std::vector<float>{15.0f, 15.0f});
    CHECK(b.used(1));
  });
}

TEST_CASE("bucketer: hooks see the local bucket before and the average after") {
  tutti::inproc::run(2, [](auto& comm) {
    const int r = comm.rank();
    std::vector<float> before, after;
    tutti::bucketer b(comm, {.before_all_reduce =
                                 [&](const tutti::bucket_view& v) {
                                   auto s = v.template as<float>();
                                   before.assign(s.begin(), s.end());
                                   for (float& x : s) x *= 2.0f;  // e.g. a loss scale
                                   CHECK_THROWS_AS((void)v.template as<double>(), tutti::error);
                                 },
                             .after_all_reduce =
                                 [&](const tutti::bucket_view& v) {
                                   auto s = v.template as<float>();
                                   after.assign(s.begin(), s.end());
                                   for (float& x : s) x += 1.0f;
                                 }});
    std::vector<float> g{static_cast<float>(r + 1), 10.0f};
    b.add(std::span<float>(g));
    b.mark_ready(0);
    b.finish();
    CHECK(before == std::vector<float>{static_cast<float>(r + 1), 10.0f});
    CHECK(after == std::vector<float>{3.0f, 20.0f});  // (2 + 4) / 2, (20 + 20) / 2
    CHECK(g == std::vector<float>{4.0f, 21.0f});
  });
}

TEST_CASE("bucketer: fp16 and bf16 compression move 16-bit values") {
  for (const auto mode : {tutti::compression::fp16, tutti::compression::bf16}) {
    tutti::inproc::run(2, [mode](auto& comm) {
      tutti::bucketer b(comm, {.compress = mode});
      // 1 + 2^-12 is a float, not a half (10 mantissa bits) nor a bfloat16 (7): compression
      // rounds it to 1. 6 and 2 survive exactly; so does their average.
      std::vector<float> f{1.0f + 0x1p-12f, comm.rank() == 0 ? 6.0f : 2.0f};
      std::vector<double> d{1.0 + 0x1p-12, 3.0};
      std::vector<tutti::half> h{tutti::half(1.5f)};  // 16-bit already: not converted
      std::vector<std::int32_t> i{comm.rank() + 7};   // integers: never compressed
      b.add(std::span<float>(f));
      b.add(std::span<double>(d));
      b.add(std::span<tutti::half>(h));
      b.add(std::span<std::int32_t>(i));
      for (std::size_t k = 0; k < 4; ++k) b.mark_ready(k);
      b.finish();
      CHECK(f == std::vector<float>{1.0f, 4.0f});
      CHECK(d == std::vector<double>{1.0, 3.0});
      CHECK(static_cast<float>(h[0]) == 1.5f);
      CHECK(i == std::vector<std::int32_t>{7});  // (7 + 8) / 2
    });
  }
  // Without compression the float keeps its low bit.
  tutti::inproc::run(2, [](auto& comm) {
    tutti::bucketer b(comm);
    std::vector<float> f{1.0f + 0x1p-12f};
    b.add(std::span<float>(f));
    b.mark_ready(0);
    b.finish();
    CHECK(f[0] == 1.0f + 0x1p-12f);
  });
}

TEST_CASE("bucketer: one rebuild from rank 0's ready order") {
  tutti::inproc::run(2, [](auto& comm) {
    const int r = comm.rank();
    tutti::bucketer b(
        comm, {.first_bucket_bytes = 8, .bucket_bytes = 16, .rebuild_from_ready_order = true});
    for (int k = 0; k < 4; ++k) b.template add<float>(2);  // 8 bytes each
    REQUIRE(grads_of(b) == groups{{3}, {2, 1}, {0}});
    for (std::size_t k = 0; k < 4; ++k) {
      auto g = b.template gradient<float>(k);
      std::fill(g.begin(), g.end(), static_cast<float>(k + 1));
    }
    // Rank 0 marks 1, 0, 3 and never 2; rank 1 another order. The agreed order is rank 0's,
    // then the unmarked ones in reverse registration order: 1 0 3 2.
    const std::vector<std::size_t> mine =
        r == 0 ? std::vector<std::size_t>{1, 0, 3} : std::vector<std::size_t>{3, 2, 1, 0};
    for (std::size_t k : mine) b.mark_ready(k);
    b.finish();
    CHECK(b.rebuilt());
    // 1 (8 >= 8) closes; 0 + 3 (16) closes; 2 flushed.
    CHECK(grads_of(b) == groups{{1}, {0, 3}, {2}});
    // The owned values moved with their gradients: the averages of the first iteration.
    CHECK(b.template gradient<float>(0)[1] == 1.0f);
    CHECK(b.template gradient<float>(1)[0] == 2.0f);
    CHECK(b.template gradient<float>(2)[0] == 1.5f);  // (0 + 3) / 2: only rank 1 marked it
    CHECK(b.template gradient<float>(3)[1] == 4.0f);
    // Later iterations keep that layout.
    for (std::size_t k = 0; k < 4; ++k) b.mark_ready(3 - k);
    b.finish();
    CHECK(grads_of(b) == groups{{1}, {0, 3}, {2}});
  });
}

TEST_CASE("bucketer: misuse raises invalid_argument with a reason") {
  solo([](auto& comm) {
    tutti::bucketer b(comm);
    std::vector<float> g(4);
    b.add(std::span<float>(g));
    b.template add<double>(2);
    CHECK_THROWS_WITH_AS(b.mark_ready(2), doctest::Contains("only 2 gradients"), tutti::error);
    CHECK_THROWS_WITH_AS((void)b.template gradient<int>(1), doctest::Contains("holds double"),
                         tutti::error);
    b.mark_ready(0);
    CHECK_THROWS_WITH_AS(b.mark_ready(0), doctest::Contains("marked ready twice"), tutti::error);
    CHECK_THROWS_WITH_AS((void)b.no_sync(), doctest::Contains("middle of a synchronised"),
                         tutti::error);
    CHECK_THROWS_WITH_AS(b.template add<float>(1), doctest::Contains("after the bucket layout"),
                         tutti::error);
    b.finish();
    CHECK_THROWS_AS(tutti::bucketer(comm, {.bucket_bytes = 0}), tutti::error);
  });
}

TEST_CASE("bucketer: an error in a bucket surfaces from finish() on every rank") {
  std::vector<std::string> seen(2);
  CHECK_THROWS_AS(tutti::inproc::run(2,
                                     [&](auto& comm) {
                                       const int r = comm.rank();
                                       tutti::bucketer b(comm);
                                       // Rank 1 registers a longer gradient.
                                       std::vector<float> g(r == 0 ? 4 : 5, 1.0f);
                                       b.add(std::span<float>(g));
                                       b.mark_ready(0);
                                       try {
                                         b.finish();
                                       } catch (const tutti::error& e) {
                                         seen[static_cast<std::size_t>(r)] = e.what();
                                         throw;
                                       }
                                     }),
                  tutti::error);
  for (const auto& s : seen) CHECK(s.find("all_reduce") != std::string::npos);
}

TEST_CASE("bucketer: an empty bucketer and zero-sized gradients") {
  tutti::inproc::run(2, [](auto& comm) {
    tutti::bucketer b(comm);
    b.finish();  // nothing registered: no collective
    tutti::bucketer z(comm);
    std::vector<float> none;
    std::vector<float> one(1, static_cast<float>(comm.rank()));
    z.add(std::span<float>(none));
    z.add(std::span<float>(one));
    z.mark_ready(0);
    z.mark_ready(1);
    z.finish();
    CHECK(one[0] == 0.5f);
  });
}

TEST_CASE("broadcast_parameters: root's values everywhere, in several broadcasts, any policy") {
  auto check = [](auto& comm) {
    const int r = comm.rank();
    std::vector<float> w(37, static_cast<float>(r) + 0.5F);
    std::vector<std::int64_t> steps(1, std::int64_t{r} * 1000);
    std::vector<double> none;
    std::vector<std::uint8_t> mask(5, static_cast<std::uint8_t>(r));
    const std::size_t small = 40;  // bytes per broadcast: w alone is 148, the rest share one
    tutti::broadcast_parameters(
        comm,
        {tutti::param(std::span<float>(w)), tutti::param(std::span<std::int64_t>(steps)),
         tutti::param(std::span<double>(none)), tutti::param(std::span<std::uint8_t>(mask))},
        1, small);
    CHECK(w == std::vector<float>(37, 1.5F));
    CHECK(steps == std::vector<std::int64_t>{1000});
    CHECK(mask == std::vector<std::uint8_t>(5, 1));
    CHECK_THROWS_AS(tutti::broadcast_parameters(comm, {tutti::param(std::span<float>(w))}, 3),
                    tutti::error);
  };
  tutti::inproc::run(3, check);
  // recursive_halving has no broadcast: the same through all_reduce.
  tutti::inproc::run<tutti::recursive_halving>(3, check);
}

namespace {

// Uneven inputs: rank r has batches[r] batches. In iteration k the ranks with more than k
// batches train; rank r's gradient element i is n_k * (r + 1) * (k + 1) + i * n_k, with n_k the
// number of ranks training, so the average over the trainers is an exact
// sum_r (r + 1) * (k + 1) + i * ... computed below without dividing.
struct uneven_case {
  std::vector<int> batches;
  bool rebuild = false;
  tutti::compression compress = tutti::compression::none;
};

int trainers(const std::vector<int>& batches, int k) {
  return static_cast<int>(
      std::count_if(batches.begin(), batches.end(), [&](int b) { return b > k; }));
}

void run_uneven(const uneven_case& u) {
  const int p = static_cast<int>(u.batches.size());
  const int most = *std::max_element(u.batches.begin(), u.batches.end());
  int last = -1;
  for (int q = 0; q < p; ++q)
    if (u.batches[static_cast<std::size_t>(q)] == most && most > 0) last = q;
  tutti::inproc::run(p, [&](auto& comm) {
    const int r = comm.rank();
    const int mine = u.batches[static_cast<std::size_t>(r)];
    tutti::bucketer b(comm, {.first_bucket_bytes = 16,
                             .bucket_bytes = 24,
                             .rebuild_from_ready_order = u.rebuild,
                             .compress = u.compress,
                             .uneven_inputs = true});
    std::vector<float> f(6);
    std::vector<std::int32_t> x(3);
    b.add(std::span<float>(f));
    b.add(std::span<std::int32_t>(x));
    b.template add<double>(4);
    for (int k = 0; k < mine; ++k) {
      const int n = trainers(u.batches, k);
      for (std::size_t i = 0; i < f.size(); ++i)
        f[i] = static_cast<float>(n * (r + 1) * (k + 1) + static_cast<int>(i) * n);
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = n * (r + 1) + static_cast<int>(i);
      auto d = b.template gradient<double>(2);
      for (std::size_t i = 0; i < d.size(); ++i) d[i] = n * (k + 1.0) * (r + 1);
      b.mark_ready(2);
      b.mark_ready(0);
      b.mark_ready(1);
      b.finish();
      CHECK(b.active_ranks() == n);
      int sum_r1 = 0;  // sum of (q + 1) over the trainers
      for (int q = 0; q < p; ++q)
        if (u.batches[static_cast<std::size_t>(q)] > k) sum_r1 += q + 1;
      for (std::size_t i = 0; i < f.size(); ++i)
        CHECK(f[i] == static_cast<float>(sum_r1 * (k + 1) + static_cast<int>(i) * n));
      for (std::size_t i = 0; i < x.size(); ++i)  // integer average: the sum, divided, truncated
        CHECK(x[i] == (n * sum_r1 + static_cast<int>(i) * n) / n);
      for (double v : b.template gradient<double>(2)) CHECK(v == (k + 1.0) * sum_r1);
    }
    const std::vector<float> before = f;
    const auto j = b.join();
    CHECK(j.shadowed == static_cast<std::size_t>(most - mine));
    CHECK(j.last_joiner == last);
    CHECK(f == before);  // a joined rank's gradients are not written
    CHECK(b.rebuilt() == (u.rebuild && most > 0));
  });
}

}  // namespace

TEST_CASE("bucketer join: uneven inputs average over the ranks that trained, and end cleanly") {
  run_uneven({{3, 5, 2, 5}});
  run_uneven({{1, 1}});
  run_uneven({{0, 2, 1}, true});  // a rank with no data at all, and the one-time rebuild
  run_uneven({{0, 0, 0}});
  run_uneven({{4, 1, 2}, false, tutti::compression::fp16});
}

TEST_CASE("bucketer join: misuse raises invalid_argument") {
  tutti::inproc::run(2, [](auto& comm) {
    std::vector<float> g(4);
    tutti::bucketer plain(comm);
    plain.add(std::span<float>(g));
    CHECK_THROWS_AS((void)plain.join(), tutti::error);
    tutti::bucketer b(comm, {.uneven_inputs = true});
    b.add(std::span<float>(g));
    b.mark_ready(0);
    CHECK_THROWS_AS((void)b.join(), tutti::error);  // inside an iteration
    b.finish();
    (void)b.join();
  });
}

TEST_CASE("bucketer all_reduce_hook: replaces the all-reduce; no division, no compression") {
  tutti::inproc::run(3, [](auto& comm) {
    const int r = comm.rank();
    std::size_t calls = 0;
    tutti::bucketer b(comm, {.first_bucket_bytes = 8,
                             .bucket_bytes = 8,
                             .compress = tutti::compression::bf16,
                             .all_reduce_hook = [&](const tutti::bucket_view& v) {
                               ++calls;
                               // A hook of its own: add one, then a plain sum.
                               auto data = v.as<double>();
                               for (double& d : data) d += 1.0;
                               return comm.all_reduce_async(data, tutti::sum);
                             }});
    std::vector<double> a(2, 1.0 / 3.0 + r), c(1, 1e10 + r);  // bf16 would round both
    b.add(std::span<double>(a));
    b.add(std::span<double>(c));
    b.mark_ready(0);
    b.mark_ready(1);
    b.finish();
    CHECK(calls == 2);
    CHECK(a == std::vector<double>(2, (1.0 / 3.0 + 1.0) + (1.0 / 3.0 + 2.0) + (1.0 / 3.0 + 3.0)));
    CHECK(c[0] == (1e10 + 1.0) + (1e10 + 2.0) + (1e10 + 3.0));
  });
}

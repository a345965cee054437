// docs/extending.md's code, as a user would run it (tests/docs/CMakeLists.txt extracts the
// blocks into extending_snippets.hpp): the mailbox transport carries every point-to-point
// policy's collectives and the user's send/recv at world sizes 1-8; the linear policy is exact
// over inproc and the mailbox, in place and out of place; my_automatic runs linear exactly
// where TUTTI_ALGO says so; the mailbox's failures raise tutti::error naming the peer.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "extending_snippets.hpp"

namespace {

constexpr std::size_t counts[] = {0, 1, 3, 1000};

/// Rank r's element i: exact in int64 for every op the checks use.
std::int64_t input(int rank, std::size_t i) {
  return std::int64_t{rank} * 1000 + static_cast<std::int64_t>(i);
}

/// Sum over ranks 0..p-1 of input(rank, i).
std::int64_t sum_of_inputs(int p, std::size_t i) {
  return std::int64_t{p} * (p - 1) / 2 * 1000 + std::int64_t{p} * static_cast<std::int64_t>(i);
}

/// all_reduce (sum in place, max out of place, avg in place) of every count on `comm`;
/// returns the number of wrong elements.
template <class Comm>
int check_all_reduce(Comm& comm) {
  const int p = comm.size(), r = comm.rank();
  int wrong = 0;
  for (std::size_t n : counts) {
    std::vector<std::int64_t> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = input(r, i);
    comm.all_reduce(std::span<std::int64_t>(v), tutti::sum);
    for (std::size_t i = 0; i < n; ++i) wrong += v[i] != sum_of_inputs(p, i);

    std::vector<std::int64_t> in(n), out(n, -1);
    for (std::size_t i = 0; i < n; ++i) in[i] = input(r, i);
    comm.all_reduce(std::span<const std::int64_t>(in), std::span<std::int64_t>(out), tutti::max);
    for (std::size_t i = 0; i < n; ++i) wrong += out[i] != input(p - 1, i);

    // avg of ints: integer division of the sum, which is p * (500 * (p - 1) + i).
    for (std::size_t i = 0; i < n; ++i) v[i] = input(r, i);
    comm.all_reduce(std::span<std::int64_t>(v), tutti::avg);
    for (std::size_t i = 0; i < n; ++i) wrong += v[i] != sum_of_inputs(p, i) / p;
  }
  return wrong;
}

template <class Policy>
void all_reduce_on_mailbox() {
  for (int p = 1; p <= 8; ++p) {
    std::atomic<int> wrong{0};
    my::run_on_mailbox<Policy>(std::make_shared<my::mailbox_world>(p),
                               [&](auto& comm) { wrong += check_all_reduce(comm); });
    INFO(Policy::name, " over the mailbox, p=", p);
    CHECK(wrong.load() == 0);
  }
}

/// Every channel a policy's messages used, from the world's counters.
std::vector<std::pair<int, int>> channels_used(const my::mailbox_world& w) {
  std::vector<std::pair<int, int>> used;
  for (const auto& [ch, n] : w.sent)
    if (n > 0 && std::get<2>(ch) == tutti::detail::space::collective)
      used.emplace_back(std::get<0>(ch), std::get<1>(ch));
  return used;
}

}  // namespace

TEST_CASE("the page's own examples return true") {
  CHECK(my::mailbox_example());
  CHECK(my::linear_example());
  CHECK(my::my_automatic_example());
}

TEST_CASE("the mailbox transport carries every point-to-point policy at 1-8 ranks") {
  all_reduce_on_mailbox<tutti::ring>();
  all_reduce_on_mailbox<tutti::tree>();
  all_reduce_on_mailbox<tutti::recursive_halving>();
  all_reduce_on_mailbox<tutti::recursive_doubling>();
  all_reduce_on_mailbox<tutti::automatic>();

  // Collectives other than all_reduce, and async calls, through automatic.
  for (int p = 1; p <= 8; ++p) {
    std::atomic<int> wrong{0};
    my::run_on_mailbox<tutti::automatic>(std::make_shared<my::mailbox_world>(p), [&](auto& comm) {
      const auto up = static_cast<std::size_t>(p);
      std::vector<std::int32_t> b(37, comm.rank() == p - 1 ? 7 : 0);
      comm.broadcast(std::span<std::int32_t>(b), p - 1);
      for (auto x : b) wrong += x != 7;

      std::vector<std::int32_t> mine(5, comm.rank()), all(5 * up, -1);
      auto w =
          comm.all_gather_async(std::span<const std::int32_t>(mine), std::span<std::int32_t>(all));
      w.wait();
      for (std::size_t i = 0; i < all.size(); ++i)
        wrong += all[i] != static_cast<std::int32_t>(i / 5);

      std::vector<std::int32_t> blocks(3 * up), got(3);
      for (std::size_t i = 0; i < blocks.size(); ++i)
        blocks[i] = static_cast<std::int32_t>(i) + comm.rank();
      comm.reduce_scatter(std::span<const std::int32_t>(blocks), std::span<std::int32_t>(got),
                          tutti::sum);
      const auto base = static_cast<std::int32_t>(3 * static_cast<std::size_t>(comm.rank()));
      for (std::int32_t k = 0; k < 3; ++k)
        wrong += got[static_cast<std::size_t>(k)] != p * (base + k) + p * (p - 1) / 2;
      comm.barrier();
    });
    INFO("p=", p);
    CHECK(wrong.load() == 0);
  }
}

TEST_CASE("send/recv over the mailbox match by tag, in posting order per tag") {
  std::atomic<int> wrong{0};
  my::run_on_mailbox<tutti::ring>(std::make_shared<my::mailbox_world>(2), [&](auto& comm) {
    std::vector<int> a{1, 2, 3}, b{4, 5}, c{6, 7, 8, 9};
    if (comm.rank() == 0) {
      comm.send(std::span<const int>(a), 1, 7);
      comm.send(std::span<const int>(b), 1, 3);
      comm.send(std::span<const int>(c), 1, 7);
    } else {
      std::vector<int> x(2), y(3), z(4);
      comm.recv(std::span<int>(x), 0, 3);  // tag 3 first, although sent second
      comm.recv(std::span<int>(y), 0, 7);
      comm.recv(std::span<int>(z), 0, 7);
      wrong += x != b;
      wrong += y != a;
      wrong += z != c;
    }
  });
  CHECK(wrong.load() == 0);
}

TEST_CASE("linear: exact over inproc at 1-8 ranks, 2(p - 1) messages of the vector") {
  for (int p = 1; p <= 8; ++p) {
    std::atomic<int> wrong{0};
    tutti::inproc::run<my::linear>(p, [&](auto& comm) { wrong += check_all_reduce(comm); });
    INFO("inproc, p=", p);
    CHECK(wrong.load() == 0);
  }
  all_reduce_on_mailbox<my::linear>();

  for (int p = 1; p <= 8; ++p) {
    auto world = std::make_shared<my::mailbox_world>(p);
    my::run_on_mailbox<my::linear>(world, [](auto& comm) {
      std::vector<double> v(100, 1.5);
      comm.all_reduce(std::span<double>(v), tutti::sum);
    });
    INFO("p=", p);
    CHECK(world->messages == 2 * static_cast<std::uint64_t>(p - 1));
    CHECK(world->bytes == 2 * static_cast<std::uint64_t>(p - 1) * 100 * sizeof(double));
    for (const auto& [from, to] : channels_used(*world)) CHECK((from == 0 || to == 0));
  }
}

TEST_CASE("my_automatic runs linear where TUTTI_ALGO names it, tree or ring otherwise") {
  constexpr int p = 4;
  auto run = [&](const tutti::options& opts) {
    auto world = std::make_shared<my::mailbox_world>(p);
    std::atomic<int> wrong{0};
    my::run_on_mailbox<my::my_automatic>(
        world,
        [&](auto& comm) {
          std::vector<std::int64_t> v(64, comm.rank() + 1);
          comm.all_reduce(std::span<std::int64_t>(v), tutti::sum);
          for (auto x : v) wrong += x != 10;
        },
        opts);
    CHECK(wrong.load() == 0);
    return channels_used(*world);
  };
  auto through_rank_0 = [](const std::vector<std::pair<int, int>>& used) {
    for (const auto& [from, to] : used)
      if (from != 0 && to != 0) return false;
    return true;
  };
  // linear: every message to or from rank 0. tree and ring also send 3 -> 2.
  CHECK(through_rank_0(run(tutti::options{.algo = "all_reduce:linear"})));
  CHECK(through_rank_0(run(tutti::options{.algo = "linear"})));
  CHECK_FALSE(through_rank_0(run(tutti::options{.algo = ""})));
  CHECK_FALSE(through_rank_0(run(tutti::options{.algo = "all_reduce:linear@1M-"})));

  // The names are my_automatic's own: tutti::automatic does not know linear.
  CHECK(tutti::detail::policy_list<tutti::ring, tutti::tree, my::linear>::names[2] == "linear");
  CHECK_THROWS_AS(tutti::inproc::run<tutti::automatic>(
                      1, [](auto&) {}, tutti::options{.algo = "linear"}),
                  tutti::error);
}

TEST_CASE("the mailbox's failures: a missing call times out, a mismatched one names the sender") {
  using namespace std::chrono_literals;
  try {
    // Two ranks, so that only rank 0 waits: with more, a rank waiting for rank 0 under the
    // same deadline may time out first, naming rank 0 (the mailbox does not tell stalled
    // ranks from waiting ones; tutti's shm and gloo do).
    my::run_on_mailbox<my::linear>(
        std::make_shared<my::mailbox_world>(2),
        [](auto& comm) {
          if (comm.rank() == 1) return;  // never calls: rank 0 waits for it
          std::vector<int> v(4, 1);
          comm.all_reduce(std::span<int>(v), tutti::sum);
        },
        tutti::options{.timeout = 200ms});
    FAIL("no error");
  } catch (const tutti::error& e) {
    CHECK(e.kind() == tutti::errc::timeout);
    CHECK(e.rank() == 0);
    CHECK(e.peer() == 1);
    CHECK(e.collective() == "all_reduce");
    CHECK(e.sequence() == 1);
  }

  try {
    my::run_on_mailbox<my::linear>(std::make_shared<my::mailbox_world>(2), [](auto& comm) {
      std::vector<int> v(comm.rank() == 0 ? 4 : 5, 1);
      comm.all_reduce(std::span<int>(v), tutti::sum);
    });
    FAIL("no error");
  } catch (const tutti::error& e) {
    CHECK(e.kind() == tutti::errc::mismatch);
    CHECK(e.rank() == 0);
    CHECK(e.peer() == 1);
    CHECK(std::string(e.what()).find("count 5") != std::string::npos);
  }
}

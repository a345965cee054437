#pragma once
// Checks for sub-communicators, shared by test_split.cpp (inproc, shm) and test_gloo_split.cpp:
// the color/key patterns, the members each pattern should give (computed here by counting, not
// as the library sorts), and every collective on a child with values that name the parent
// rank they came from, so a child with the wrong members or order gives wrong numbers.

#include <signal.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <tutti/communicator.hpp>
#include <tutti/core/error.hpp>
#include <tutti/core/ops.hpp>

#include "fork_ranks.hpp"

namespace split_checks {

/// A split request: color (negative: none) and key.
struct ask {
  int color;
  int key;
};

inline constexpr int patterns = 8;
inline const char* const pattern_names[patterns] = {
    "everyone, one color",          "parity, keys reversed",
    "first half, the rest none",    "singletons",
    "thirds, keys shuffled (ties)", "nobody",
    "two colors, all keys equal",   "scattered: hashed colors (some none) and keys (ties)"};

/// splitmix64's finalizer: scatters (world size, rank) into unrelated colors and keys.
inline std::uint64_t scatter(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// What parent rank r of p asks for in pattern k.
inline ask pattern(int k, int p, int r) {
  switch (k) {
    case 0:
      return {0, 0};
    case 1:
      return {r % 2, -r};
    case 2:
      return {r < (p + 1) / 2 ? 7 : tutti::no_color, r};
    case 3:
      return {r, 0};
    case 4:
      return {r % 3, (r * 5 + 3) % p};
    case 5:
      return {tutti::no_color, r};
    case 6:
      return {r >= p / 2 ? 1 : 0, 42};
    default: {  // colors -1..2 (-1: none), keys 0..2, from a hash of world size and rank
      const std::uint64_t h = scatter((static_cast<std::uint64_t>(p) << 32) | unsigned(r));
      return {static_cast<int>(h % 4) - 1, static_cast<int>((h >> 8) % 3)};
    }
  }
}

/// The parent ranks of r's child in rank order, by counting for each member how many members
/// come before it; empty when r asks for no color.
inline std::vector<int> expected_members(int k, int p, int r) {
  const ask mine = pattern(k, p, r);
  if (mine.color < 0) return {};
  std::vector<int> same;
  for (int q = 0; q < p; ++q)
    if (pattern(k, p, q).color == mine.color) same.push_back(q);
  std::vector<int> out(same.size());
  for (int q : same) {
    std::size_t before = 0;
    for (int o : same) {
      const int ko = pattern(k, p, o).key, kq = pattern(k, p, q).key;
      if (ko < kq || (ko == kq && o < q)) ++before;
    }
    out[before] = q;
  }
  return out;
}

/// The value element i of child rank r holds: names r's parent rank.
inline std::int32_t value(const std::vector<int>& members, int r, std::size_t i) {
  return members[static_cast<std::size_t>(r)] * 1000 + static_cast<std::int32_t>(i);
}

/// Runs every collective once on `c`, whose parent ranks are `members`, and returns the first
/// thing that came out wrong ("" when everything matched). Call it on every member at once.
template <class Comm>
std::string check_child(Comm& c, const std::vector<int>& members) {
  const int s = c.size(), me = c.rank();
  if (s != static_cast<int>(members.size()))
    return "size " + std::to_string(s) + ", expected " + std::to_string(members.size());
  const std::size_t n = 5, sn = n * static_cast<std::size_t>(s);
  auto fill = [&](std::vector<std::int32_t>& v, int r) {
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = value(members, r, i);
  };
  auto wrong = [](const char* what, std::size_t i, std::int64_t got, std::int64_t want) {
    return std::string(what) + "[" + std::to_string(i) + "] = " + std::to_string(got) +
           ", expected " + std::to_string(want);
  };
  std::vector<std::int32_t> a(n), out(sn);
  // all_reduce: the sum over members; async max beside it.
  fill(a, me);
  std::vector<std::int32_t> m(n);
  fill(m, me);
  auto w = c.all_reduce_async(std::span<std::int32_t>(m), tutti::max);
  c.all_reduce(std::span<std::int32_t>(a), tutti::sum);
  w.wait();
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t sum = 0, mx = 0;
    for (int r = 0; r < s; ++r) {
      sum += value(members, r, i);
      mx = std::max<std::int64_t>(mx, value(members, r, i));
    }
    if (a[i] != sum) return wrong("all_reduce", i, a[i], sum);
    if (m[i] != mx) return wrong("all_reduce_async(max)", i, m[i], mx);
  }
  // broadcast from the last rank.
  fill(a, me);
  c.broadcast(std::span<std::int32_t>(a), s - 1);
  for (std::size_t i = 0; i < n; ++i)
    if (a[i] != value(members, s - 1, i))
      return wrong("broadcast", i, a[i], value(members, s - 1, i));
  // reduce (min) to rank 0.
  fill(a, me);
  std::vector<std::int32_t> red(n, -1);
  c.reduce(std::span<const std::int32_t>(a), std::span<std::int32_t>(red), tutti::min, 0);
  if (me == 0)
    for (std::size_t i = 0; i < n; ++i) {
      std::int32_t mn = value(members, 0, i);
      for (int r = 1; r < s; ++r) mn = std::min(mn, value(members, r, i));
      if (red[i] != mn) return wrong("reduce", i, red[i], mn);
    }
  // all_gather, and gather to the middle rank.
  fill(a, me);
  c.all_gather(std::span<const std::int32_t>(a), std::span<std::int32_t>(out));
  for (std::size_t i = 0; i < sn; ++i)
    if (out[i] != value(members, static_cast<int>(i / n), i % n))
      return wrong("all_gather", i, out[i], value(members, static_cast<int>(i / n), i % n));
  std::vector<std::int32_t> g(sn, -1);
  c.gather(std::span<const std::int32_t>(a), std::span<std::int32_t>(g), s / 2);
  if (me == s / 2)
    for (std::size_t i = 0; i < sn; ++i)
      if (g[i] != value(members, static_cast<int>(i / n), i % n))
        return wrong("gather", i, g[i], value(members, static_cast<int>(i / n), i % n));
  // scatter from rank 0: block r of rank 0's values.
  std::vector<std::int32_t> all(sn);
  fill(all, 0);
  c.scatter(std::span<const std::int32_t>(all), std::span<std::int32_t>(a), 0);
  for (std::size_t i = 0; i < n; ++i) {
    const auto want = value(members, 0, static_cast<std::size_t>(me) * n + i);
    if (a[i] != want) return wrong("scatter", i, a[i], want);
  }
  // reduce_scatter (sum): block me of the sum.
  fill(all, me);
  c.reduce_scatter(std::span<const std::int32_t>(all), std::span<std::int32_t>(a), tutti::sum);
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t sum = 0;
    for (int r = 0; r < s; ++r) sum += value(members, r, static_cast<std::size_t>(me) * n + i);
    if (a[i] != sum) return wrong("reduce_scatter", i, a[i], sum);
  }
  // all_to_all: block j of rank r's input lands as block r of rank j's output.
  fill(all, me);
  c.all_to_all(std::span<const std::int32_t>(all), std::span<std::int32_t>(out));
  for (std::size_t i = 0; i < sn; ++i) {
    const auto want =
        value(members, static_cast<int>(i / n), static_cast<std::size_t>(me) * n + i % n);
    if (out[i] != want) return wrong("all_to_all", i, out[i], want);
  }
  c.barrier();
  // send/recv around the ring.
  if (s > 1) {
    fill(a, me);
    std::vector<std::int32_t> got(n, -1);
    if (me % 2 == 0) {
      c.send(std::span<const std::int32_t>(a), (me + 1) % s, 7);
      c.recv(std::span<std::int32_t>(got), (me + s - 1) % s, 7);
    } else {
      c.recv(std::span<std::int32_t>(got), (me + s - 1) % s, 7);
      c.send(std::span<const std::int32_t>(a), (me + 1) % s, 7);
    }
    for (std::size_t i = 0; i < n; ++i)
      if (got[i] != value(members, (me + s - 1) % s, i))
        return wrong("recv", i, got[i], value(members, (me + s - 1) % s, i));
  }
  return {};
}

/// Runs every pattern on `comm` (rank r of p) and returns the first failure, "" if none.
template <class Comm>
std::string all_patterns(Comm& comm) {
  const int p = comm.size(), r = comm.rank();
  for (int k = 0; k < split_checks::patterns; ++k) {
    const auto want = expected_members(k, p, r);
    const auto a = pattern(k, p, r);
    auto child = comm.split(a.color, a.key);
    const std::string where = std::string(split_checks::pattern_names[k]) + ", world of " +
                              std::to_string(p) + ", rank " + std::to_string(r) + ": ";
    if (want.empty() != !child.has_value())
      return where + (child ? "got a child, expected none" : "got no child");
    if (!child) continue;
    if (const std::string bad = check_child(*child, want); !bad.empty()) return where + bad;
  }
  // The parent still works after its children.
  std::vector<std::int32_t> one{1};
  comm.all_reduce(std::span<std::int32_t>(one), tutti::sum);
  if (one[0] != p) return "the parent's all_reduce after splitting gave " + std::to_string(one[0]);
  return {};
}

/// Parity groups of 4 ranks (`make(rank, 4)` builds a rank's parent); rank 3 (rank 1 of the
/// odd group) dies between all_reduces of its group. Rank 1 must raise peer_lost in the group
/// naming its rank 1; ranks 0 and 2, whose group is whole, finish their group's calls and raise
/// at the parent's next call, naming rank 3.
template <class Make>
void check_killed_in_group(Make&& make) {
  fork_ranks::shared_report rep;
  const int n = 4;
  const auto status = fork_ranks::run_ranks(n, [&](int r) {
    auto comm = make(r, n);
    auto half = comm.split(r % 2, r);
    std::vector<float> v(1024, 1.0f);
    for (int i = 0; i < 20; ++i) {
      if (r == 3 && i == 10) raise(SIGKILL);
      if (r % 2 == 0) {
        half->all_reduce(std::span<float>(v), tutti::max);
        continue;
      }
      try {
        half->all_reduce(std::span<float>(v), tutti::max);
      } catch (const tutti::error&) {
        const int code = fork_ranks::expect_error(rep.operator->(), r, [&] { throw; });
        // Stay alive until the others have raised: a rank that exits is a dead rank too.
        (void)fork_ranks::await_report(rep.operator->(), 0, std::chrono::seconds(60));
        (void)fork_ranks::await_report(rep.operator->(), 2, std::chrono::seconds(60));
        return code;
      }
    }
    if (r % 2 == 1) return 3;  // the group should have raised
    return fork_ranks::expect_error(rep.operator->(), r,
                                    [&] { comm.all_reduce(std::span<float>(v), tutti::max); });
  });
  CHECK(WIFSIGNALED(status[3]));
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    CAPTURE(std::string(rep->what[r]));
    CHECK(fork_ranks::exited_with(status[static_cast<std::size_t>(r)], 0));
    CHECK(rep->kind[r] == static_cast<int>(tutti::errc::peer_lost));
    CHECK(rep->peer[r] == (r == 1 ? 1 : 3));
  }
}

}  // namespace split_checks

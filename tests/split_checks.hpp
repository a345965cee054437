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

/// Every collective once on a child whose parent ranks are `members`, one step per member
/// function; each returns the first thing that came out wrong ("" when everything matched).
template <class Comm>
class child_check {
 public:
  using values = std::vector<std::int32_t>;

  child_check(Comm& c, const std::vector<int>& members)
      : c_(c), members_(members), s_(c.size()), me_(c.rank()) {}

  /// all_reduce: the sum over members; async max beside it.
  std::string all_reduce() {
    values a = mine(n_), m = mine(n_);
    auto w = c_.all_reduce_async(std::span<std::int32_t>(m), tutti::max);
    c_.all_reduce(std::span<std::int32_t>(a), tutti::sum);
    w.wait();
    for (std::size_t i = 0; i < n_; ++i) {
      std::int64_t sum = 0, mx = 0;
      for (int r = 0; r < s_; ++r) {
        sum += value(members_, r, i);
        mx = std::max<std::int64_t>(mx, value(members_, r, i));
      }
      if (a[i] != sum) return wrong("all_reduce", i, a[i], sum);
      if (m[i] != mx) return wrong("all_reduce_async(max)", i, m[i], mx);
    }
    return {};
  }

  /// broadcast from the last rank, then reduce (min) to rank 0.
  std::string broadcast_and_reduce() {
    values a = mine(n_);
    c_.broadcast(std::span<std::int32_t>(a), s_ - 1);
    for (std::size_t i = 0; i < n_; ++i)
      if (a[i] != value(members_, s_ - 1, i))
        return wrong("broadcast", i, a[i], value(members_, s_ - 1, i));
    a = mine(n_);
    values red(n_, -1);
    c_.reduce(std::span<const std::int32_t>(a), std::span<std::int32_t>(red), tutti::min, 0);
    if (me_ == 0)
      for (std::size_t i = 0; i < n_; ++i) {
        std::int32_t mn = value(members_, 0, i);
        for (int r = 1; r < s_; ++r) mn = std::min(mn, value(members_, r, i));
        if (red[i] != mn) return wrong("reduce", i, red[i], mn);
      }
    return {};
  }

  /// all_gather, and gather to the middle rank: block r is rank r's values.
  std::string gathers() {
    const values a = mine(n_);
    values out(sn());
    c_.all_gather(std::span<const std::int32_t>(a), std::span<std::int32_t>(out));
    if (std::string bad = blocks_by_rank("all_gather", out); !bad.empty()) return bad;
    values g(sn(), -1);
    c_.gather(std::span<const std::int32_t>(a), std::span<std::int32_t>(g), s_ / 2);
    return me_ == s_ / 2 ? blocks_by_rank("gather", g) : std::string();
  }

  /// scatter from rank 0 (block me of rank 0's values), then reduce_scatter (sum: block me of
  /// the sum).
  std::string scatters() {
    values a(n_);
    const values from_root = of_rank(0, sn());
    c_.scatter(std::span<const std::int32_t>(from_root), std::span<std::int32_t>(a), 0);
    for (std::size_t i = 0; i < n_; ++i) {
      const auto want = value(members_, 0, my_block() + i);
      if (a[i] != want) return wrong("scatter", i, a[i], want);
    }
    const values all = mine(sn());
    c_.reduce_scatter(std::span<const std::int32_t>(all), std::span<std::int32_t>(a), tutti::sum);
    for (std::size_t i = 0; i < n_; ++i) {
      std::int64_t sum = 0;
      for (int r = 0; r < s_; ++r) sum += value(members_, r, my_block() + i);
      if (a[i] != sum) return wrong("reduce_scatter", i, a[i], sum);
    }
    return {};
  }

  /// all_to_all: block j of rank r's input lands as block r of rank j's output; then a barrier.
  std::string all_to_all() {
    const values all = mine(sn());
    values out(sn());
    c_.all_to_all(std::span<const std::int32_t>(all), std::span<std::int32_t>(out));
    for (std::size_t i = 0; i < sn(); ++i) {
      const auto want = value(members_, static_cast<int>(i / n_), my_block() + i % n_);
      if (out[i] != want) return wrong("all_to_all", i, out[i], want);
    }
    c_.barrier();
    return {};
  }

  /// send/recv around the ring: even ranks send first, odd ranks receive first.
  std::string ring() {
    if (s_ == 1) return {};
    const values a = mine(n_);
    values got(n_, -1);
    const int right = (me_ + 1) % s_, left = (me_ + s_ - 1) % s_;
    if (me_ % 2 == 0) {
      c_.send(std::span<const std::int32_t>(a), right, 7);
      c_.recv(std::span<std::int32_t>(got), left, 7);
    } else {
      c_.recv(std::span<std::int32_t>(got), left, 7);
      c_.send(std::span<const std::int32_t>(a), right, 7);
    }
    for (std::size_t i = 0; i < n_; ++i)
      if (got[i] != value(members_, left, i))
        return wrong("recv", i, got[i], value(members_, left, i));
    return {};
  }

 private:
  static constexpr std::size_t n_ = 5;

  [[nodiscard]] std::size_t sn() const { return n_ * static_cast<std::size_t>(s_); }
  [[nodiscard]] std::size_t my_block() const { return static_cast<std::size_t>(me_) * n_; }
  [[nodiscard]] values of_rank(int r, std::size_t len) const {
    values v(len);
    for (std::size_t i = 0; i < len; ++i) v[i] = value(members_, r, i);
    return v;
  }
  [[nodiscard]] values mine(std::size_t len) const { return of_rank(me_, len); }

  /// Checks that block r of `got` holds rank r's first n values.
  [[nodiscard]] std::string blocks_by_rank(const char* what, const values& got) const {
    for (std::size_t i = 0; i < got.size(); ++i)
      if (got[i] != value(members_, static_cast<int>(i / n_), i % n_))
        return wrong(what, i, got[i], value(members_, static_cast<int>(i / n_), i % n_));
    return {};
  }

  static std::string wrong(const char* what, std::size_t i, std::int64_t got, std::int64_t want) {
    return std::string(what) + "[" + std::to_string(i) + "] = " + std::to_string(got) +
           ", expected " + std::to_string(want);
  }

  Comm& c_;
  const std::vector<int>& members_;
  int s_, me_;
};

/// Runs every collective once on `c`, whose parent ranks are `members`, and returns the first
/// thing that came out wrong ("" when everything matched). Call it on every member at once.
template <class Comm>
std::string check_child(Comm& c, const std::vector<int>& members) {
  if (c.size() != static_cast<int>(members.size()))
    return "size " + std::to_string(c.size()) + ", expected " + std::to_string(members.size());
  child_check<Comm> check(c, members);
  for (auto step : {&child_check<Comm>::all_reduce, &child_check<Comm>::broadcast_and_reduce,
                    &child_check<Comm>::gathers, &child_check<Comm>::scatters,
                    &child_check<Comm>::all_to_all, &child_check<Comm>::ring})
    if (std::string bad = (check.*step)(); !bad.empty()) return bad;
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

#pragma once
/// \file
/// What splitting a communicator hands its transport: the plan of this rank's child
/// (`split_plan`, MPI_Comm_split's rules, computed the same on every rank from what every rank
/// asked for) and a way to all-gather a string over the parent (`split_exchange`) for a
/// transport whose child must learn something only one rank knows (shm: its segment's name).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace tutti::inline v0::detail {

/// One rank's request to split: `color` (negative: no child), `key` (its place among the
/// ranks of its color; ties go by parent rank) and `check` (the same on every rank, else the
/// calls disagree: group() puts a digest of its rank list there).
struct split_request {
  std::int64_t color = 0;
  std::int64_t key = 0;
  std::int64_t check = 0;
};

/// This rank's child.
struct split_plan {
  std::uint64_t id = 0;     ///< which split of the parent (the same on every rank): names the child
  std::int64_t color = -1;  ///< negative: this rank gets no child
  std::int64_t key = 0;     ///< as asked (NCCL orders by it itself)
  int rank = -1;            ///< this rank's rank in the child
  int size = 0;             ///< the child's size
  std::vector<int> members;  ///< the child's ranks as parent ranks, in child rank order
  [[nodiscard]] bool joins() const noexcept { return color >= 0; }
};

/// All-gathers one string per parent rank over the parent: element q is parent rank q's.
/// Every parent rank calls it exactly once per split, members or not, when the transport's
/// split uses it at all.
using split_exchange = std::function<std::vector<std::string>(const std::string&)>;

/// The plan of parent rank `me` from every rank's request (index = parent rank).
[[nodiscard]] inline split_plan plan_split(std::span<const split_request> all, int me,
                                           std::uint64_t id) {
  split_plan p;
  p.id = id;
  const split_request mine = all[static_cast<std::size_t>(me)];
  p.key = mine.key;
  if (mine.color < 0) return p;
  p.color = mine.color;
  std::vector<std::pair<std::int64_t, int>> order;  // (key, parent rank)
  for (std::size_t q = 0; q < all.size(); ++q)
    if (all[q].color == mine.color) order.emplace_back(all[q].key, static_cast<int>(q));
  std::sort(order.begin(), order.end());
  for (const auto& [key, q] : order) {
    if (q == me) p.rank = static_cast<int>(p.members.size());
    p.members.push_back(q);
  }
  p.size = static_cast<int>(p.members.size());
  return p;
}

/// A digest of a rank list (FNV-1a over the values), for checking that every rank passed the
/// same one to group().
[[nodiscard]] inline std::int64_t ranks_digest(std::span<const int> ranks) noexcept {
  std::uint64_t h = 1469598103934665603ULL;
  auto mix = [&](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xffU;
      h *= 1099511628211ULL;
    }
  };
  mix(ranks.size());
  for (int r : ranks) mix(static_cast<std::uint64_t>(static_cast<std::uint32_t>(r)));
  return static_cast<std::int64_t>(h & 0x7fffffffffffffffULL);
}

}  // namespace tutti::inline v0::detail

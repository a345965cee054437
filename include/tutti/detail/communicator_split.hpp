#pragma once
/// \file
/// The communicator's side of split and group: every rank's request all-gathered over the
/// parent and checked (group's rank lists must agree), this rank's plan, the string all-gather
/// a transport's split may use (split_exchange), and the child communicator made from them
/// (split_child). Over NCCL, ncclCommSplit gathers and orders by itself.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tutti/core/error.hpp"
#include "tutti/core/options.hpp"
#include "tutti/detail/split.hpp"
#include "tutti/transport/concepts.hpp"

namespace tutti::inline v0::detail {

/// Every rank's request, index = parent rank, all-gathered over `comm`; raises
/// tutti::error(errc::mismatch) on every rank when the ranks' `check`s differ (one called
/// group with another list, or split while another called group).
template <class Comm>
[[nodiscard]] std::vector<split_request> gather_split_requests(Comm& comm, split_request mine,
                                                               const char* what) {
  const auto p = static_cast<std::size_t>(comm.size());
  const std::int64_t me[3] = {mine.color, mine.key, mine.check};
  std::vector<std::int64_t> all(3 * p);
  comm.all_gather(std::span<const std::int64_t>(me), std::span<std::int64_t>(all));
  std::vector<split_request> reqs(p);
  for (std::size_t q = 0; q < p; ++q) reqs[q] = {all[3 * q], all[3 * q + 1], all[3 * q + 2]};
  for (std::size_t q = 0; q < p; ++q)
    if (reqs[q].check != mine.check)
      throw error(errc::mismatch, what, 0, comm.rank(), static_cast<int>(q),
                  "rank " + std::to_string(q) +
                      (reqs[q].check == 0 ? " called split" : " called group with a rank list") +
                      " but rank " + std::to_string(comm.rank()) +
                      (mine.check == 0 ? " called split" : " called group with another one"));
  return reqs;
}

/// group(ranks)'s request: color 0 and key = position for a listed rank, no color otherwise.
/// Raises errc::invalid_argument (after the exchange, so on every rank alike) for a rank out of
/// [0, size) or listed twice.
[[nodiscard]] inline split_request group_request(std::span<const int> ranks, int me) {
  split_request r{-1, 0, ranks_digest(ranks) | (std::int64_t{1} << 62)};
  for (std::size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] == me) r = {0, static_cast<std::int64_t>(i), r.check};
  return r;
}
inline void check_group_ranks(std::span<const int> ranks, int size, int me) {
  std::set<int> seen;
  for (int r : ranks)
    if (r < 0 || r >= size || !seen.insert(r).second)
      throw error(errc::invalid_argument, "group", 0, me, -1,
                  "rank " + std::to_string(r) +
                      (r < 0 || r >= size ? " is not in [0, " + std::to_string(size) + ")"
                                          : " is listed twice") +
                      " in group's rank list");
}

/// split_exchange over `comm`: all sizes, then all bytes (all_gatherv).
template <class Comm>
[[nodiscard]] split_exchange exchange_over(Comm& comm) {
  return [&comm](const std::string& mine) {
    const auto p = static_cast<std::size_t>(comm.size());
    const std::uint64_t n = mine.size();
    std::vector<std::uint64_t> sizes(p);
    comm.all_gather(std::span<const std::uint64_t>(&n, 1), std::span<std::uint64_t>(sizes));
    std::vector<std::size_t> counts(sizes.begin(), sizes.end());
    std::size_t total = 0;
    for (std::size_t c : counts) total += c;
    std::vector<std::uint8_t> bytes(total);
    comm.all_gatherv(
        std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(mine.data()), n),
        std::span<std::uint8_t>(bytes), std::span<const std::size_t>(counts));
    std::vector<std::string> out(p);
    std::size_t at = 0;
    for (std::size_t q = 0; q < p; ++q) {
      out[q].assign(reinterpret_cast<const char*>(bytes.data() + at), counts[q]);
      at += counts[q];
    }
    return out;
  };
}

/// The call a request comes from, as errors name it.
[[nodiscard]] inline const char* split_call_name(const split_request& r) noexcept {
  return r.check == 0 ? "split" : "group";
}

/// The child communicator (a `Child`) that this rank's request `mine` gives it in `parent`'s
/// split number `splits` (counted up here), or none; `listed` is group's rank list, checked
/// after the exchange (so that every rank raises alike). Over host memory the requests are
/// gathered and checked over `parent` and the child's transport meets through it.
template <class Child, class Comm>
[[nodiscard]] std::optional<Child> make_split_child(Comm& parent, split_request mine,
                                                    std::span<const int> listed,
                                                    const options& child_opts,
                                                    std::uint64_t& splits) {
  split_plan plan;
  split_exchange exchange;
  if constexpr (std::is_same_v<typename Comm::memory_space, host_memory>) {
    const auto all = gather_split_requests(parent, mine, split_call_name(mine));
    if (mine.check != 0) check_group_ranks(listed, parent.size(), parent.rank());
    plan = plan_split(all, parent.rank(), splits++);
    exchange = exchange_over(parent);
  } else {  // ncclCommSplit gathers the colors and keys itself
    if (mine.check != 0) check_group_ranks(listed, parent.size(), parent.rank());
    plan.id = splits++;
    plan.color = mine.color;
    plan.key = mine.key;
  }
  auto child = parent.transport().split(plan, exchange, child_opts);
  if (!child) return std::nullopt;
  return Child(std::move(*child), child_opts);
}

/// make_split_child, with its errors named after the call the user made ("split" or "group")
/// rather than the collective inside it that raised (an all_gather over the parent): the kind,
/// sequence number, rank and peer stay as raised, and the message says which collective it was.
template <class Child, class Comm>
[[nodiscard]] std::optional<Child> split_child(Comm& parent, split_request mine,
                                               std::span<const int> listed,
                                               const options& child_opts, std::uint64_t& splits) {
  const char* what = split_call_name(mine);
  try {
    return make_split_child<Child>(parent, mine, listed, child_opts, splits);
  } catch (const error& e) {
    if (e.collective() == what) throw;
    throw error(e.kind(), what, e.sequence(), e.rank(), e.peer(),
                e.collective().empty() ? e.reason() : "its " + e.collective() + ": " + e.reason());
  }
}

}  // namespace tutti::inline v0::detail

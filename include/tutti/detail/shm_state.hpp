#pragma once
/// \file
/// tutti::shm's world state (shm_state): the mapped segment and its view, the channels, the
/// watch on the peers' processes, the generations of the barrier and the lines, and what
/// liveness keeps between polls. Closing it marks this rank closed in the segment.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tutti/detail/shm_channels.hpp"
#include "tutti/detail/shm_layout.hpp"
#include "tutti/detail/shm_segment.hpp"
#include "tutti/detail/wait.hpp"

namespace tutti::inline v0::detail {

/// Everything one rank holds of a shm world. Lives on the heap: requests point at it.
struct shm_state {
  shm_state(shm_mapping m, const shm_layout& l, int r, int n)
      : map(std::move(m)),
        view(map.base(), l),
        rank(r),
        size(n),
        channels(view, r, n),
        machine_ranks(n),
        tuning(wait_tuning::for_host(n)) {}
  shm_state(const shm_state&) = delete;
  shm_state& operator=(const shm_state&) = delete;
  ~shm_state() {
    view.block(rank).state.store(static_cast<std::uint32_t>(shm_rank_state::closed),
                                 std::memory_order_release);
    for (int q = 0; q < size; ++q) view.block(q).bell.ring(true);
  }

  shm_mapping map;
  shm_view view;
  int rank;
  int size;
  shm_channels channels;
  shm_watch watch;
  int machine_ranks;  // ranks sharing this machine's CPUs as far as this rank knows (>= size)
  wait_tuning tuning;
  std::uint64_t barrier_gen = 0;
  std::uint64_t line_gen = 0;
  std::string name;
  bool broken = false;  // a request died mid-message: the channels are out of step
  std::vector<std::unique_ptr<shm_op>> spare_ops;  // finished ops, reused by the next requests

  /// A cleared op for a new request: a spare one where there is one.
  [[nodiscard]] std::unique_ptr<shm_op> take_op() {
    if (spare_ops.empty()) return std::make_unique<shm_op>();
    auto op = std::move(spare_ops.back());
    spare_ops.pop_back();
    *op = shm_op{};
    return op;
  }
  /// Keeps a finished op for reuse (a few dozen at most).
  void give_op(std::unique_ptr<shm_op> op) noexcept {
    if (!op || spare_ops.size() >= 64) return;
    try {
      spare_ops.push_back(std::move(op));
    } catch (...) {  // NOLINT(bugprone-empty-catch): no room to keep it: it is freed
    }
  }
  // Liveness (see shm_rank_block::beat): this rank's count, when it last stored it, and per
  // peer the value last seen and since when, observed in the polls of slow waits.
  std::uint64_t beats = 0;
  clock::time_point last_beat{};
  clock::time_point last_poll{};
  struct beat_seen {
    std::uint64_t value = 0;
    clock::time_point since{};
  };
  std::vector<beat_seen> seen;
};

}  // namespace tutti::inline v0::detail

#pragma once
/// \file
/// The call board: every rank publishes the fingerprints of its recent calls, so a waiting rank
/// can see that a peer entered a different call with the same sequence number even when no
/// message ever flows between them (say, two ranks that both believe they are the root).
/// Plain atomics, no pointers: a board may live in shared memory.

#include <atomic>
#include <cstdint>
#include <optional>

#include "tutti/detail/call.hpp"

namespace tutti::inline v0::detail {

class call_board_row {
 public:
  static constexpr std::uint64_t depth = 16;

  /// Publishes this rank's call `seq`. Single writer (the owning rank).
  void publish(std::uint64_t seq, const fingerprint& fp) noexcept {
    // A seqlock on sequentially consistent atomics: one publish per call, so the cost is nil,
    // and readers see either a whole record or an odd/changed version.
    record& r = records_[seq % depth];
    const std::uint64_t v = r.version.load();
    r.version.store(v + 1);  // odd: being written
    r.seq.store(seq);
    r.head.store(fp.packed_head());
    r.count.store(fp.count);
    r.version.store(v + 2);
  }

  /// The fingerprint this rank published for call `seq`, if it is still on the board.
  [[nodiscard]] std::optional<fingerprint> lookup(std::uint64_t seq) const noexcept {
    const record& r = records_[seq % depth];
    for (int attempt = 0; attempt < 4; ++attempt) {
      const std::uint64_t v1 = r.version.load();
      if (v1 & 1) continue;
      const std::uint64_t s = r.seq.load();
      const std::uint64_t h = r.head.load();
      const std::uint64_t c = r.count.load();
      if (r.version.load() != v1) continue;
      if (s != seq) return std::nullopt;
      return fingerprint::unpack(h, c);
    }
    return std::nullopt;
  }

 private:
  struct record {
    std::atomic<std::uint64_t> version{0};
    std::atomic<std::uint64_t> seq{0};
    std::atomic<std::uint64_t> head{0};
    std::atomic<std::uint64_t> count{0};
  };
  record records_[depth];
};

/// Message for a mismatch between this rank's call and a peer's call with the same number.
[[nodiscard]] inline std::string mismatch_text(int rank, const fingerprint& mine, int peer,
                                               const fingerprint& theirs) {
  return "mismatched collective: rank " + std::to_string(rank) + " called " + mine.describe() +
         " but rank " + std::to_string(peer) + " called " + theirs.describe();
}

/// A rank q != `self` of `size` whose board (`board_of(q)`) shows call #c.seq different from
/// c, else `fallback`: whom to name when raising a mismatch another rank recorded (the rank
/// this one waited for may have made the same call as it).
template <class BoardOf>
[[nodiscard]] int disagreeing_rank(const call& c, int self, int size, int fallback,
                                   BoardOf&& board_of) {
  for (int q = 0; q < size; ++q)
    if (q != self)
      if (auto theirs = board_of(q).lookup(c.seq); theirs && !(*theirs == c.fp)) return q;
  return fallback;
}

}  // namespace tutti::inline v0::detail

#pragma once
/// \file
/// The checks tutti::communicator makes on a collective's arguments before it numbers the call or
/// moves a byte (buffer sizes against each other and the world, the root, the counts of the
/// v-variants), and what the algorithm policy is handed once they pass.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "tutti/core/error.hpp"
#include "tutti/detail/call.hpp"

namespace tutti::inline v0::detail {

/// What a policy's schedule is handed for one call: the buffers it reads and writes (null on a
/// rank that has none: not the root of a reduce, gather or scatter) and its count in elements
/// (per block for reduce_scatter, all_gather, gather, scatter and all_to_all; 0 for the
/// v-variants, whose counts say it).
struct call_bytes {
  const std::byte* in;
  std::byte* out;
  std::size_t n;
};

/// The argument checks of one call of collective `k` on `rank` of a world of `size`. Sizes are
/// in elements. An error is errc::invalid_argument naming the collective, this rank and `seq`,
/// the number the call would have had.
class call_args {
 public:
  call_args(collective k, std::uint64_t seq, int rank, int size) noexcept
      : k_(k), seq_(seq), rank_(rank), size_(size) {}

  /// A buffer of `n` elements as one block per rank: the block's size.
  [[nodiscard]] std::size_t block(std::size_t n) const {
    if (n % world() != 0) bad_size(n);
    return n / world();
  }

  /// all_reduce, reduce and reduce_scatter.
  [[nodiscard]] call_bytes reducing(const std::byte* i, std::size_t in_n, std::byte* o,
                                    std::size_t out_n, int root) const {
    if (k_ == collective::reduce) {
      check_root(root);
      if (rank_ != root)
        o = nullptr;
      else if (out_n != in_n)
        bad_size(out_n, in_n);
    } else if (k_ == collective::reduce_scatter) {
      if (in_n != out_n * world()) bad_size(in_n, out_n * world());
    } else if (out_n != in_n) {
      bad_size(out_n, in_n);
    }
    return {i, o, k_ == collective::reduce_scatter ? out_n : in_n};
  }

  /// broadcast (one buffer: i == o), all_gather, gather, scatter and all_to_all.
  [[nodiscard]] call_bytes moving(const std::byte* i, std::size_t in_n, std::byte* o,
                                  std::size_t out_n, int root) const {
    const bool is_root = rank_ == root;
    switch (k_) {
      case collective::all_gather:
        if (out_n != in_n * world()) bad_size(out_n, in_n * world());
        return {i, o, in_n};
      case collective::gather:
        check_root(root);
        if (is_root && out_n != in_n * world()) bad_size(out_n, in_n * world());
        return {i, is_root ? o : nullptr, in_n};
      case collective::scatter:
        check_root(root);
        if (is_root && in_n != out_n * world()) bad_size(in_n, out_n * world());
        return {is_root ? i : nullptr, o, out_n};
      case collective::all_to_all: {
        const std::size_t n = block(in_n);
        if (out_n != in_n) bad_size(out_n, in_n);
        return {i, o, n};
      }
      default:  // broadcast
        check_root(root);
        return {i, o, in_n};
    }
  }

  /// all_gatherv, gatherv and scatterv: `counts` holds every rank's count.
  [[nodiscard]] call_bytes vectored(const std::byte* i, std::size_t in_n, std::byte* o,
                                    std::size_t out_n, std::span<const std::size_t> counts,
                                    int root) const {
    if (counts.size() != world())
      fail("counts has " + std::to_string(counts.size()) + " entries for " + std::to_string(size_) +
           " ranks");
    if (root >= 0 || k_ != collective::all_gatherv) check_root(root);
    std::size_t total = 0;
    for (auto c : counts) total += c;
    const std::size_t mine = counts[static_cast<std::size_t>(rank_)];
    const bool gathers = k_ != collective::scatterv;
    const bool holds_all = k_ == collective::all_gatherv || rank_ == root;
    if (gathers && in_n != mine) bad_size(in_n, mine);
    if (!gathers && out_n != mine) bad_size(out_n, mine);
    if (holds_all && (gathers ? out_n : in_n) != total) bad_size(gathers ? out_n : in_n, total);
    return {gathers || holds_all ? i : nullptr, !gathers || holds_all ? o : nullptr, 0};
  }

  /// all_to_allv: each pair's sizes are checked on its messages (counts differ per rank by
  /// design); here each side's counts against the world and its buffer.
  void all_to_allv(std::size_t in_n, std::span<const std::size_t> send_counts, std::size_t out_n,
                   std::span<const std::size_t> recv_counts) const {
    if (send_counts.size() != world() || recv_counts.size() != world())
      fail("send_counts and recv_counts need one entry per rank");
    std::size_t sent = 0, received = 0;
    for (auto c : send_counts) sent += c;
    for (auto c : recv_counts) received += c;
    if (in_n != sent) bad_size(in_n, sent);
    if (out_n != received) bad_size(out_n, received);
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw error(errc::invalid_argument, std::string(name(k_)), seq_, rank_, -1, why);
  }
  /// A buffer of `got` elements where `want` were needed, or (want 0) not a whole number of blocks.
  [[noreturn]] void bad_size(std::size_t got, std::size_t want = 0) const {
    fail(want == 0 && got != 0
             ? "buffer of " + std::to_string(got) + " elements is not a multiple of " +
                   std::to_string(size_) + " ranks"
             : "buffer has " + std::to_string(got) + " elements, needs " + std::to_string(want));
  }
  void check_root(int root) const {
    if (root < 0 || root >= size_)
      fail("root " + std::to_string(root) + " is not a rank in [0, " + std::to_string(size_) + ")");
  }
  [[nodiscard]] std::size_t world() const noexcept { return static_cast<std::size_t>(size_); }

  collective k_;
  std::uint64_t seq_;
  int rank_;
  int size_;
};

}  // namespace tutti::inline v0::detail

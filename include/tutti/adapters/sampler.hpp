#pragma once
/// \file
/// tutti::distributed_sampler: which dataset indices each rank visits in an epoch, exactly as
/// torch.utils.data.DistributedSampler, plus which of them are padding.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tutti/core/error.hpp"

namespace tutti::inline v0 {

namespace detail {

/// torch.randperm's forward Fisher-Yates: for i in [0, n-1): z = mt() % (n - i),
/// swap(p[i], p[i + z]).
[[nodiscard]] inline std::vector<std::size_t> randperm_fisher_yates(std::size_t n,
                                                                    std::mt19937& mt) {
  std::vector<std::size_t> p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = i;
  for (std::size_t i = 0; i + 1 < n; ++i) {
    const std::size_t z = static_cast<std::size_t>(mt()) % (n - i);
    std::swap(p[i], p[i + z]);
  }
  return p;
}

/// torch.randperm's inside-out Fisher-Yates with 64-bit draws: for i in [0, n):
/// z = ((hi << 32) | lo) % (i + 1) with hi = mt(), lo = mt(); p[i] = p[z]; p[z] = i.
[[nodiscard]] inline std::vector<std::size_t> randperm_inside_out(std::size_t n, std::mt19937& mt) {
  std::vector<std::size_t> p(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t hi = mt();
    const std::uint64_t lo = mt();
    const auto z = static_cast<std::size_t>(((hi << 32U) | lo) % (i + 1));
    p[i] = p[z];
    p[z] = i;
  }
  return p;
}

/// torch.randperm(n, generator=g) after g.manual_seed(s) on the CPU generator, where `seed` is
/// the low 32 bits of s: std::mt19937(seed), then the 32-bit Fisher-Yates below
/// UINT32_MAX / 20 elements and the inside-out variant from there on.
[[nodiscard]] inline std::vector<std::size_t> torch_randperm(std::size_t n, std::uint32_t seed) {
  std::mt19937 mt(seed);
  if (n < std::numeric_limits<std::uint32_t>::max() / 20) return randperm_fisher_yates(n, mt);
  return randperm_inside_out(n, mt);
}

}  // namespace detail

struct sampler_options {
  /// Visit the dataset in a permutation drawn from `seed + epoch` (the same on every rank).
  bool shuffle = true;
  std::uint64_t seed = 0;
  /// Drop the tail that does not divide evenly among the replicas instead of padding it.
  bool drop_last = false;
};

/// Shards `dataset_size` indices among `num_replicas` ranks with torch.utils.data.
/// DistributedSampler's semantics:
///
/// - num_samples (= size()) is ceil(dataset_size / num_replicas), or floor(...) with drop_last
///   when the division is not exact; total_size = num_samples * num_replicas.
/// - The epoch's order is 0..dataset_size-1, or with shuffle the permutation torch.randperm
///   draws from a generator seeded with seed + epoch. tutti specifies that permutation itself
///   (no std::shuffle or std::uniform_int_distribution, whose results vary between standard
///   libraries): std::mt19937 (fully specified by the standard) seeded with the low 32 bits of
///   seed + epoch; for n < 214748364 (UINT32_MAX / 20) the forward Fisher-Yates of
///   torch.randperm — for i in [0, n-1): z = mt() % (n - i); swap(p[i], p[i + z]); for larger n
///   its inside-out variant with 64-bit draws (hi = mt(), lo = mt()): for i in [0, n):
///   z = ((hi << 32) | lo) % (i + 1); p[i] = p[z]; p[z] = i. Both are bit-identical to
///   torch.randperm on the CPU generator (checked against torch 2.x).
/// - Without drop_last the order is padded to total_size by repeating it from its start
///   (several times over when the dataset is smaller than the padding); with drop_last it is
///   cut to total_size.
/// - Rank r takes positions r, r + num_replicas, r + 2 num_replicas, ... (strided, not blocks).
///
/// Call set_epoch(e) at the start of every epoch, or every epoch repeats the same order.
/// `padding_mask()` tells which of this rank's indices are repeats added as padding, so a
/// distributed evaluation can leave them out and count every sample exactly once.
class distributed_sampler {
 public:
  /// \throws tutti::error(errc::invalid_argument) when num_replicas < 1, rank is not in
  ///   [0, num_replicas), or the padded epoch would not fit in memory's index range.
  distributed_sampler(std::size_t dataset_size, int num_replicas, int rank,
                      sampler_options opts = {})
      : n_(dataset_size), replicas_(num_replicas), rank_(rank), opts_(opts) {
    if (num_replicas < 1) invalid("num_replicas=" + std::to_string(num_replicas) + " must be >= 1");
    if (rank < 0 || rank >= num_replicas)
      invalid("rank=" + std::to_string(rank) +
              " is not in [0, num_replicas=" + std::to_string(num_replicas) + ")");
    const auto p = static_cast<std::size_t>(num_replicas);
    num_samples_ = (opts.drop_last && n_ % p != 0) ? n_ / p : n_ / p + (n_ % p != 0 ? 1 : 0);
    if (num_samples_ > std::numeric_limits<std::size_t>::max() / p)
      invalid("dataset_size=" + std::to_string(n_) + " is too large");
    total_size_ = num_samples_ * p;
  }

  /// Selects the epoch whose order indices() returns (seed + epoch seeds the shuffle).
  void set_epoch(std::uint64_t epoch) noexcept { epoch_ = epoch; }
  [[nodiscard]] std::uint64_t epoch() const noexcept { return epoch_; }

  /// Indices per rank and epoch (torch's len(sampler)).
  [[nodiscard]] std::size_t size() const noexcept { return num_samples_; }
  /// size() * num_replicas: the length of the padded (or cut) epoch.
  [[nodiscard]] std::size_t total_size() const noexcept { return total_size_; }
  [[nodiscard]] std::size_t dataset_size() const noexcept { return n_; }
  [[nodiscard]] int num_replicas() const noexcept { return replicas_; }
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] const sampler_options& options() const noexcept { return opts_; }

  /// This rank's dataset indices for the current epoch, in visiting order (size() of them).
  [[nodiscard]] std::vector<std::size_t> indices() const {
    std::vector<std::size_t> out;
    out.reserve(num_samples_);
    walk([&](std::size_t index, bool) { out.push_back(index); });
    return out;
  }

  /// For each of indices(): true when it is padding (a repeat that only evens out the ranks).
  /// Never true with drop_last.
  [[nodiscard]] std::vector<bool> padding_mask() const {
    std::vector<bool> out;
    out.reserve(num_samples_);
    walk([&](std::size_t, bool padding) { out.push_back(padding); });
    return out;
  }

  /// The epoch's order of all dataset_size() indices before padding and splitting: 0..n-1,
  /// or with shuffle torch.randperm(n) from a generator seeded with seed + epoch.
  [[nodiscard]] std::vector<std::size_t> epoch_order() const {
    if (!opts_.shuffle) {
      std::vector<std::size_t> order(n_);
      for (std::size_t i = 0; i < n_; ++i) order[i] = i;
      return order;
    }
    return detail::torch_randperm(n_, static_cast<std::uint32_t>(opts_.seed + epoch_));
  }

 private:
  [[noreturn]] static void invalid(const std::string& what) {
    throw error(errc::invalid_argument, "", 0, -1, -1, "distributed_sampler: " + what);
  }

  // Calls f(index, is_padding) for this rank's positions rank, rank + p, ... < total_size.
  template <class F>
  void walk(F&& f) const {
    if (n_ == 0) return;  // torch: total_size is 0 too
    const std::vector<std::size_t> order = epoch_order();
    const auto p = static_cast<std::size_t>(replicas_);
    for (auto pos = static_cast<std::size_t>(rank_); pos < total_size_; pos += p) {
      // Padding repeats the order from its start: position pos holds order[pos % n].
      f(order[pos % n_], pos >= n_);
    }
  }

  std::size_t n_;
  int replicas_;
  int rank_;
  sampler_options opts_;
  std::uint64_t epoch_ = 0;
  std::size_t num_samples_ = 0;
  std::size_t total_size_ = 0;
};

}  // namespace tutti::inline v0

#pragma once
/// \file
/// What one collective call is: its kind, sequence number and fingerprint. The fingerprint is
/// compared across ranks so a mismatched call raises instead of hanging or corrupting data.

#include <cstdint>
#include <string>
#include <string_view>

#include "tutti/core/ops.hpp"
#include "tutti/core/reduce.hpp"
#include "tutti/core/types.hpp"

namespace tutti::inline v0::detail {

enum class collective : std::uint8_t {
  none,
  all_reduce,
  reduce,
  broadcast,
  all_gather,
  gather,
  scatter,
  reduce_scatter,
  all_to_all,
  all_gatherv,
  gatherv,
  scatterv,
  all_to_allv,
  barrier,
  send,
  recv,
};

[[nodiscard]] constexpr std::string_view name(collective c) noexcept {
  constexpr std::string_view names[] = {"none",        "all_reduce",  "reduce",  "broadcast",
                                        "all_gather",  "gather",      "scatter", "reduce_scatter",
                                        "all_to_all",  "all_gatherv", "gatherv", "scatterv",
                                        "all_to_allv", "barrier",     "send",    "recv"};
  // A fingerprint another process wrote (a board, a store record) may hold any value.
  const auto i = static_cast<std::size_t>(c);
  return i < std::size(names) ? names[i] : "?";
}

/// Collective traffic and user send/recv are matched separately, like MPI's contexts.
enum class space : std::uint8_t { collective, p2p };

/// The part of a call every rank must agree on. For the v-variants `count` is a hash of the
/// per-rank counts, which every rank passes.
struct fingerprint {
  collective coll = collective::none;
  dtype type = dtype::uint8;
  op_kind op = op_kind::none;
  std::int32_t root = -1;
  std::uint64_t count = 0;

  friend bool operator==(const fingerprint&, const fingerprint&) = default;

  /// Packs everything but `count` into one word (for shared-memory boards and wire headers).
  [[nodiscard]] std::uint64_t packed_head() const noexcept {
    return static_cast<std::uint64_t>(coll) | (static_cast<std::uint64_t>(type) << 8) |
           (static_cast<std::uint64_t>(op) << 16) |
           (static_cast<std::uint64_t>(static_cast<std::uint32_t>(root)) << 32);
  }
  [[nodiscard]] static fingerprint unpack(std::uint64_t head, std::uint64_t count) noexcept {
    fingerprint f;
    f.coll = static_cast<collective>(head & 0xff);
    f.type = static_cast<dtype>((head >> 8) & 0xff);
    f.op = static_cast<op_kind>((head >> 16) & 0xff);
    f.root = static_cast<std::int32_t>(static_cast<std::uint32_t>(head >> 32));
    f.count = count;
    return f;
  }

  /// "all_reduce(float, count 1000, sum)" as printed in mismatch errors.
  [[nodiscard]] std::string describe() const {
    std::string s{name(coll)};
    s += "(";
    s += name(type);
    if (coll == collective::all_gatherv || coll == collective::gatherv ||
        coll == collective::scatterv || coll == collective::all_to_allv)
      s += ", counts hash " + std::to_string(count);
    else
      s += ", count " + std::to_string(count);
    if (op != op_kind::none) s += ", " + std::string{name(op)};
    if (root >= 0) s += ", root " + std::to_string(root);
    return s + ")";
  }
};

/// One call in flight on one rank.
struct call {
  fingerprint fp;
  std::uint64_t seq = 0;  ///< counts from 1 on each communicator
  reducer red;            ///< the element type's reduction (op none: copies only)
  std::size_t elem_size = 1;
  void* stream = nullptr;  ///< device transports: the cudaStream_t to order on (null: own)

  [[nodiscard]] std::string name_str() const { return std::string{name(fp.coll)}; }
  /// A numbered collective, whose fingerprint peers compare on their call boards. send and
  /// recv carry the last collective's number but are matched by tag: never compared.
  [[nodiscard]] bool compared() const noexcept {
    return seq != 0 && fp.coll != collective::send && fp.coll != collective::recv;
  }
};

/// FNV-1a over a sequence of counts: the fingerprint of a v-variant's count vector.
template <class Range>
[[nodiscard]] std::uint64_t hash_counts(const Range& counts) noexcept {
  std::uint64_t h = 1469598103934665603ull;
  for (auto c : counts) {
    auto v = static_cast<std::uint64_t>(c);
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return h;
}

}  // namespace tutti::inline v0::detail

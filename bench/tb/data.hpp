#pragma once
// What tutti-bench sends and what it must get back: buffer shapes per collective (nccl-tests'
// counts and bus-bandwidth factors), inputs whose results are small integers that every element
// type represents exactly, and the expected values. A result is checked bit for bit, so an
// element taken from the wrong rank or offset, or reduced twice, counts as #wrong.
//
// Inputs, for rank r of n and element index i (h(i) a hash of i):
//   sum   1 + b(i) + ((r+i) mod n)          -> n(1 + b(i)) + n(n-1)/2
//   avg   1 + b(i) + 2((r+i) mod n)         -> sum n(1 + b(i)) + n(n-1), avg 1 + b(i) + n - 1
//   min   1 + b(i) + ((r+i) mod n)          -> 1 + b(i)
//   max   same                              -> 1 + b(i) + n - 1
//   prod  2 on k(i) of the ranks, else 1    -> 2^k(i)
// with b(i) = h(i) mod (H+1) and k(i) = h(i) mod (K+1), H <= 31 and K <= n chosen per type
// and rank count so that every partial result is an integer the type holds exactly (bfloat16:
// up to 256, half: 2048, float: 2^24, int8: 127 ...). Moving collectives send
// 1 + ((37 src + 101 dst + h(i)) mod M), M = min(251, exact limit), naming source and place.

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cli.hpp"

namespace tutti_bench {

/// A collective's buffers at one size, in nccl-tests' terms: `count` is the per-rank parameter
/// count printed in the table, `bytes` the size column (max of send and receive bytes), which
/// is also the S of algbw = S / time.
struct shape {
  std::size_t count = 0;
  std::size_t in_elems = 0;   // out-of-place input (on the root only, for scatter)
  std::size_t out_elems = 0;  // out-of-place output (on the root only, for gather/reduce)
  std::size_t buf_elems = 0;  // the one buffer of the in-place form
  std::size_t bytes = 0;
  double bus_factor = 1.0;
};

/// nccl-tests' *GetCollByteCount and *GetBw: `size` is the per-rank buffer the user asked for.
[[nodiscard]] inline shape shape_of(collective c, std::size_t size, std::size_t elem, int ranks) {
  const auto n = static_cast<std::size_t>(ranks);
  const double dn = static_cast<double>(ranks);
  shape s;
  const std::size_t total = size / elem;
  // Per-rank blocks aligned to 16 bytes, as nccl-tests does for the gathering collectives.
  const std::size_t align_mask = elem < 16 ? ~(16 / elem - 1) : ~std::size_t{0};
  const std::size_t block = (total / n) & align_mask;
  switch (c) {
    case collective::all_reduce:
    case collective::broadcast:
    case collective::reduce:
      s.count = total;
      s.in_elems = s.out_elems = s.buf_elems = total;
      s.bytes = total * elem;
      s.bus_factor = c == collective::all_reduce ? 2.0 * (dn - 1.0) / dn : 1.0;
      return s;
    case collective::all_gather:
    case collective::gather:
      s.count = block;
      s.in_elems = block;
      s.out_elems = s.buf_elems = block * n;
      break;
    case collective::reduce_scatter:
    case collective::scatter:
      s.count = block;
      s.in_elems = s.buf_elems = block * n;
      s.out_elems = block;
      break;
    case collective::all_to_all:
      s.count = block;
      s.in_elems = s.out_elems = s.buf_elems = block * n;
      break;
  }
  s.bytes = block * n * elem;
  s.bus_factor = (dn - 1.0) / dn;
  return s;
}

namespace detail {

[[nodiscard]] constexpr std::uint32_t hash_index(std::uint64_t i) noexcept {
  auto h = i * 0x9E3779B97F4A7C15ULL;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ULL;
  h ^= h >> 32;
  return static_cast<std::uint32_t>(h);
}

/// The largest integer m such that T holds every integer in [0, m] exactly (capped at 2^53).
template <class T>
[[nodiscard]] constexpr std::uint64_t exact_limit() noexcept {
  if constexpr (std::is_integral_v<T>) {
    return std::min<std::uint64_t>(static_cast<std::uint64_t>(std::numeric_limits<T>::max()),
                                   std::uint64_t{1} << 53);
  } else {
    constexpr int digits = std::numeric_limits<T>::digits;  // mantissa bits + 1
    return std::uint64_t{1} << std::min(digits, 53);
  }
}

}  // namespace detail

/// The value ranges of one (type, op, ranks) combination; throws std::invalid_argument when
/// no input keeps the results exact (only sums and averages of narrow types over many ranks).
struct value_plan {
  std::uint64_t h_mod = 32;  // b(i) = h(i) mod h_mod
  std::uint64_t k_mod = 1;   // k(i) = h(i) mod k_mod (prod)
  std::uint64_t m = 251;     // moving collectives

  template <class T>
  [[nodiscard]] static value_plan make(redop op, int ranks, std::string_view type_name) {
    const std::uint64_t lim = detail::exact_limit<T>();
    const auto n = static_cast<std::uint64_t>(ranks);
    value_plan p;
    p.m = std::min<std::uint64_t>(251, lim);
    // The largest sum/avg/min/max partial result for a given H is `peak(H)`; find H <= 31.
    auto fits = [&](std::uint64_t h) {
      switch (op) {
        case redop::sum:
          return n * (1 + h) + n * (n - 1) / 2 <= lim;
        case redop::avg:
          return n * (1 + h) + n * (n - 1) <= lim;
        case redop::min:
        case redop::max:
          return 1 + h + (n - 1) <= lim;
        case redop::prod:
        case redop::none:
          return true;
      }
      return true;
    };
    if (op == redop::prod) {
      const auto bits = static_cast<std::uint64_t>(std::bit_width(lim) - 1);  // 2^bits <= lim
      p.k_mod = std::min(n, bits) + 1;
      return p;
    }
    if (!fits(0))
      throw std::invalid_argument(std::string("checking ") + std::string(name_of(op)) + " of " +
                                  std::string(type_name) + " over " + std::to_string(ranks) +
                                  " ranks would leave the type's exact integers; use -c 0 or a "
                                  "wider type");
    std::uint64_t h = 31;
    while (!fits(h)) --h;
    p.h_mod = h + 1;
    return p;
  }

  [[nodiscard]] std::uint64_t b(std::uint64_t i) const noexcept {
    return detail::hash_index(i) % h_mod;
  }
  [[nodiscard]] std::uint64_t k(std::uint64_t i) const noexcept {
    return detail::hash_index(i) % k_mod;
  }

  /// Rank r's input at (global) element i of a reducing collective, given rot = (r + i) mod n
  /// (a fill walks it rather than dividing per element).
  [[nodiscard]] std::uint64_t reduce_input(redop op, std::uint64_t rot,
                                           std::uint64_t i) const noexcept {
    switch (op) {
      case redop::prod:
        return rot < k(i) ? 2 : 1;
      case redop::avg:
        return 1 + b(i) + 2 * rot;
      default:
        return 1 + b(i) + rot;
    }
  }
  /// The reduction of every rank's reduce_input at element i.
  [[nodiscard]] std::uint64_t reduce_expected(redop op, int ranks, std::uint64_t i) const noexcept {
    const auto n = static_cast<std::uint64_t>(ranks);
    switch (op) {
      case redop::prod:
        return std::uint64_t{1} << k(i);
      case redop::min:
        return 1 + b(i);
      case redop::max:
        return 1 + b(i) + n - 1;
      case redop::avg:
        return 1 + b(i) + n - 1;
      default:
        return n * (1 + b(i)) + n * (n - 1) / 2;
    }
  }
  /// What rank `src` sends toward rank `dst` at element i of its block (moving collectives).
  [[nodiscard]] std::uint64_t moved(int src, int dst, std::uint64_t i) const noexcept {
    return 1 + (37 * static_cast<std::uint64_t>(src) + 101 * static_cast<std::uint64_t>(dst) +
                detail::hash_index(i)) %
                   m;
  }
};

template <class T>
[[nodiscard]] T make_value(std::uint64_t v) noexcept {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(v);
  else
    return T(static_cast<double>(v));
}

/// Bit-exact comparison: every expected value is an integer the type represents exactly.
template <class T>
[[nodiscard]] bool same_bits(const T& a, const T& b) noexcept {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

/// Fills and checks the buffers of one collective on one rank.
template <class T>
class dataset {
 public:
  dataset(collective c, redop op, int rank, int ranks, int root, const value_plan& plan)
      : c_(c), op_(op), rank_(rank), n_(ranks), root_(root), plan_(plan) {
    for (std::uint64_t v = 0; v < small_.size(); ++v) small_[v] = make_value<T>(v);
  }

  [[nodiscard]] redop op() const noexcept { return op_; }
  [[nodiscard]] int root() const noexcept { return root_; }

  /// The out-of-place input (`count` per-rank elements, shaped by `s`).
  void fill_input(T* in, const shape& s) const {
    const auto n = static_cast<std::size_t>(n_);
    switch (c_) {
      case collective::all_reduce:
      case collective::reduce:
      case collective::reduce_scatter: {  // element i of the whole input, blocks included
        std::uint64_t rot = static_cast<std::uint64_t>(rank_) % n;
        for (std::size_t i = 0; i < s.in_elems; ++i, rot = rot + 1 == n ? 0 : rot + 1)
          in[i] = value(plan_.reduce_input(op_, rot, i));
        return;
      }
      case collective::broadcast:
        for (std::size_t i = 0; i < s.in_elems; ++i)
          in[i] = rank_ == root_ ? value(plan_.moved(root_, 0, i)) : T{};
        return;
      case collective::all_gather:
      case collective::gather:
        for (std::size_t i = 0; i < s.in_elems; ++i) in[i] = value(plan_.moved(rank_, 0, i));
        return;
      case collective::scatter:
        for (std::size_t j = 0; j < n; ++j)
          for (std::size_t i = 0; i < s.count; ++i)
            in[j * s.count + i] =
                rank_ == root_ ? value(plan_.moved(root_, static_cast<int>(j), i)) : T{};
        return;
      case collective::all_to_all:
        for (std::size_t j = 0; j < n; ++j)
          for (std::size_t i = 0; i < s.count; ++i)
            in[j * s.count + i] = value(plan_.moved(rank_, static_cast<int>(j), i));
        return;
    }
  }

  /// The in-place buffer before the call: this rank's input where the in-place form reads it,
  /// zeros (no expected value is 0) where it only writes.
  void fill_in_place(T* buf, const shape& s) const {
    std::fill_n(buf, s.buf_elems, T{});
    if (c_ == collective::all_gather) {
      fill_input(buf + static_cast<std::size_t>(rank_) * s.count, s);
      return;
    }
    fill_input(buf, s);
  }

  /// Counts the wrong elements of the result this rank holds. `out` is the output buffer
  /// (out-of-place) or the one buffer (in-place).
  [[nodiscard]] std::uint64_t count_wrong(const T* out, const shape& s, placement p) const {
    const auto n = static_cast<std::size_t>(n_);
    const auto r = static_cast<std::size_t>(rank_);
    std::uint64_t wrong = 0;
    auto expect = [&](const T& got, std::uint64_t want) {
      if (!same_bits(got, value(want))) ++wrong;
    };
    switch (c_) {
      case collective::all_reduce:
        for (std::size_t i = 0; i < s.count; ++i) expect(out[i], plan_.reduce_expected(op_, n_, i));
        break;
      case collective::reduce:
        if (rank_ == root_)
          for (std::size_t i = 0; i < s.count; ++i)
            expect(out[i], plan_.reduce_expected(op_, n_, i));
        break;
      case collective::reduce_scatter: {
        const T* mine = p == placement::in_place ? out + r * s.count : out;
        for (std::size_t i = 0; i < s.count; ++i)
          expect(mine[i], plan_.reduce_expected(op_, n_, r * s.count + i));
        break;
      }
      case collective::broadcast:
        for (std::size_t i = 0; i < s.count; ++i) expect(out[i], plan_.moved(root_, 0, i));
        break;
      case collective::all_gather:
      case collective::gather:
        if (c_ == collective::gather && rank_ != root_) break;
        for (std::size_t j = 0; j < n; ++j)
          for (std::size_t i = 0; i < s.count; ++i)
            expect(out[j * s.count + i], plan_.moved(static_cast<int>(j), 0, i));
        break;
      case collective::scatter:
        for (std::size_t i = 0; i < s.count; ++i) expect(out[i], plan_.moved(root_, rank_, i));
        break;
      case collective::all_to_all:
        for (std::size_t j = 0; j < n; ++j)
          for (std::size_t i = 0; i < s.count; ++i)
            expect(out[j * s.count + i], plan_.moved(static_cast<int>(j), rank_, i));
        break;
    }
    return wrong;
  }

 private:
  /// make_value<T>(v), from a table for the small values nearly every element has (moved
  /// values are below 252, sums below n * 32 + n(n - 1) / 2): 16-bit floats' conversions from
  /// double took 8% of a check's time.
  [[nodiscard]] T value(std::uint64_t v) const noexcept {
    return v < small_.size() ? small_[v] : make_value<T>(v);
  }

  collective c_;
  redop op_;
  int rank_;
  int n_;
  int root_;
  value_plan plan_;
  std::array<T, 1024> small_{};
};

}  // namespace tutti_bench

#pragma once
/// \file
/// tutti::direct: one-step schedules. On transports with a shared segment (inproc, shm):
/// copy in, reduce a 1/p slice (or all of it, when small), copy out, in rounds that fit the
/// segment — for all_reduce, reduce, broadcast, all_gather, reduce_scatter, gather, scatter,
/// all_to_all and barrier. On any transport: linear gather/scatter, pairwise all-to-all and
/// the v-variants.
///
/// Rounds alternate the two halves of each slot, so no round needs a trailing barrier: a rank
/// can only rewrite a half after the next round's barrier, which its peers enter only once
/// they finished reading it. The segment barrier also compares every rank's fingerprint.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "tutti/detail/call.hpp"
#include "tutti/detail/cost.hpp"
#include "tutti/detail/schedules.hpp"
#include "tutti/transport/concepts.hpp"

namespace tutti::inline v0 {

struct direct {
  static constexpr const char* name = "direct";
  /// Below this many bytes per round every rank reduces the whole round itself (one barrier
  /// instead of two).
  static constexpr std::size_t small_round = std::size_t{16} << 10;

  /// Predicted microseconds of collective `k` (nullopt: not implemented here). One segment
  /// barrier (about α: each rank arrives once and waits once) per round of half a slot, two
  /// when a round is large enough to split its reduction into slices.
  [[nodiscard]] static std::optional<double> cost(detail::collective k,
                                                  const detail::cost_inputs& in) noexcept {
    const double n = in.n, p = in.p, a = in.a, b = in.b, g = in.g, bs = in.bs;
    const double rounds = in.rounds(n);
    const bool small = n <= double(small_round);
    switch (k) {
      case detail::collective::all_reduce:
      case detail::collective::reduce:
        return rounds * (small ? 1 : 2) * a + 2 * n * bs + (small ? p - 1 : in.frac) * n * g;
      case detail::collective::broadcast:
        return rounds * a + 2 * n * bs;
      case detail::collective::all_gather:
        return rounds * a + n * bs;
      case detail::collective::gather:
      case detail::collective::scatter:
        return in.segment ? rounds * a + n * bs : (p - 1) * a / 2 + in.frac * n * b;
      case detail::collective::reduce_scatter:
        return rounds * a + n * bs + n * g;
      case detail::collective::all_to_all:
        return in.segment ? std::max(1.0, std::ceil(n / in.half_slot() * p)) * a + 2 * n * bs
                          : (p - 1) * a + n * b;
      case detail::collective::all_gatherv:
        return (p - 1) * a + in.frac * n * b * 1.1;
      case detail::collective::barrier:
        return a;  // one segment barrier, where there is a segment
      default:
        return std::nullopt;
    }
  }

  template <class Ctx>
    requires shared_segment<typename Ctx::transport_type>
  static void all_reduce(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    reduce_rounds(c, in, out, count, -1);
  }

  template <class Ctx>
    requires shared_segment<typename Ctx::transport_type>
  static void reduce(Ctx& c, const std::byte* in, std::byte* out, std::size_t count, int root) {
    reduce_rounds(c, in, out, count, root);
  }

  template <class Ctx>
    requires shared_segment<typename Ctx::transport_type>
  static void broadcast(Ctx& c, std::byte* buf, std::size_t count, int root) {
    auto& t = c.transport();
    run_rounds(
        c, count * c.elem(), half_bytes(c),
        [&](std::size_t at, std::size_t n, std::size_t h) {
          if (c.rank() == root) detail::copy_bytes(t.segment(root) + h, buf + at, n);
        },
        [&](std::size_t at, std::size_t n, std::size_t h) {
          if (c.rank() != root) detail::copy_bytes(buf + at, t.segment(root) + h, n);
        });
  }

  template <class Ctx>
    requires shared_segment<typename Ctx::transport_type>
  static void all_gather(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    auto& t = c.transport();
    const std::size_t bytes = count * c.elem();
    run_rounds(
        c, bytes, half_bytes(c),
        [&](std::size_t at, std::size_t n, std::size_t h) {
          detail::copy_bytes(t.segment(c.rank()) + h, in + at, n);
        },
        [&](std::size_t at, std::size_t n, std::size_t h) {
          for (int q = 0; q < c.size(); ++q)
            detail::copy_bytes(out + static_cast<std::size_t>(q) * bytes + at, t.segment(q) + h, n);
        });
  }

  /// Each round takes the same element range of every block; rank r reduces block r's range.
  template <class Ctx>
    requires shared_segment<typename Ctx::transport_type>
  static void reduce_scatter(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    const std::size_t bytes = count * c.elem();
    const auto r = static_cast<std::size_t>(c.rank());
    run_rounds(
        c, bytes, block_bytes(c),
        [&](std::size_t at, std::size_t n, std::size_t h) {
          copy_blocks_in(c, in, bytes, at, n, h);
        },
        [&](std::size_t at, std::size_t n, std::size_t h) {
          fold_slots(c, out + at, h + r * n, n);
        });
  }

  /// Shared segment: every rank copies its block in, the root copies all blocks out.
  /// Elsewhere: the root receives from every rank (linear).
  template <class Ctx>
  static void gather(Ctx& c, const std::byte* in, std::byte* out, std::size_t count, int root) {
    if constexpr (shared_segment<typename Ctx::transport_type>) {
      auto& t = c.transport();
      const int r = c.rank();
      const std::size_t bytes = count * c.elem();
      run_rounds(
          c, bytes, half_bytes(c),
          [&](std::size_t at, std::size_t n, std::size_t h) {
            if (r != root) detail::copy_bytes(t.segment(r) + h, in + at, n);
          },
          [&](std::size_t at, std::size_t n, std::size_t h) {
            if (r == root)
              for (int q = 0; q < c.size(); ++q)
                detail::copy_bytes(out + static_cast<std::size_t>(q) * bytes + at,
                                   q == r ? in + at : t.segment(q) + h, n);
          });
    } else {
      detail::linear_gatherv(c, in, out, detail::equal_offsets(count * c.elem(), c.size()), root);
    }
  }
  /// Shared segment: the root copies every rank's block in, each rank copies its own out.
  /// Elsewhere: the root sends to every rank (linear).
  template <class Ctx>
  static void scatter(Ctx& c, const std::byte* in, std::byte* out, std::size_t count, int root) {
    if constexpr (shared_segment<typename Ctx::transport_type>) {
      auto& t = c.transport();
      const auto p = static_cast<std::size_t>(c.size()), r = static_cast<std::size_t>(c.rank());
      const std::size_t bytes = count * c.elem();
      run_rounds(
          c, bytes, block_bytes(c),
          [&](std::size_t at, std::size_t n, std::size_t h) {
            if (c.rank() == root)
              for (std::size_t q = 0; q < p; ++q)
                detail::copy_bytes(t.segment(root) + h + q * n, in + q * bytes + at, n);
          },
          [&](std::size_t at, std::size_t n, std::size_t h) {
            detail::copy_bytes(out + at, t.segment(root) + h + r * n, n);
          });
    } else {
      detail::linear_scatterv(c, in, out, detail::equal_offsets(count * c.elem(), c.size()), root);
    }
  }
  template <class Ctx>
  static void gatherv(Ctx& c, const std::byte* in, std::byte* out,
                      std::span<const std::size_t> counts, int root) {
    detail::linear_gatherv(c, in, out, detail::count_offsets(c, counts), root);
  }
  template <class Ctx>
  static void scatterv(Ctx& c, const std::byte* in, std::byte* out,
                       std::span<const std::size_t> counts, int root) {
    detail::linear_scatterv(c, in, out, detail::count_offsets(c, counts), root);
  }
  /// Shared segment: each rank copies its p outgoing pieces into its slot, then takes its
  /// piece from every slot (in place is safe: a round reads and writes the same range).
  /// Elsewhere: pairwise exchange, p - 1 steps.
  template <class Ctx>
  static void all_to_all(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    if constexpr (shared_segment<typename Ctx::transport_type>) {
      auto& t = c.transport();
      const auto r = static_cast<std::size_t>(c.rank());
      const std::size_t bytes = count * c.elem();
      run_rounds(
          c, bytes, block_bytes(c),
          [&](std::size_t at, std::size_t n, std::size_t h) {
            copy_blocks_in(c, in, bytes, at, n, h);
          },
          [&](std::size_t at, std::size_t n, std::size_t h) {
            for (int q = 0; q < c.size(); ++q)
              detail::copy_bytes(out + static_cast<std::size_t>(q) * bytes + at,
                                 t.segment(q) + h + r * n, n);
          });
    } else {
      const auto off = detail::equal_offsets(count * c.elem(), c.size());
      detail::pairwise_all_to_allv(c, in, off, out, off);
    }
  }
  template <class Ctx>
  static void all_to_allv(Ctx& c, const std::byte* in, std::span<const std::size_t> sc,
                          std::byte* out, std::span<const std::size_t> rc) {
    detail::pairwise_all_to_allv(c, in, detail::count_offsets(c, sc), out,
                                 detail::count_offsets(c, rc));
  }
  /// Every rank sends its block straight to every other rank (pairwise, p - 1 steps).
  template <class Ctx>
  static void all_gatherv(Ctx& c, const std::byte* in, std::byte* out,
                          std::span<const std::size_t> counts) {
    const int p = c.size(), r = c.rank();
    const auto off = detail::count_offsets(c, counts);
    const auto me = static_cast<std::size_t>(r);
    c.copy(out + off[me], in, off[me + 1] - off[me]);
    for (int s = 1; s < p; ++s) {
      const auto from = static_cast<std::size_t>(detail::mod(r - s, p));
      c.sendrecv(detail::mod(r + s, p), in, off[me + 1] - off[me], static_cast<int>(from),
                 out + off[from], off[from + 1] - off[from]);
    }
  }

  template <class Ctx>
  static void barrier(Ctx& c) {
    if constexpr (shared_segment<typename Ctx::transport_type>)
      c.transport().segment_barrier(c.info(), c.deadline());
    else
      detail::dissemination_barrier(c);
  }

 private:
  /// Runs `bytes` in rounds of at most `per` bytes. Each round uses the next half of every
  /// slot (at offset `h`): `copy_in(at, n, h)` puts this rank's part of bytes [at, at + n) in,
  /// the segment barrier waits for every rank's, `copy_out(at, n, h)` takes the results out.
  /// Always one round at least, so every rank passes the barrier (and its fingerprint check)
  /// even for zero bytes.
  template <class Ctx, class CopyIn, class CopyOut>
  static void run_rounds(Ctx& c, std::size_t bytes, std::size_t per, CopyIn&& copy_in,
                         CopyOut&& copy_out) {
    auto& t = c.transport();
    std::size_t at = 0;
    do {
      const std::size_t n = std::min(per, bytes - at);
      const std::size_t h = c.next_segment_half() * t.segment_bytes() / 2;
      copy_in(at, n, h);
      t.segment_barrier(c.info(), c.deadline());
      copy_out(at, n, h);
      at += n;
    } while (at < bytes);
  }

  /// Bytes of one round: half a slot, in whole elements.
  template <class Ctx>
  static std::size_t half_bytes(Ctx& c) {
    const std::size_t half = c.transport().segment_bytes() / 2;
    return std::max<std::size_t>(c.elem(), half / c.elem() * c.elem());
  }
  /// Bytes per block of one round when a round carries p blocks (half a slot shared by p).
  template <class Ctx>
  static std::size_t block_bytes(Ctx& c) {
    const auto p = static_cast<std::size_t>(c.size());
    return std::max<std::size_t>(1, half_bytes(c) / (p * c.elem())) * c.elem();
  }
  /// Copies bytes [at, at + n) of each of the p blocks of `in` (`bytes` each) into this
  /// rank's slot half `h`, block q at q * n.
  template <class Ctx>
  static void copy_blocks_in(Ctx& c, const std::byte* in, std::size_t bytes, std::size_t at,
                             std::size_t n, std::size_t h) {
    std::byte* mine = c.transport().segment(c.rank()) + h;
    for (std::size_t q = 0; q < static_cast<std::size_t>(c.size()); ++q)
      detail::copy_bytes(mine + q * n, in + q * bytes + at, n);
  }

  /// dst = slot[0][at..] op slot[1][at..] op ... in rank order (the same order on every rank,
  /// so every rank that computes an element gets the same bits).
  template <class Ctx>
  static void fold_slots(Ctx& c, std::byte* dst, std::size_t at, std::size_t n) {
    auto& t = c.transport();
    if (c.size() == 1) {
      detail::copy_bytes(dst, t.segment(0) + at, n);
      return;
    }
    c.reduce(dst, t.segment(0) + at, t.segment(1) + at, n);
    for (int q = 2; q < c.size(); ++q) c.reduce(dst, dst, t.segment(q) + at, n);
  }

  /// Small all_reduce in flagged cache lines: publish, then fold every rank's contribution in
  /// rank order (the same bits on every rank).
  template <class Ctx>
  static void all_reduce_lines(Ctx& c, const std::byte* in, std::byte* out, std::size_t bytes) {
    auto& t = c.transport();
    const int p = c.size(), r = c.rank();
    std::byte* mine = c.scratch(2 * bytes + 1);  // a copy of `in`: `out` may alias it
    std::byte* theirs = mine + bytes;
    detail::copy_bytes(mine, in, bytes);
    t.lines_put(c.info(), mine, bytes);
    auto get = [&](int q) -> const std::byte* {
      if (q == r) return mine;
      t.lines_get(q, c.info(), theirs, bytes, c.deadline());
      return theirs;
    };
    detail::copy_bytes(out, get(0), bytes);
    for (int q = 1; q < p; ++q) c.reduce(out, out, get(q), bytes);
  }

  /// all_reduce (root < 0) or reduce to root, in rounds of at most half a slot per rank.
  template <class Ctx>
  static void reduce_rounds(Ctx& c, const std::byte* in, std::byte* out, std::size_t count,
                            int root) {
    auto& t = c.transport();
    if constexpr (line_exchange<typename Ctx::transport_type>) {
      if (root < 0 && count * c.elem() <= Ctx::transport_type::line_capacity()) {
        all_reduce_lines(c, in, out, count * c.elem());
        return;
      }
    }
    const int p = c.size(), r = c.rank();
    const std::size_t e = c.elem();
    const bool gets_result = root < 0 || r == root;
    run_rounds(
        c, count * e, half_bytes(c),
        [&](std::size_t at, std::size_t n, std::size_t h) {
          detail::copy_bytes(t.segment(r) + h, in + at, n);
        },
        [&](std::size_t at, std::size_t n, std::size_t h) {
          if (n <= small_round) {
            if (gets_result) fold_slots(c, out + at, h, n);
            return;
          }
          // Rank q reduces slice q (straight into its result, when it gets one) and puts it in
          // its own slot, where nobody else reads that slice; then everyone copies the
          // finished slices out.
          const detail::blocks sl{n / e, static_cast<std::size_t>(p)};
          const auto ur = static_cast<std::size_t>(r);
          const std::size_t mo = h + sl.offset(ur) * e;
          const std::size_t ml = sl.length(ur) * e;
          if (ml != 0) {
            std::byte* dst = gets_result ? out + at + sl.offset(ur) * e : c.scratch(ml);
            fold_slots(c, dst, mo, ml);
            detail::copy_bytes(t.segment(r) + mo, dst, ml);
          }
          t.segment_barrier(c.info(), c.deadline());
          if (gets_result)
            for (int q = 0; q < p; ++q) {
              if (q == r) continue;
              const auto uq = static_cast<std::size_t>(q);
              detail::copy_bytes(out + at + sl.offset(uq) * e, t.segment(q) + h + sl.offset(uq) * e,
                                 sl.length(uq) * e);
            }
        });
  }
};

}  // namespace tutti::inline v0

#pragma once
/// \file
/// Byte-level schedules several policies share: ring, binomial tree, linear, pairwise and
/// dissemination patterns. Offsets and lengths are in bytes unless named otherwise.

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "tutti/detail/blocks.hpp"

namespace tutti::inline v0::detail {

inline int mod(int a, int p) noexcept { return ((a % p) + p) % p; }

/// One step of a ring schedule: block `send` goes to the right neighbour while block `recv`
/// comes from the left one, reduced into place (`reduce`) or copied.
struct ring_step {
  std::size_t send, recv;
  bool reduce;
};

/// Appends the p - 1 steps of a ring reduce-scatter (`reduce`: afterwards this rank's block r
/// holds the reduction of everyone's block r) or of a ring all-gather (this rank's block is in
/// place; each rank sends what it last got).
inline void add_ring_pass(std::vector<ring_step>& steps, int r, int p, bool reduce) {
  const auto at = [p](int b) { return static_cast<std::size_t>(mod(b, p)); };
  for (int s = 0; s < p - 1; ++s)
    steps.push_back(reduce ? ring_step{at(r - s - 1), at(r - s - 2), true}
                           : ring_step{at(r - s), at(r - s - 1), false});
}

/// Runs ring `steps` on `buf`, whose p blocks start at off[0..p]. Each step's receive is
/// posted one step early, before the previous step's send goes, where the context says that
/// pays (context::ring_post_ahead): the left neighbour's send then finds it posted, where it
/// would otherwise wait for the receive's recv-ready notice (Gloo's TCP pairs). Across hosts
/// that notice queues behind the other ring flow's data on the same link direction: on 2 x 2
/// ranks over shaped links the two flows crossing hosts took turns, each step twice its wire
/// time (bench/RESULTS.md, "Ring's receives posted a step early across shaped hosts").
/// An early receive never lands on bytes in use: step s + 1 receives block r - s - 2 (r - s - 3
/// in the reduce-scatter) while step s sends block r - s (r - s - 1), another block for p > 2;
/// with p = 2 the all-gather's one receive lands on the block the reduce-scatter's one step
/// sent, which the left neighbour answers only once that message has arrived.
template <class Ctx>
void run_ring(Ctx& c, std::byte* buf, std::span<const std::size_t> off,
              std::span<const ring_step> steps) {
  const int p = c.size(), r = c.rank();
  const int right = mod(r + 1, p), left = mod(r - 1, p);
  const auto len = [&](std::size_t b) { return off[b + 1] - off[b]; };
  const auto post = [&](const ring_step& st) {
    return c.post_receive(left, buf + off[st.recv], len(st.recv), st.reduce);
  };
  std::optional<typename Ctx::request> ahead;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const ring_step& st = steps[i];
    auto rr = ahead ? std::move(*ahead) : post(st);
    ahead.reset();
    if (i + 1 < steps.size() &&
        c.ring_post_ahead(left, len(steps[i + 1].recv), steps[i + 1].reduce))
      ahead.emplace(post(steps[i + 1]));
    auto sr = c.isend(right, buf + off[st.send], len(st.send));
    c.wait(rr);
    c.wait(sr);
    c.finish_receive(buf + off[st.recv], len(st.recv), st.reduce);
  }
}

/// Ring all-gather of variable blocks: block r lives at out + off[r] (off has p + 1 entries)
/// and this rank's block is already in place. p - 1 steps.
template <class Ctx>
void ring_all_gatherv(Ctx& c, std::byte* out, std::span<const std::size_t> off) {
  std::vector<ring_step> steps;
  add_ring_pass(steps, c.rank(), c.size(), false);
  run_ring(c, out, off, steps);
}

/// Ring reduce-scatter in place on `buf`, whose p blocks start at off[0..p]: afterwards this
/// rank's block r holds the reduction of everyone's block r.
template <class Ctx>
void ring_reduce_scatter(Ctx& c, std::byte* buf, std::span<const std::size_t> off) {
  std::vector<ring_step> steps;
  add_ring_pass(steps, c.rank(), c.size(), true);
  run_ring(c, buf, off, steps);
}

/// Ring all-reduce in place on `buf`: the reduce-scatter and the all-gather as one run of
/// 2(p - 1) steps, so the all-gather's first receive is posted early too.
template <class Ctx>
void ring_all_reduce(Ctx& c, std::byte* buf, std::span<const std::size_t> off) {
  std::vector<ring_step> steps;
  add_ring_pass(steps, c.rank(), c.size(), true);
  add_ring_pass(steps, c.rank(), c.size(), false);
  run_ring(c, buf, off, steps);
}

/// Byte offsets of `count` elements split evenly into p blocks.
template <class Ctx>
std::vector<std::size_t> even_offsets(const Ctx& c, std::size_t count, int parts) {
  const blocks b{count, static_cast<std::size_t>(parts)};
  std::vector<std::size_t> off(static_cast<std::size_t>(parts) + 1);
  for (std::size_t i = 0; i <= static_cast<std::size_t>(parts); ++i)
    off[i] = (i == static_cast<std::size_t>(parts) ? count : b.offset(i)) * c.elem();
  return off;
}

/// Byte offsets of p equal blocks of `bytes` each.
inline std::vector<std::size_t> equal_offsets(std::size_t bytes, int p) {
  std::vector<std::size_t> off(static_cast<std::size_t>(p) + 1);
  for (std::size_t i = 0; i < off.size(); ++i) off[i] = i * bytes;
  return off;
}

/// Byte offsets of blocks of `counts[i]` elements.
template <class Ctx>
std::vector<std::size_t> count_offsets(const Ctx& c, std::span<const std::size_t> counts) {
  std::vector<std::size_t> off(counts.size() + 1, 0);
  for (std::size_t i = 0; i < counts.size(); ++i) off[i + 1] = off[i] + counts[i] * c.elem();
  return off;
}

/// Binomial-tree broadcast of `bytes` at `buf` from `root`: lg p rounds.
template <class Ctx>
void binomial_broadcast(Ctx& c, std::byte* buf, std::size_t bytes, int root) {
  const int p = c.size(), v = mod(c.rank() - root, p);
  int mask = 1;
  while (mask < p) {
    if (v & mask) {
      c.recv(mod(v - mask + root, p), buf, bytes);
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < p) c.send(mod(v + mask + root, p), buf, bytes);
}

/// Binomial-tree reduction to `root`: `acc` holds this rank's contribution and, on the root,
/// ends holding the result. Non-roots' `acc` is clobbered.
template <class Ctx>
void binomial_reduce(Ctx& c, std::byte* acc, std::size_t bytes, int root) {
  const int p = c.size(), v = mod(c.rank() - root, p);
  for (int mask = 1; mask < p; mask <<= 1) {
    if (v & mask) {
      c.send(mod(v - mask + root, p), acc, bytes);
      return;
    }
    if (v + mask < p) c.recv_reduce(mod(v + mask + root, p), acc, bytes);
  }
}

/// Binomial gather of equal blocks of `bytes` to `root`'s `out` (p blocks, rank order).
template <class Ctx>
void binomial_gather(Ctx& c, const std::byte* in, std::byte* out, std::size_t bytes, int root) {
  const int p = c.size(), v = mod(c.rank() - root, p);
  // tmp holds the blocks of virtual ranks v, v+1, ... in that order.
  std::byte* tmp = c.scratch(bytes * static_cast<std::size_t>(p));
  c.copy(tmp, in, bytes);
  std::size_t held = 1;
  for (int mask = 1; mask < p; mask <<= 1) {
    if (v & mask) {
      c.send(mod(v - mask + root, p), tmp, held * bytes);
      return;
    }
    if (v + mask < p) {
      const auto child = static_cast<std::size_t>(std::min(mask, p - (v + mask)));
      c.recv(mod(v + mask + root, p), tmp + held * bytes, child * bytes);
      held += child;
    }
  }
  for (int i = 0; i < p; ++i)
    c.copy(out + static_cast<std::size_t>(mod(i + root, p)) * bytes,
           tmp + static_cast<std::size_t>(i) * bytes, bytes);
}

/// Binomial scatter of equal blocks of `bytes` from `root`'s `in` (p blocks, rank order).
template <class Ctx>
void binomial_scatter(Ctx& c, const std::byte* in, std::byte* out, std::size_t bytes, int root) {
  const int p = c.size(), v = mod(c.rank() - root, p);
  std::byte* tmp = c.scratch(bytes * static_cast<std::size_t>(p));
  int mask = 1;
  if (v == 0) {
    for (int i = 0; i < p; ++i)
      c.copy(tmp + static_cast<std::size_t>(i) * bytes,
             in + static_cast<std::size_t>(mod(i + root, p)) * bytes, bytes);
    while (mask < p) mask <<= 1;
  } else {
    while (!(v & mask)) mask <<= 1;
    const auto mine = static_cast<std::size_t>(std::min(mask, p - v));
    c.recv(mod(v - mask + root, p), tmp, mine * bytes);
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < p) {
      const auto child = static_cast<std::size_t>(std::min(mask, p - (v + mask)));
      c.send(mod(v + mask + root, p), tmp + static_cast<std::size_t>(mask) * bytes, child * bytes);
    }
  c.copy(out, tmp, bytes);
}

/// Linear gather of blocks (byte offsets `off` into root's `out`): every rank sends to root,
/// which posts all receives at once.
template <class Ctx>
void linear_gatherv(Ctx& c, const std::byte* in, std::byte* out, std::span<const std::size_t> off,
                    int root) {
  const int p = c.size(), r = c.rank();
  const auto me = static_cast<std::size_t>(r);
  if (r != root) {
    c.send(root, in, off[me + 1] - off[me]);
    return;
  }
  std::vector<typename Ctx::request> reqs;
  reqs.reserve(static_cast<std::size_t>(p));
  for (int q = 0; q < p; ++q) {
    const auto i = static_cast<std::size_t>(q);
    if (q != r) reqs.push_back(c.irecv(q, out + off[i], off[i + 1] - off[i]));
  }
  c.copy(out + off[me], in, off[me + 1] - off[me]);
  for (auto& q : reqs) c.wait(q);
}

/// Linear scatter of blocks (byte offsets `off` into root's `in`).
template <class Ctx>
void linear_scatterv(Ctx& c, const std::byte* in, std::byte* out, std::span<const std::size_t> off,
                     int root) {
  const int p = c.size(), r = c.rank();
  const auto me = static_cast<std::size_t>(r);
  if (r != root) {
    c.recv(root, out, off[me + 1] - off[me]);
    return;
  }
  std::vector<typename Ctx::request> reqs;
  reqs.reserve(static_cast<std::size_t>(p));
  for (int q = 0; q < p; ++q) {
    const auto i = static_cast<std::size_t>(q);
    if (q != r) reqs.push_back(c.isend(q, in + off[i], off[i + 1] - off[i]));
  }
  c.copy(out, in + off[me], off[me + 1] - off[me]);
  for (auto& q : reqs) c.wait(q);
}

/// Pairwise exchange all-to-all: step s sends to r + s and receives from r - s. `in` may
/// equal `out` (the input is staged first).
template <class Ctx>
void pairwise_all_to_allv(Ctx& c, const std::byte* in, std::span<const std::size_t> soff,
                          std::byte* out, std::span<const std::size_t> roff) {
  const int p = c.size(), r = c.rank();
  if (in == out) {
    std::byte* tmp = c.scratch(soff.back());
    c.copy(tmp, in, soff.back());
    in = tmp;
  }
  const auto me = static_cast<std::size_t>(r);
  c.copy(out + roff[me], in + soff[me], soff[me + 1] - soff[me]);
  for (int s = 1; s < p; ++s) {
    const auto to = static_cast<std::size_t>(mod(r + s, p));
    const auto from = static_cast<std::size_t>(mod(r - s, p));
    c.sendrecv(static_cast<int>(to), in + soff[to], soff[to + 1] - soff[to], static_cast<int>(from),
               out + roff[from], roff[from + 1] - roff[from]);
  }
}

/// Bruck all-gather of equal blocks of `bytes` (p blocks, rank order, into `out`): ceil(lg p)
/// steps for any p.
template <class Ctx>
void bruck_all_gather(Ctx& c, const std::byte* in, std::byte* out, std::size_t bytes) {
  const int p = c.size(), r = c.rank();
  const auto up = static_cast<std::size_t>(p);
  // tmp block i holds rank (r + i)'s data.
  std::byte* tmp = c.scratch(bytes * up);
  c.copy(tmp, in, bytes);
  for (int k = 1; k < p; k <<= 1) {
    const auto n = static_cast<std::size_t>(std::min(k, p - k));
    c.sendrecv(mod(r - k, p), tmp, n * bytes, mod(r + k, p),
               tmp + static_cast<std::size_t>(k) * bytes, n * bytes);
  }
  for (int i = 0; i < p; ++i)
    c.copy(out + static_cast<std::size_t>(mod(r + i, p)) * bytes,
           tmp + static_cast<std::size_t>(i) * bytes, bytes);
}

/// Dissemination barrier: ceil(lg p) rounds of empty messages.
template <class Ctx>
void dissemination_barrier(Ctx& c) {
  const int p = c.size(), r = c.rank();
  for (int k = 1; k < p; k <<= 1) c.sendrecv(mod(r + k, p), nullptr, 0, mod(r - k, p), nullptr, 0);
}

}  // namespace tutti::inline v0::detail

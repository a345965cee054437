#pragma once
/// \file
/// Recursive doubling and halving over the largest power of two pof2 <= p. The first
/// 2 * (p - pof2) ranks pair up (even r folds into r + 1) so pof2 "new ranks" remain; new rank
/// g is old rank 2g + 1 for g < rem and g + rem otherwise.

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "tutti/detail/schedules.hpp"

namespace tutti::inline v0::detail {

struct fold {
  int pof2 = 1;
  int rem = 0;
  int newrank = -1;  // -1: this rank folded its data into its neighbour and sits out

  explicit fold(int p, int r) {
    while (pof2 * 2 <= p) pof2 *= 2;
    rem = p - pof2;
    if (r < 2 * rem)
      newrank = (r % 2 == 0) ? -1 : r / 2;
    else
      newrank = r - rem;
  }
  [[nodiscard]] int old_rank(int g) const noexcept { return g < rem ? 2 * g + 1 : g + rem; }
};

/// One step of a recursive halving: this rank kept groups [keep_lo, keep_hi) and sent
/// [send_lo, send_hi) to `partner` (an old rank), which kept those.
struct halving_step {
  int partner = 0;
  int keep_lo = 0, keep_hi = 0;
  int send_lo = 0, send_hi = 0;
};

/// Which partner a recursive halving meets first.
enum class halving_order {
  farthest_first,  ///< new rank g ends with group g (reduce_scatter's order)
  /// Distance doubling, as Gloo's halving-doubling: the first and largest exchange is between
  /// neighbouring ranks, which launchers place on one host, and each step that reaches further
  /// carries half as much, so across hosts a rank sends n/L·(1 - 1/H) rather than n/2 first
  /// (L ranks per host, H hosts). Each rank ends with one group, not group g.
  nearest_first,
};

/// Recursive halving reduce-scatter in place on `buf` over pof2 groups of bytes
/// [goff[g], goff[g+1]), in `order`: each rank ends with one group fully reduced. Returns the
/// steps, which `mirror_all_gather` undoes. Only active ranks call it.
///
/// With `gathers`, each step also posts the receive of the all-gather step that mirrors it
/// where the context says it pays (context::post_ahead; else the entry stays empty and the
/// all-gather step is a plain exchange), into the range it sends, which this rank no longer
/// touches afterwards; the partner fills it only after it has all of this rank's
/// reduce-scatter. Over a transport whose send waits for the receiver to post (Gloo's TCP
/// pairs), such an all-gather step costs one crossing instead of an exchange's two
/// (bench/RESULTS.md).
template <class Ctx>
std::vector<halving_step> halving_reduce_scatter(
    Ctx& c, std::byte* buf, std::span<const std::size_t> goff, const fold& f, halving_order order,
    std::vector<std::optional<typename Ctx::request>>* gathers = nullptr) {
  std::vector<halving_step> steps;
  int lo = 0, hi = f.pof2;
  const bool nearest = order == halving_order::nearest_first;
  for (int mask = nearest ? 1 : f.pof2 / 2; mask >= 1 && mask < f.pof2;
       mask = nearest ? mask * 2 : mask / 2) {
    // Partners differ only in this bit, so they hold the same range [lo, hi) here.
    const int mid = lo + (hi - lo) / 2;
    const bool upper = (f.newrank & mask) != 0;
    const halving_step st{f.old_rank(f.newrank ^ mask), upper ? mid : lo, upper ? hi : mid,
                          upper ? lo : mid, upper ? mid : hi};
    const auto sl = static_cast<std::size_t>(st.send_lo), sh = static_cast<std::size_t>(st.send_hi);
    const auto kl = static_cast<std::size_t>(st.keep_lo), kh = static_cast<std::size_t>(st.keep_hi);
    if (gathers != nullptr && c.post_ahead(st.partner, goff[sh] - goff[sl])) {
      gathers->push_back(c.exchange_reduce_and_post(st.partner, buf + goff[sl], goff[sh] - goff[sl],
                                                    buf + goff[kl], goff[kh] - goff[kl],
                                                    buf + goff[sl], goff[sh] - goff[sl]));
    } else {
      c.sendrecv_reduce(st.partner, buf + goff[sl], goff[sh] - goff[sl], st.partner, buf + goff[kl],
                        goff[kh] - goff[kl]);
      if (gathers != nullptr) gathers->emplace_back();
    }
    lo = st.keep_lo;
    hi = st.keep_hi;
    steps.push_back(st);
  }
  return steps;
}

/// The all-gather that mirrors `steps` (halving_reduce_scatter's), last step first:
/// each rank sends the range it kept, now complete, and receives the range it sent — into the
/// receive in `gathers` where halving_reduce_scatter posted one, else as a plain exchange.
template <class Ctx>
void mirror_all_gather(Ctx& c, std::byte* buf, std::span<const std::size_t> goff,
                       const std::vector<halving_step>& steps,
                       std::vector<std::optional<typename Ctx::request>>& gathers) {
  for (std::size_t i = steps.size(); i-- > 0;) {
    const halving_step& st = steps[i];
    const auto sl = static_cast<std::size_t>(st.send_lo), sh = static_cast<std::size_t>(st.send_hi);
    const auto kl = static_cast<std::size_t>(st.keep_lo), kh = static_cast<std::size_t>(st.keep_hi);
    if (!gathers[i]) {
      c.sendrecv(st.partner, buf + goff[kl], goff[kh] - goff[kl], st.partner, buf + goff[sl],
                 goff[sh] - goff[sl]);
      continue;
    }
    auto sr = c.isend(st.partner, buf + goff[kl], goff[kh] - goff[kl]);
    c.wait(*gathers[i]);
    c.wait(sr);
  }
}

/// Recursive doubling all-gather in place on `buf`: new rank g holds group g; afterwards every
/// active rank holds all groups.
template <class Ctx>
void doubling_all_gather(Ctx& c, std::byte* buf, std::span<const std::size_t> goff, const fold& f) {
  for (int mask = 1; mask < f.pof2; mask *= 2) {
    const int partner_new = f.newrank ^ mask;
    const int partner = f.old_rank(partner_new);
    const auto my_lo = static_cast<std::size_t>(f.newrank & ~(mask - 1));
    const auto their_lo = static_cast<std::size_t>(partner_new & ~(mask - 1));
    const auto m = static_cast<std::size_t>(mask);
    c.sendrecv(partner, buf + goff[my_lo], goff[my_lo + m] - goff[my_lo], partner,
               buf + goff[their_lo], goff[their_lo + m] - goff[their_lo]);
  }
}

/// Folds the first 2 * rem ranks pairwise: even r sends `buf` to r + 1, which reduces it in.
template <class Ctx>
void fold_in(Ctx& c, std::byte* buf, std::size_t bytes, const fold& f) {
  const int r = c.rank();
  if (r >= 2 * f.rem) return;
  if (r % 2 == 0)
    c.send(r + 1, buf, bytes);
  else
    c.recv_reduce(r - 1, buf, bytes);
}

/// Undoes fold_in: odd r sends the finished `buf` back to r - 1.
template <class Ctx>
void fold_out(Ctx& c, std::byte* buf, std::size_t bytes, const fold& f) {
  const int r = c.rank();
  if (r >= 2 * f.rem) return;
  if (r % 2 == 0)
    c.recv(r + 1, buf, bytes);
  else
    c.send(r - 1, buf, bytes);
}

/// Recursive doubling all-reduce of `bytes` in place on `buf` (lg p steps of the whole vector).
template <class Ctx>
void doubling_all_reduce(Ctx& c, std::byte* buf, std::size_t bytes) {
  const fold f(c.size(), c.rank());
  fold_in(c, buf, bytes, f);
  if (f.newrank >= 0) {
    std::byte* tmp = c.scratch(bytes);
    for (int mask = 1; mask < f.pof2; mask *= 2) {
      const int partner = f.old_rank(f.newrank ^ mask);
      // Receive into scratch, not fused: the partner is reading `buf` at the same time.
      c.sendrecv(partner, buf, bytes, partner, tmp, bytes);
      c.reduce(buf, buf, tmp, bytes);
    }
  }
  fold_out(c, buf, bytes, f);
}

/// All-gather of equal blocks of `bytes` (p blocks, rank order, into `out`) by recursive
/// doubling; Bruck's when p is not a power of two (as Open MPI does).
template <class Ctx>
void recursive_all_gather(Ctx& c, const std::byte* in, std::byte* out, std::size_t bytes) {
  const int p = c.size();
  if ((p & (p - 1)) != 0) {
    bruck_all_gather(c, in, out, bytes);
    return;
  }
  c.copy(out + static_cast<std::size_t>(c.rank()) * bytes, in, bytes);
  const fold f(p, c.rank());
  doubling_all_gather(c, out, equal_offsets(bytes, p), f);
}

}  // namespace tutti::inline v0::detail

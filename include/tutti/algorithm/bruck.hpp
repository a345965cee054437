#pragma once
/// \file
/// tutti::bruck: ceil(lg p) steps for any p. All-gather and all-to-all for small blocks
/// (all-to-all moves (n/2) lg p bytes per rank instead of n, trading bandwidth for latency).

#include <cstddef>
#include <optional>

#include "tutti/detail/call.hpp"
#include "tutti/detail/cost.hpp"
#include "tutti/detail/schedules.hpp"

namespace tutti::inline v0 {

struct bruck {
  static constexpr const char* name = "bruck";

  /// Predicted microseconds of collective `k` (nullopt: not implemented here).
  [[nodiscard]] static std::optional<double> cost(detail::collective k,
                                                  const detail::cost_inputs& in) noexcept {
    const double n = in.n, a = in.a, b = in.b, lg = in.lg;
    switch (k) {
      case detail::collective::all_gather:
        return lg * a + in.frac * n * b + n * in.cb;
      case detail::collective::all_to_all:
        return lg * a + n / 2 * lg * b + 2 * n * in.cb;
      case detail::collective::barrier:
        return in.dissemination_barrier();
      default:
        return std::nullopt;
    }
  }

  template <class Ctx>
  static void all_gather(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    detail::bruck_all_gather(c, in, out, count * c.elem());
  }

  template <class Ctx>
  static void all_to_all(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    const int p = c.size(), r = c.rank();
    const std::size_t b = count * c.elem();
    const auto up = static_cast<std::size_t>(p);
    // Layout in scratch: [tmp: p blocks][pack: p/2 + 1 blocks][unpack: same].
    std::byte* tmp = c.scratch(b * (up + 2 * (up / 2 + 1)));
    std::byte* pack = tmp + b * up;
    std::byte* unpack = pack + b * (up / 2 + 1);
    // Phase 1: tmp block i is for rank r + i.
    for (int i = 0; i < p; ++i)
      c.copy(tmp + static_cast<std::size_t>(i) * b,
             in + static_cast<std::size_t>(detail::mod(r + i, p)) * b, b);
    // Phase 2: blocks whose index has bit k travel k ranks further.
    for (int k = 1; k < p; k <<= 1) {
      std::size_t n = 0;
      for (int i = 0; i < p; ++i)
        if (i & k) c.copy(pack + (n++) * b, tmp + static_cast<std::size_t>(i) * b, b);
      c.sendrecv(detail::mod(r + k, p), pack, n * b, detail::mod(r - k, p), unpack, n * b);
      n = 0;
      for (int i = 0; i < p; ++i)
        if (i & k) c.copy(tmp + static_cast<std::size_t>(i) * b, unpack + (n++) * b, b);
    }
    // Phase 3: tmp block i came from rank r - i.
    for (int i = 0; i < p; ++i)
      c.copy(out + static_cast<std::size_t>(detail::mod(r - i, p)) * b,
             tmp + static_cast<std::size_t>(i) * b, b);
  }

  template <class Ctx>
  static void barrier(Ctx& c) {
    detail::dissemination_barrier(c);
  }
};

}  // namespace tutti::inline v0

#pragma once
/// \file
/// tutti::recursive_doubling: lg p exchange steps of the whole vector. Latency-optimal
/// all-reduce for small messages; all-gather by recursive doubling (Bruck when p is not a
/// power of two, as Open MPI does).

#include <cstddef>

#include "tutti/algorithm/bruck.hpp"
#include "tutti/detail/recursive.hpp"
#include "tutti/detail/schedules.hpp"

namespace tutti::inline v0 {

struct recursive_doubling {
  static constexpr const char* name = "recursive_doubling";

  template <class Ctx>
  static void all_reduce(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    c.copy(out, in, count * c.elem());
    detail::doubling_all_reduce(c, out, count * c.elem());
  }

  template <class Ctx>
  static void all_gather(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    const int p = c.size();
    if ((p & (p - 1)) != 0) {
      bruck::all_gather(c, in, out, count);
      return;
    }
    const std::size_t bytes = count * c.elem();
    c.copy(out + static_cast<std::size_t>(c.rank()) * bytes, in, bytes);
    const detail::fold f(p, c.rank());
    detail::doubling_all_gather(c, out, detail::equal_offsets(bytes, p), f);
  }

  template <class Ctx>
  static void barrier(Ctx& c) {
    detail::dissemination_barrier(c);
  }
};

}  // namespace tutti::inline v0

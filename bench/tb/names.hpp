#pragma once
// tutti-bench's vocabulary, shared by its command line, data, driver and reports: the
// collectives, element types, reduction ops and placements it measures (nccl-tests' names), how
// ranks' times combine, and the adaptive iteration count's bounds.

#include <array>
#include <cstddef>
#include <string_view>

namespace tutti_bench {

// ---- what is measured ---------------------------------------------------------------------

enum class collective {
  all_reduce,
  broadcast,
  reduce,
  all_gather,
  reduce_scatter,
  gather,
  scatter,
  all_to_all
};
inline constexpr std::array<collective, 8> all_collectives{
    collective::all_reduce,     collective::broadcast, collective::reduce,  collective::all_gather,
    collective::reduce_scatter, collective::gather,    collective::scatter, collective::all_to_all};

[[nodiscard]] constexpr std::string_view name_of(collective c) noexcept {
  switch (c) {
    case collective::broadcast:
      return "broadcast";
    case collective::reduce:
      return "reduce";
    case collective::all_gather:
      return "all_gather";
    case collective::reduce_scatter:
      return "reduce_scatter";
    case collective::gather:
      return "gather";
    case collective::scatter:
      return "scatter";
    case collective::all_to_all:
      return "all_to_all";
    case collective::all_reduce:
      break;
  }
  return "all_reduce";
}

[[nodiscard]] constexpr bool reduces(collective c) noexcept {
  return c == collective::all_reduce || c == collective::reduce || c == collective::reduce_scatter;
}
[[nodiscard]] constexpr bool rooted(collective c) noexcept {
  return c == collective::broadcast || c == collective::reduce || c == collective::gather ||
         c == collective::scatter;
}

/// nccl-tests' element types, in ncclDataType_t order.
enum class datatype {
  int8,
  uint8,
  int32,
  uint32,
  int64,
  uint64,
  float16,
  float32,
  float64,
  bfloat16
};
inline constexpr std::array<datatype, 10> all_datatypes{
    datatype::int8,   datatype::uint8,   datatype::int32,   datatype::uint32,  datatype::int64,
    datatype::uint64, datatype::float16, datatype::float32, datatype::float64, datatype::bfloat16};

/// The names nccl-tests prints.
[[nodiscard]] constexpr std::string_view name_of(datatype t) noexcept {
  switch (t) {
    case datatype::int8:
      return "int8";
    case datatype::uint8:
      return "uint8";
    case datatype::int32:
      return "int32";
    case datatype::uint32:
      return "uint32";
    case datatype::int64:
      return "int64";
    case datatype::uint64:
      return "uint64";
    case datatype::float16:
      return "half";
    case datatype::float64:
      return "double";
    case datatype::bfloat16:
      return "bfloat16";
    case datatype::float32:
      break;
  }
  return "float";
}

enum class redop { sum, prod, min, max, avg, none };
inline constexpr std::array<redop, 5> all_redops{redop::sum, redop::prod, redop::min, redop::max,
                                                 redop::avg};

[[nodiscard]] constexpr std::string_view name_of(redop o) noexcept {
  switch (o) {
    case redop::prod:
      return "prod";
    case redop::min:
      return "min";
    case redop::max:
      return "max";
    case redop::avg:
      return "avg";
    case redop::none:
      return "none";
    case redop::sum:
      break;
  }
  return "sum";
}

enum class placement { out_of_place, in_place };
[[nodiscard]] constexpr std::string_view name_of(placement p) noexcept {
  return p == placement::in_place ? "in-place" : "out-of-place";
}

// ---- options ------------------------------------------------------------------------------

/// How the per-call time of the ranks becomes one number (nccl-tests' -a).
enum class average_mode { rank0 = 0, mean = 1, min = 2, max = 3 };

inline constexpr double target_seconds_per_size = 0.2;
inline constexpr std::size_t min_adaptive_iters = 5;
inline constexpr std::size_t max_adaptive_iters = 100000;

}  // namespace tutti_bench

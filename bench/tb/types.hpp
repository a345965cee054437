#pragma once
// tutti-bench's element types (names.hpp's datatype) as the C++ types its programs call with.

#include <cstdint>
#include <type_traits>

#include <tutti/core/bfloat16.hpp>
#include <tutti/core/half.hpp>

#include "names.hpp"

namespace tutti_bench::detail {

/// The datatype tag of an element type (with_type's inverse).
template <class T>
inline constexpr datatype element_of = [] {
  if constexpr (std::is_same_v<T, std::int8_t>) return datatype::int8;
  if constexpr (std::is_same_v<T, std::uint8_t>) return datatype::uint8;
  if constexpr (std::is_same_v<T, std::int32_t>) return datatype::int32;
  if constexpr (std::is_same_v<T, std::uint32_t>) return datatype::uint32;
  if constexpr (std::is_same_v<T, std::int64_t>) return datatype::int64;
  if constexpr (std::is_same_v<T, std::uint64_t>) return datatype::uint64;
  if constexpr (std::is_same_v<T, tutti::half>) return datatype::float16;
  if constexpr (std::is_same_v<T, double>) return datatype::float64;
  if constexpr (std::is_same_v<T, tutti::bfloat16>) return datatype::bfloat16;
  return datatype::float32;
}();

/// Runs `f.template operator()<T>()` with the T of `t`.
template <class F>
decltype(auto) with_type(datatype t, F&& f) {
  switch (t) {
    case datatype::int8:
      return f.template operator()<std::int8_t>();
    case datatype::uint8:
      return f.template operator()<std::uint8_t>();
    case datatype::int32:
      return f.template operator()<std::int32_t>();
    case datatype::uint32:
      return f.template operator()<std::uint32_t>();
    case datatype::int64:
      return f.template operator()<std::int64_t>();
    case datatype::uint64:
      return f.template operator()<std::uint64_t>();
    case datatype::float16:
      return f.template operator()<tutti::half>();
    case datatype::float64:
      return f.template operator()<double>();
    case datatype::bfloat16:
      return f.template operator()<tutti::bfloat16>();
    case datatype::float32:
      break;
  }
  return f.template operator()<float>();
}

}  // namespace tutti_bench::detail

#pragma once
/// \file
/// Element types a collective accepts, and their runtime tags.

#include <concepts>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "tutti/core/bfloat16.hpp"
#include "tutti/core/half.hpp"

namespace tutti::inline v0 {

/// Runtime tag of an element type; part of every call's fingerprint.
enum class dtype : std::uint8_t {
  int8,
  uint8,
  int16,
  uint16,
  int32,
  uint32,
  int64,
  uint64,
  float16,
  bfloat16,
  float32,
  float64,
  float128,
  boolean,
  character,
};

namespace detail {

template <class T>
struct dtype_of_impl;
template <class T>
  requires std::is_integral_v<T> && (!std::is_same_v<T, bool>) && (!std::is_same_v<T, char>)
struct dtype_of_impl<T> {
  static constexpr dtype value = [] {
    constexpr bool s = std::is_signed_v<T>;
    switch (sizeof(T)) {
      case 1:
        return s ? dtype::int8 : dtype::uint8;
      case 2:
        return s ? dtype::int16 : dtype::uint16;
      case 4:
        return s ? dtype::int32 : dtype::uint32;
      default:
        return s ? dtype::int64 : dtype::uint64;
    }
  }();
};
template <>
struct dtype_of_impl<bool> {
  static constexpr dtype value = dtype::boolean;
};
template <>
struct dtype_of_impl<char> {
  static constexpr dtype value = dtype::character;
};
template <>
struct dtype_of_impl<half> {
  static constexpr dtype value = dtype::float16;
};
template <>
struct dtype_of_impl<bfloat16> {
  static constexpr dtype value = dtype::bfloat16;
};
template <>
struct dtype_of_impl<float> {
  static constexpr dtype value = dtype::float32;
};
template <>
struct dtype_of_impl<double> {
  static constexpr dtype value = dtype::float64;
};
template <>
struct dtype_of_impl<long double> {
  static constexpr dtype value = dtype::float128;
};

}  // namespace detail

/// A type collectives move: every standard integer and floating type, tutti::half and
/// tutti::bfloat16. Exactly the types `dtype_of` knows.
template <class T>
concept element = requires { detail::dtype_of_impl<std::remove_cv_t<T>>::value; } &&
                  std::is_trivially_copyable_v<T> && (sizeof(T) <= 16);

/// The runtime tag of an element type.
template <element T>
inline constexpr dtype dtype_of = detail::dtype_of_impl<std::remove_cv_t<T>>::value;

/// True for floating types, the 16-bit ones included.
template <class T>
concept floating_element =
    element<T> && (std::is_floating_point_v<T> || std::is_same_v<std::remove_cv_t<T>, half> ||
                   std::is_same_v<std::remove_cv_t<T>, bfloat16>);

/// True for integer types (bool and char included: they move, and admit bitwise ops).
template <class T>
concept integral_element = element<T> && std::is_integral_v<T>;

/// The name of a dtype as printed in errors and benchmark tables (nccl-tests' names).
[[nodiscard]] constexpr std::string_view name(dtype t) noexcept {
  switch (t) {
    case dtype::int8:
      return "int8";
    case dtype::uint8:
      return "uint8";
    case dtype::int16:
      return "int16";
    case dtype::uint16:
      return "uint16";
    case dtype::int32:
      return "int32";
    case dtype::uint32:
      return "uint32";
    case dtype::int64:
      return "int64";
    case dtype::uint64:
      return "uint64";
    case dtype::float16:
      return "half";
    case dtype::bfloat16:
      return "bfloat16";
    case dtype::float32:
      return "float";
    case dtype::float64:
      return "double";
    case dtype::float128:
      return "long double";
    case dtype::boolean:
      return "bool";
    case dtype::character:
      return "char";
  }
  return "?";
}

}  // namespace tutti::inline v0

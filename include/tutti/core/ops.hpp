#pragma once
/// \file
/// Reduction operations: tutti::sum, prod, min, max, avg, band, bor, bxor.

#include <cstdint>
#include <string_view>
#include <type_traits>

#include "tutti/core/types.hpp"

namespace tutti::inline v0 {

/// Runtime tag of a reduction; part of every call's fingerprint.
enum class op_kind : std::uint8_t { none, sum, prod, min, max, avg, band, bor, bxor };

[[nodiscard]] constexpr std::string_view name(op_kind o) noexcept {
  switch (o) {
    case op_kind::none:
      return "none";
    case op_kind::sum:
      return "sum";
    case op_kind::prod:
      return "prod";
    case op_kind::min:
      return "min";
    case op_kind::max:
      return "max";
    case op_kind::avg:
      return "avg";
    case op_kind::band:
      return "band";
    case op_kind::bor:
      return "bor";
    case op_kind::bxor:
      return "bxor";
  }
  return "?";
}

namespace detail {
template <op_kind K>
struct op_tag {
  static constexpr op_kind kind = K;
};
}  // namespace detail

struct sum_t : detail::op_tag<op_kind::sum> {};
struct prod_t : detail::op_tag<op_kind::prod> {};
struct min_t : detail::op_tag<op_kind::min> {};
struct max_t : detail::op_tag<op_kind::max> {};
/// Sum divided by the world size (integer division for integer types, like NCCL's ncclAvg).
struct avg_t : detail::op_tag<op_kind::avg> {};
struct band_t : detail::op_tag<op_kind::band> {};
struct bor_t : detail::op_tag<op_kind::bor> {};
struct bxor_t : detail::op_tag<op_kind::bxor> {};

inline constexpr sum_t sum{};
inline constexpr prod_t prod{};
inline constexpr min_t min{};
inline constexpr max_t max{};
inline constexpr avg_t avg{};
inline constexpr band_t band{};
inline constexpr bor_t bor{};
inline constexpr bxor_t bxor{};

/// One of tutti's reduction tags.
template <class Op>
concept reduction = requires {
  std::remove_cvref_t<Op>::kind;
} && std::is_base_of_v<detail::op_tag<std::remove_cvref_t<Op>::kind>, std::remove_cvref_t<Op>>;

namespace detail {
/// Whether op `K` applies to element type `T` (a function, not a lambda inside the concept:
/// nvcc's front end rejects the latter).
template <op_kind K, class T>
[[nodiscard]] consteval bool op_accepts() noexcept {
  constexpr bool text = std::is_same_v<T, bool> || std::is_same_v<T, char>;
  if constexpr (K == op_kind::band || K == op_kind::bor || K == op_kind::bxor)
    return integral_element<T>;
  else if constexpr (K == op_kind::min || K == op_kind::max)
    return true;
  else
    return !text;
}
}  // namespace detail

/// True when `Op` can reduce elements of type `T`: arithmetic ops on every numeric type but
/// bool and char, min/max on every type, bitwise ops on integer types only.
template <class Op, class T>
concept reducible = reduction<Op> && element<T> &&
                    detail::op_accepts<std::remove_cvref_t<Op>::kind, std::remove_cv_t<T>>();

namespace detail {

/// Gives a readable error for a bad (op, type) pair at the public entry point.
template <class Op, class T>
consteval void check_reducible() {
  static_assert(reduction<Op>,
                "tutti: the op must be one of tutti::sum, prod, min, max, avg, band, bor, bxor");
  if constexpr (reduction<Op>) {
    constexpr op_kind op_k = std::remove_cvref_t<Op>::kind;
    constexpr bool bitwise = op_k == op_kind::band || op_k == op_kind::bor || op_k == op_kind::bxor;
    static_assert(!(bitwise && floating_element<T>),
                  "tutti: bitwise ops (band, bor, bxor) need an integer element type; "
                  "this element type is floating point");
    static_assert((bitwise && floating_element<T>) || reducible<Op, T>,
                  "tutti: this op cannot reduce this element type (bool and char admit only "
                  "min, max and bitwise ops)");
  }
}

}  // namespace detail
}  // namespace tutti::inline v0

#pragma once
/// \file
/// Exact parsing of the short text records ranks leave for each other in the store (tutti::gloo's
/// abort and call records, the single-copy probe's offer): fields separated by single spaces,
/// integers exactly as std::to_string or "%x" write them. Another process wrote the text, so
/// anything else — signs where none belong, leading zeros, upper case, out-of-range values — is
/// rejected rather than guessed at (sscanf takes all of those, and an out-of-range value is
/// undefined behaviour there).

#include <charconv>
#include <optional>
#include <string_view>
#include <system_error>
#include <type_traits>

namespace tutti::inline v0::detail {

/// The next field of `rest`, up to a single space (consumed) or the end; nothing when `rest` is
/// empty. With `last`, the field must end `rest`; without, a space must follow it.
[[nodiscard]] constexpr std::optional<std::string_view> next_field(std::string_view& rest,
                                                                   bool last) noexcept {
  const auto sp = rest.find(' ');
  if (rest.empty() || (sp == std::string_view::npos) != last) return std::nullopt;
  const std::string_view field = rest.substr(0, sp);
  rest.remove_prefix(last ? rest.size() : sp + 1);
  return field;
}

/// The integer `text` writes in `base` (10 or 16), written canonically: digits only (lower-case
/// for 16), a '-' only for a signed type and a non-zero value, no leading zeros; nothing for
/// anything else or a value out of range of T.
template <class T>
[[nodiscard]] std::optional<T> parse_integer(std::string_view text, int base = 10) noexcept {
  static_assert(std::is_integral_v<T>);
  std::string_view digits = text;
  if (std::is_signed_v<T> && !digits.empty() && digits.front() == '-') digits.remove_prefix(1);
  if (digits.empty() || (digits.front() == '0' && text.size() > 1)) return std::nullopt;
  for (const char c : digits)
    if (!((c >= '0' && c <= '9') || (base == 16 && c >= 'a' && c <= 'f'))) return std::nullopt;
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

/// parse_integer of next_field(rest, last).
template <class T>
[[nodiscard]] std::optional<T> next_integer(std::string_view& rest, bool last,
                                            int base = 10) noexcept {
  const auto field = next_field(rest, last);
  return field ? parse_integer<T>(*field, base) : std::nullopt;
}

}  // namespace tutti::inline v0::detail

#pragma once
/// \file
/// tutti::bootstrap::store: the key-value rendezvous ranks use to find each other before any
/// transport exists (the role of torch.distributed's Store). Implementations: tcp_store,
/// file_store; url.hpp picks one from an init URL.

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <tutti/core/error.hpp>
#include <tutti/core/options.hpp>

namespace tutti::inline v0::bootstrap {

/// The longest key a store accepts, in bytes (keys are never empty).
inline constexpr std::size_t max_key_bytes = 4096;
/// The largest value a store accepts, in bytes.
inline constexpr std::size_t max_value_bytes = std::size_t{16} << 20;

/// The timeout a store uses when none is given: TUTTI_TIMEOUT seconds, or 300 s (the same
/// default as tutti::options::timeout).
[[nodiscard]] inline std::chrono::milliseconds default_timeout() {
  return detail::timeout_from_env();
}

/// A key-value store shared by every rank of a job. Keys are byte strings of 1 to
/// max_key_bytes bytes, values byte strings of 0 to max_value_bytes bytes; a later set
/// replaces the value. Implementations are safe to call from several threads at once.
/// Every failure raises tutti::error: errc::timeout when a deadline passes,
/// errc::transport_failure for I/O or protocol faults, errc::peer_lost when the server went
/// away, errc::invalid_argument for bad keys or values. A timeout of zero or less checks once.
class store {
 public:
  store() = default;
  store(const store&) = delete;
  store& operator=(const store&) = delete;
  virtual ~store() = default;

  /// Sets `key` to `value`, replacing any earlier value, and wakes everyone waiting for it.
  virtual void set(std::string_view key, std::span<const std::byte> value) = 0;

  /// The value of `key`, waiting up to `timeout` for some rank to set it.
  [[nodiscard]] virtual std::vector<std::byte> get(std::string_view key,
                                                   std::chrono::milliseconds timeout) = 0;

  /// Atomically adds `delta` to the integer stored at `key` (a missing key counts as 0) and
  /// returns the new value. The value is kept as decimal text, so get() of a counter returns
  /// e.g. "42"; add() on a value that is not a decimal int64 raises errc::invalid_argument.
  virtual std::int64_t add(std::string_view key, std::int64_t delta) = 0;

  /// Returns once every key in `keys` exists, waiting up to `timeout`.
  virtual void wait(std::span<const std::string> keys, std::chrono::milliseconds timeout) = 0;

  /// set() with a text value.
  void set_string(std::string_view key, std::string_view value) {
    set(key, std::as_bytes(std::span<const char>(value.data(), value.size())));
  }

  /// get() returning the value as text.
  [[nodiscard]] std::string get_string(std::string_view key, std::chrono::milliseconds timeout) {
    const std::vector<std::byte> v = get(key, timeout);
    return {reinterpret_cast<const char*>(v.data()), v.size()};
  }
};

}  // namespace tutti::inline v0::bootstrap

namespace tutti::inline v0::detail {

using store_clock = std::chrono::steady_clock;

/// The bytes of a string.
[[nodiscard]] inline std::span<const std::byte> store_bytes(std::string_view s) noexcept {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

/// A string holding these bytes.
[[nodiscard]] inline std::string store_string(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

[[noreturn]] inline void store_fail(errc code, const std::string& what) {
  throw error(code, "", 0, -1, -1, what);
}

/// "Connection refused (errno 111)".
[[nodiscard]] inline std::string store_errno(int e) {
  return std::system_category().message(e) + " (errno " + std::to_string(e) + ")";
}

/// A key quoted for messages: non-printable bytes escaped, long keys shortened.
[[nodiscard]] inline std::string store_quote(std::string_view key) {
  constexpr std::size_t shown = 64;
  std::string s = "'";
  for (const char ch : key.substr(0, shown)) {
    const auto u = static_cast<unsigned char>(ch);
    if (u >= 0x20 && u < 0x7f && ch != '\'' && ch != '\\') {
      s += ch;
    } else {
      constexpr const char* hex = "0123456789abcdef";
      s += "\\x";
      s += hex[u >> 4];
      s += hex[u & 15];
    }
  }
  s += '\'';
  if (key.size() > shown) s += "...(" + std::to_string(key.size()) + " bytes)";
  return s;
}

/// Up to 8 quoted keys, comma separated, then "and N more".
template <class Keys>
[[nodiscard]] std::string store_quote_keys(const Keys& keys) {
  std::string s;
  std::size_t n = 0;
  for (const auto& k : keys) {
    if (n == 8) return s + " and " + std::to_string(std::size(keys) - n) + " more";
    s += (n++ == 0 ? "" : ", ") + store_quote(k);
  }
  return s;
}

[[nodiscard]] inline std::string store_ms(std::chrono::milliseconds t) {
  return std::to_string(t.count()) + " ms";
}

/// Raises errc::invalid_argument unless `key` is a valid store key.
inline void check_store_key(const std::string& store_name, std::string_view key) {
  if (key.empty()) store_fail(errc::invalid_argument, store_name + ": empty key");
  if (key.size() > bootstrap::max_key_bytes)
    store_fail(errc::invalid_argument,
               store_name + ": key " + store_quote(key) + " is " + std::to_string(key.size()) +
                   " bytes, over the limit of " + std::to_string(bootstrap::max_key_bytes));
}

inline void check_store_value(const std::string& store_name, std::string_view key,
                              std::size_t size) {
  if (size > bootstrap::max_value_bytes)
    store_fail(errc::invalid_argument, store_name + ": value for key " + store_quote(key) + " is " +
                                           std::to_string(size) + " bytes, over the limit of " +
                                           std::to_string(bootstrap::max_value_bytes));
}

/// now + t, with t clamped to [0, 100 years] so the sum cannot overflow.
[[nodiscard]] inline store_clock::time_point store_deadline(std::chrono::milliseconds t) {
  constexpr std::chrono::milliseconds cap = std::chrono::hours(24 * 365 * 100);
  return store_clock::now() + std::clamp(t, std::chrono::milliseconds::zero(), cap);
}

/// Milliseconds left until `deadline`, rounded up, as a poll() timeout (0 when passed).
[[nodiscard]] inline int store_poll_ms(store_clock::time_point deadline) {
  const auto left = deadline - store_clock::now();
  if (left <= store_clock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<std::int64_t>(ms, 1'000'000'000));
}

/// The counter arithmetic of store::add on a stored value (nullptr: the key is missing).
/// Returns false with `why` set when the value is not a decimal int64 or the sum overflows.
[[nodiscard]] inline bool store_add_counter(const std::vector<std::byte>* old, std::int64_t delta,
                                            std::int64_t& out, std::string& why) {
  std::int64_t current = 0;
  if (old != nullptr) {
    const char* first = reinterpret_cast<const char*>(old->data());
    const char* last = first + old->size();
    const auto [end, ec] = std::from_chars(first, last, current);
    if (old->empty() || ec != std::errc{} || end != last) {
      why = "its value is not a decimal 64-bit integer";
      return false;
    }
  }
  if (__builtin_add_overflow(current, delta, &out)) {
    why = std::to_string(current) + " + " + std::to_string(delta) + " overflows int64";
    return false;
  }
  return true;
}

/// A counter value as stored: decimal text.
[[nodiscard]] inline std::vector<std::byte> store_counter_bytes(std::int64_t v) {
  char buf[24];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;  // 24 bytes always fit an int64
  const auto* b = reinterpret_cast<const std::byte*>(buf);
  return {b, reinterpret_cast<const std::byte*>(end)};
}

}  // namespace tutti::inline v0::detail

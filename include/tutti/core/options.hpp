#pragma once
/// \file
/// Communicator options and the environment variables that set their defaults.

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>

namespace tutti::inline v0 {

namespace detail {

/// Parses TUTTI_TIMEOUT (seconds, fractions allowed, > 0); 300 s when unset or malformed.
[[nodiscard]] inline std::chrono::milliseconds timeout_from_env() {
  constexpr std::chrono::milliseconds fallback{300'000};
  const char* s = std::getenv("TUTTI_TIMEOUT");
  if (s == nullptr || *s == '\0') return fallback;
  char* end = nullptr;
  const double seconds = std::strtod(s, &end);
  if (end == s || *end != '\0' || !(seconds > 0) || seconds > 1e9) return fallback;
  return std::chrono::milliseconds{std::llround(seconds * 1000.0)};
}

/// The value of an environment variable, or "" when unset.
[[nodiscard]] inline std::string env_string(const char* name) {
  const char* s = std::getenv(name);
  return s == nullptr ? std::string{} : std::string{s};
}

/// A switch that is on unless the variable says `0`, `off`, `no` or `false` (unset: on).
[[nodiscard]] inline bool env_switch_on(const char* name) {
  const std::string v = env_string(name);
  return v != "0" && v != "off" && v != "no" && v != "false";
}

/// TUTTI_DEBUG=INFO or DEBUG (any case): tutti writes a line on stderr per notable event
/// (transport addresses, bucket layouts).
[[nodiscard]] inline bool debug_info() {
  std::string v = env_string("TUTTI_DEBUG");
  for (char& c : v) c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  return v == "INFO" || v == "DEBUG";
}

}  // namespace detail

/// Per-communicator settings. Every field has a default read from the environment.
struct options {
  /// How long any blocking wait may take before it raises tutti::error(errc::timeout).
  /// Default: TUTTI_TIMEOUT seconds, or 300 s.
  std::chrono::milliseconds timeout = detail::timeout_from_env();
  /// Per-size-range algorithm overrides for tutti::automatic, in TUTTI_ALGO's syntax
  /// (see algorithm/automatic.hpp). Default: the TUTTI_ALGO environment variable.
  std::string algo = detail::env_string("TUTTI_ALGO");
  /// The secret every rank must share to use the job's tcp_store (see bootstrap/tcp_store.hpp);
  /// empty: none. It must be the same on every rank. Default: the TUTTI_STORE_TOKEN
  /// environment variable, which tutti::spawn's ranks inherit.
  std::string store_token = detail::env_string("TUTTI_STORE_TOKEN");
};

}  // namespace tutti::inline v0

#pragma once
/// \file
/// Pieces of tutti::gloo that do not need Gloo's headers: the 64-bit slots messages are matched
/// on, the records ranks leave in the store when a world aborts, and choosing the local address
/// the TCP device binds.

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include <net/if.h>

#include "tutti/core/error.hpp"
#include "tutti/core/options.hpp"
#include "tutti/detail/call.hpp"
#include "tutti/detail/text_fields.hpp"
#include "tutti/detail/unique_fd.hpp"

namespace tutti::inline v0::detail {

/// splitmix64's finaliser: a cheap, well-mixed 64-bit hash step.
[[nodiscard]] constexpr std::uint64_t gloo_mix(std::uint64_t h, std::uint64_t v) noexcept {
  std::uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// Gloo's own collectives use slots `prefix << 56 | tag << 24` with prefixes 1..8; tutti's
/// messages use top bytes 0x74 (collectives) and 0x75 (send/recv), so they never meet.
inline constexpr std::uint64_t gloo_slot_mask = (std::uint64_t{1} << 56) - 1;
inline constexpr std::uint64_t gloo_collective_prefix = std::uint64_t{0x74} << 56;
inline constexpr std::uint64_t gloo_p2p_prefix = std::uint64_t{0x75} << 56;
/// The slot of each rank's sentinel receives (tutti::gloo): nothing is ever sent on it.
inline constexpr std::uint64_t gloo_sentinel_slot = std::uint64_t{0x76} << 56;

/// The slot a message travels on. Everything both ends must agree on goes into it — the call's
/// sequence number and fingerprint and the message's size for collectives; the tag, element
/// type and size for send/recv — so messages of disagreeing calls never match. That matters
/// beyond the diagnosis: Gloo aborts the receiving process when a message is longer than the
/// receive posted for it. Messages on one slot between one pair match in posting order.
[[nodiscard]] inline std::uint64_t gloo_slot(const call& c, space sp, std::uint64_t tag,
                                             std::size_t bytes) noexcept {
  if (sp == space::p2p) {
    std::uint64_t h = gloo_mix(0x7475747469ull, tag);
    h = gloo_mix(h, static_cast<std::uint64_t>(c.fp.type));
    h = gloo_mix(h, bytes);
    return gloo_p2p_prefix | (h & gloo_slot_mask);
  }
  std::uint64_t h = gloo_mix(0x636f6c6cull, c.seq);
  h = gloo_mix(h, c.fp.packed_head());
  h = gloo_mix(h, c.fp.count);
  h = gloo_mix(h, tag);
  h = gloo_mix(h, bytes);
  return gloo_collective_prefix | (h & gloo_slot_mask);
}

/// The 32-bit tag of a native (Gloo-run) collective: sequence number and fingerprint, so a
/// mismatched call never matches (and never meets a message of the wrong size).
[[nodiscard]] inline std::uint32_t gloo_native_tag(const call& c) noexcept {
  std::uint64_t h = gloo_mix(0x6e6174ull, c.seq);
  h = gloo_mix(h, c.fp.packed_head());
  h = gloo_mix(h, c.fp.count);
  return static_cast<std::uint32_t>(h ^ (h >> 32));
}

/// What a rank leaves in the store when it aborts the world: "<errc> <writer> <subject> <text>";
/// `subject` is the rank the error is about (the dead peer, the other side of a mismatch).
struct gloo_abort_record {
  errc code = errc::aborted;
  int writer = -1;
  int subject = -1;
  std::string what;

  [[nodiscard]] std::string encode() const {
    return std::to_string(static_cast<int>(code)) + " " + std::to_string(writer) + " " +
           std::to_string(subject) + " " + what;
  }
  /// The record `s` encodes, exactly as encode() writes it (detail/text_fields.hpp); nothing
  /// for anything else.
  [[nodiscard]] static std::optional<gloo_abort_record> decode(std::string_view s) {
    std::string_view rest = s;
    const auto code = next_integer<int>(rest, false);
    const auto writer = next_integer<int>(rest, false);
    const auto subject = next_integer<int>(rest, false);
    if (!code || *code < static_cast<int>(errc::timeout) ||
        *code > static_cast<int>(errc::transport_failure) || !writer || *writer < -1 || !subject ||
        *subject < -1)
      return std::nullopt;
    return gloo_abort_record{static_cast<errc>(*code), *writer, *subject, std::string(rest)};
  }
};

/// A call as published for mismatch checks: "<seq> <packed head> <count>".
[[nodiscard]] inline std::string gloo_call_record(const call& c) {
  return std::to_string(c.seq) + " " + std::to_string(c.fp.packed_head()) + " " +
         std::to_string(c.fp.count);
}
/// The call `s` records, exactly as gloo_call_record writes it; nothing for anything else.
[[nodiscard]] inline std::optional<std::pair<std::uint64_t, fingerprint>> gloo_parse_call(
    std::string_view s) {
  std::string_view rest = s;
  const auto seq = next_integer<std::uint64_t>(rest, false);
  const auto head = next_integer<std::uint64_t>(rest, false);
  const auto count = next_integer<std::uint64_t>(rest, true);
  if (!seq || !head || !count) return std::nullopt;
  return std::pair{*seq, fingerprint::unpack(*head, *count)};
}

/// The local IPv4/IPv6 address the kernel would use to reach `host` (a UDP connect sends
/// nothing), as text; "" when `host` does not resolve or is unreachable.
[[nodiscard]] inline std::string local_address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port > 0 ? port : 9);
  if (::getaddrinfo(host.c_str(), service.c_str(), &hints, &res) != 0 || res == nullptr) return {};
  std::string out;
  for (addrinfo* a = res; a != nullptr && out.empty(); a = a->ai_next) {
    unique_fd fd(::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd || ::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) != 0) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const void* addr =
        local.ss_family == AF_INET6
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
    if (::inet_ntop(local.ss_family, addr, text, sizeof text) != nullptr) out = text;
  }
  ::freeaddrinfo(res);
  return out;
}

/// True if a network interface named `name` exists on this host.
[[nodiscard]] inline bool interface_exists(const std::string& name) {
  return !name.empty() && ::if_nametoindex(name.c_str()) != 0;
}

}  // namespace tutti::inline v0::detail

#pragma once
/// \file
/// tutti::error: the one exception type every collective raises.

#include <cstdint>
#include <string>
#include <system_error>

namespace tutti::inline v0 {

/// Why a collective failed.
enum class errc : int {
  timeout = 1,        ///< a wait passed its deadline
  mismatch,           ///< ranks called different collectives, counts, types, ops or roots
  peer_lost,          ///< a peer died or closed its connection
  aborted,            ///< another rank failed and the communicator was aborted
  invalid_argument,   ///< a bad argument found before anything was sent
  transport_failure,  ///< the transport itself failed (system call, backend error)
};

namespace detail {

class error_category_impl final : public std::error_category {
 public:
  [[nodiscard]] const char* name() const noexcept override { return "tutti"; }
  [[nodiscard]] std::string message(int ev) const override {
    switch (static_cast<errc>(ev)) {
      case errc::timeout:
        return "timed out";
      case errc::mismatch:
        return "mismatched collective call";
      case errc::peer_lost:
        return "peer lost";
      case errc::aborted:
        return "communicator aborted";
      case errc::invalid_argument:
        return "invalid argument";
      case errc::transport_failure:
        return "transport failure";
    }
    return "unknown tutti error";
  }
};

}  // namespace detail

/// The error category of tutti::errc.
[[nodiscard]] inline const std::error_category& error_category() noexcept {
  static const detail::error_category_impl category;
  return category;
}

[[nodiscard]] inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), error_category()};
}

/// Raised by every failing collective. Carries the collective's name, its sequence number on
/// the communicator, this rank and the peer involved (-1 when no single peer is to blame).
class error : public std::system_error {
 public:
  error(errc code, std::string collective, std::uint64_t sequence, int rank, int peer,
        const std::string& what)
      : std::system_error(make_error_code(code), format(collective, sequence, rank, peer, what)),
        collective_(std::move(collective)),
        sequence_(sequence),
        rank_(rank),
        peer_(peer),
        reason_(what) {}

  /// The collective that failed ("all_reduce", "send", ...), or "" outside any collective.
  [[nodiscard]] const std::string& collective() const noexcept { return collective_; }
  /// The failed call's sequence number on its communicator (counts from 1).
  [[nodiscard]] std::uint64_t sequence() const noexcept { return sequence_; }
  /// The rank that raised the error.
  [[nodiscard]] int rank() const noexcept { return rank_; }
  /// The peer involved, or -1.
  [[nodiscard]] int peer() const noexcept { return peer_; }
  [[nodiscard]] errc kind() const noexcept { return static_cast<errc>(code().value()); }
  /// What went wrong as the raiser said it: what() without the call, ranks and kind around it.
  [[nodiscard]] const std::string& reason() const noexcept { return reason_; }

 private:
  static std::string format(const std::string& collective, std::uint64_t sequence, int rank,
                            int peer, const std::string& what) {
    std::string s = "tutti";
    if (!collective.empty()) s += ": " + collective + " #" + std::to_string(sequence);
    if (rank >= 0) s += " on rank " + std::to_string(rank);
    if (peer >= 0) s += " (peer " + std::to_string(peer) + ")";
    return s + ": " + what;
  }

  std::string collective_;
  std::uint64_t sequence_;
  int rank_;
  int peer_;
  std::string reason_;
};

}  // namespace tutti::inline v0

template <>
struct std::is_error_code_enum<tutti::errc> : std::true_type {};

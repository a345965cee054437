#pragma once
/// \file
/// The α-β-γ cost model's parameters (Thakur, Rabenseifner & Gropp 2005): a message of n bytes
/// costs α + nβ, reducing n bytes costs nγ.

namespace tutti::inline v0 {

/// Per-transport defaults, in microseconds and microseconds per byte.
struct cost_model {
  double alpha_us = 1.0;
  double beta_us_per_byte = 1e-4;
  double gamma_us_per_byte = 1e-4;
  /// Copying a byte into or out of the shared segment (direct's schedules); 0: same as β.
  double segment_beta_us_per_byte = 0.0;
  /// Ranks per CPU on the world's most crowded host; above 1, ranks wait for CPUs as well as
  /// for messages, and tutti::automatic weighs the work of every rank of that host, not only
  /// the slowest rank's path (detail::predicted_cost). 0: not known (taken as not crowded).
  double ranks_per_cpu = 0.0;

  friend bool operator==(const cost_model&, const cost_model&) = default;
};

}  // namespace tutti::inline v0

#pragma once
/// \file
/// tutti::gloo's cost parameters for tutti::automatic (gloo::costs, and a message's as a single
/// copy: gloo_costs::single_copy), apart from Gloo's headers: code built without Gloo
/// (tests/test_core.cpp) checks automatic's picks against these very numbers.

#include "tutti/detail/cost.hpp"

namespace tutti::inline v0::detail::gloo_costs {

/// Defaults for tutti::automatic, fitted on loopback (bench/RESULTS.md): every message is a
/// rendezvous over a TCP connection (tens of microseconds), bytes cross the kernel twice. A
/// send waits for its receiver's recv-ready notification, so in an exchange, where both post
/// at once, the notification and then the data cross: two α (bench/RESULTS.md, "Why an
/// exchange over Gloo's TCP costs twice a message").
inline constexpr cost_model tcp{.alpha_us = 40.0,
                                .beta_us_per_byte = 1.0 / 1500.0,
                                .gamma_us_per_byte = 1.0 / 8000.0,
                                .segment_beta_us_per_byte = 1.0 / 1500.0,
                                .exchange_alphas = 2.0};

/// α and β of a single copy, fitted on the 2-core VM of bench/RESULTS.md: a 4-byte recursive
/// doubling step (a descriptor, a read, an acknowledgement) takes about 5 µs; a 4 MiB one
/// (read and reduce 4 MiB) about 1.2 ms, α + n(β + γ) with γ = 1/8000.
inline constexpr double single_copy_alpha_us = 5.0;
inline constexpr double single_copy_beta_us_per_byte = 1.0 / 6500.0;

/// `m` where every message is a single copy (a world on one host whose every pair reads the
/// other's memory: gloo::world_costs): the single copy's α and β, and one α per exchange,
/// since a descriptor waits in its receiver's mailbox without a rendezvous.
[[nodiscard]] constexpr cost_model single_copy(cost_model m) noexcept {
  m.alpha_us = single_copy_alpha_us;
  m.beta_us_per_byte = single_copy_beta_us_per_byte;
  m.exchange_alphas = 1.0;
  return m;
}

}  // namespace tutti::inline v0::detail::gloo_costs

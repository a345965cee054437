#pragma once
/// \file
/// TUTTI_ALGO: per-collective, per-size-range algorithm overrides for tutti::automatic.
///
/// Syntax: rules separated by ';', first match wins, whitespace ignored:
///   rule  := [collective ':'] policy ['@' range]
///   range := [bytes] '-' [bytes]        half-open [lo, hi); bytes take K, M, G (powers of 2)
/// Example: "all_reduce:recursive_doubling@-64K; all_reduce:ring@64K-; broadcast:tree".
/// The size is the bytes of the call's vector: one rank's for all_reduce, reduce, broadcast;
/// every rank's together (count x element size x world size) for all_gather, gather, scatter,
/// reduce_scatter, all_to_all; the sum of the counts for all_gatherv.
/// A rule naming a policy that lacks the collective, or that the transport cannot run, is
/// skipped for that collective. The names are those of the policies the chooser selects among
/// (tutti::automatic's list); a policy that is no chooser ignores TUTTI_ALGO.

#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tutti/core/error.hpp"
#include "tutti/detail/call.hpp"

namespace tutti::inline v0::detail {

struct algo_rule {
  collective coll = collective::none;  // none: every collective
  std::size_t policy = 0;              // index into the names the table was parsed with
  std::size_t lo = 0;
  std::size_t hi = std::numeric_limits<std::size_t>::max();
};

class algo_table {
 public:
  algo_table() = default;

  /// Parses `spec`, whose rules may name the `policies`; raises
  /// tutti::error(errc::invalid_argument) naming the bad part.
  algo_table(std::string_view spec, std::span<const std::string_view> policies) {
    std::string clean;
    for (char ch : spec)
      if (ch != ' ' && ch != '\t' && ch != '\n') clean += ch;
    std::string_view rest = clean;
    while (!rest.empty()) {
      const auto semi = rest.find(';');
      const std::string_view rule = rest.substr(0, semi);
      rest = semi == std::string_view::npos ? std::string_view{} : rest.substr(semi + 1);
      if (!rule.empty()) rules_.push_back(parse_rule(rule, policies));
    }
  }

  /// Every rule in order (a caller that must skip inapplicable rules walks them itself).
  [[nodiscard]] const std::vector<algo_rule>& rules() const noexcept { return rules_; }
  [[nodiscard]] bool empty() const noexcept { return rules_.empty(); }

 private:
  [[noreturn]] static void fail(std::string_view what, std::string_view part) {
    throw error(errc::invalid_argument, "", 0, -1, -1,
                "TUTTI_ALGO: " + std::string{what} + " in '" + std::string{part} + "'");
  }

  static std::size_t parse_bytes(std::string_view s, std::string_view rule) {
    if (s.empty()) fail("empty size", rule);
    std::size_t mult = 1;
    const char last = s.back();
    if (last == 'K' || last == 'k') mult = std::size_t{1} << 10;
    if (last == 'M' || last == 'm') mult = std::size_t{1} << 20;
    if (last == 'G' || last == 'g') mult = std::size_t{1} << 30;
    if (mult != 1) s.remove_suffix(1);
    if (s.empty()) fail("size without digits", rule);
    std::size_t v = 0;
    for (char ch : s) {
      if (ch < '0' || ch > '9') fail("bad size", rule);
      if (v > (std::numeric_limits<std::size_t>::max() - 9) / 10) fail("size too large", rule);
      v = v * 10 + static_cast<std::size_t>(ch - '0');
    }
    if (v > std::numeric_limits<std::size_t>::max() / mult) fail("size too large", rule);
    return v * mult;
  }

  static algo_rule parse_rule(std::string_view rule, std::span<const std::string_view> policies) {
    algo_rule r;
    std::string_view body = rule;
    if (const auto colon = body.find(':'); colon != std::string_view::npos) {
      const std::string_view c = body.substr(0, colon);
      bool found = false;
      for (int i = 1; i <= static_cast<int>(collective::barrier); ++i)
        if (name(static_cast<collective>(i)) == c) {
          r.coll = static_cast<collective>(i);
          found = true;
        }
      if (!found) fail("unknown collective '" + std::string{c} + "'", rule);
      body = body.substr(colon + 1);
    }
    std::string_view range;
    if (const auto at = body.find('@'); at != std::string_view::npos) {
      range = body.substr(at + 1);
      body = body.substr(0, at);
      const auto dash = range.find('-');
      if (dash == std::string_view::npos) fail("range without '-'", rule);
      if (dash > 0) r.lo = parse_bytes(range.substr(0, dash), rule);
      if (dash + 1 < range.size()) r.hi = parse_bytes(range.substr(dash + 1), rule);
      if (r.lo >= r.hi) fail("empty range", rule);
    }
    r.policy = 0;
    while (r.policy < policies.size() && policies[r.policy] != body) ++r.policy;
    if (r.policy == policies.size()) fail("unknown algorithm '" + std::string{body} + "'", rule);
    return r;
  }

  std::vector<algo_rule> rules_;
};

/// TUTTI_ALGO's rules (`spec`) for algorithm `A`: parsed against `A::candidates` where A
/// chooses among a list of policies (tutti::automatic), else none: A runs its own schedules.
template <class A>
[[nodiscard]] algo_table overrides_for(std::string_view spec) {
  if constexpr (requires { A::candidates::names; })
    return algo_table(spec, A::candidates::names);
  else
    return algo_table{};
}

}  // namespace tutti::inline v0::detail

#pragma once
/// \file
/// What tells two processes' hosts apart, for finding the ranks that share one.

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <vector>

#include "tutti/core/error.hpp"
#include "tutti/core/options.hpp"
#include "tutti/detail/cma.hpp"
#include "tutti/detail/cost.hpp"

namespace tutti::inline v0::detail {

/// This process's host: the host name, the kernel's boot id and the network namespace.
/// Processes in different network namespaces count as different hosts (they may not share an
/// address to meet at, and tests/netns makes "hosts" so); processes with one identity share
/// /dev/shm and the machine's memory. TUTTI_HOST, where set, names the host instead (for
/// containers that hide what tells hosts apart, or to group ranks of one machine as if on
/// several: all still share /dev/shm, so shared memory works between any of them).
[[nodiscard]] inline std::string host_identity() {
  if (std::string named = env_string("TUTTI_HOST"); !named.empty()) return "TUTTI_HOST=" + named;
  std::string id;
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) == 0) id += name;
  id += "/" + boot_id();
  struct stat st {};
  if (::stat("/proc/self/ns/net", &st) == 0)
    id += "/net:" + std::to_string(static_cast<unsigned long long>(st.st_ino));
  return id;
}

}  // namespace tutti::inline v0::detail

namespace tutti::inline v0 {

/// Where a communicator's ranks run (tutti::map_hosts, tutti::layered). Hosts are numbered in
/// the order of their lowest rank; ranks on a host are numbered (local rank) in rank order.
struct host_map {
  std::vector<int> host_of;   ///< each rank's host
  std::vector<int> local_of;  ///< each rank's local rank on its host
  std::vector<int> count;     ///< ranks per host
  int hosts = 0;              ///< how many hosts
  int host = 0;               ///< this rank's host
  int local_rank = 0;         ///< this rank's local rank
  int local_size = 0;         ///< ranks on this rank's host
  /// Whether every host holds the same number of ranks (what hierarchical schedules need).
  [[nodiscard]] bool uniform() const noexcept {
    for (int c : count)
      if (c != count.front()) return false;
    return true;
  }
  /// Whether ranks are numbered host by host in equal blocks (ranks 0..L-1 on the first host,
  /// L..2L-1 on the next, ...), as launchers place them: then a schedule's nearest neighbours
  /// share a host (what the cost model assumes of ring and recursive_halving across hosts).
  [[nodiscard]] bool blocked() const noexcept {
    if (!uniform() || count.empty()) return false;
    const auto l = static_cast<std::size_t>(count.front());
    for (std::size_t r = 0; r < host_of.size(); ++r)
      if (host_of[r] != static_cast<int>(r / l)) return false;
    return true;
  }
  /// The ranks on host `h`, in local-rank order.
  [[nodiscard]] std::vector<int> ranks_on(int h) const {
    std::vector<int> out;
    for (std::size_t r = 0; r < host_of.size(); ++r)
      if (host_of[r] == h) out.push_back(static_cast<int>(r));
    return out;
  }
  /// The ranks with local rank `l`, one per host that has it, in host order.
  [[nodiscard]] std::vector<int> ranks_with_local(int l) const {
    std::vector<int> out;
    for (int h = 0; h < hosts; ++h)
      for (std::size_t r = 0; r < host_of.size(); ++r)
        if (host_of[r] == h && local_of[r] == l) out.push_back(static_cast<int>(r));
    return out;
  }
};

namespace detail {
/// The network between hosts as the user describes it (TUTTI_LINK_GBPS, TUTTI_LINK_ALPHA_US):
/// 0 where unset. Not a number > 0: errc::invalid_argument, raised when a world joins. A
/// tutti::gloo world across hosts measures what is unset (detail/gloo/link_probe.hpp).
struct link_settings {
  double gbps = 0;
  double alpha_us = 0;

  [[nodiscard]] static link_settings from_env(int rank) {
    return {positive_from_env("TUTTI_LINK_GBPS", rank),
            positive_from_env("TUTTI_LINK_ALPHA_US", rank)};
  }
  /// `m` with the link's α and β where set, and, where ranks sit in equal blocks on several
  /// hosts, the hosts and ranks per host with `local` (a message's α and β inside a host).
  [[nodiscard]] cost_model apply(cost_model m, const host_map& h, double local_alpha_us,
                                 double local_beta_us_per_byte) const noexcept {
    if (h.hosts <= 1) return m;
    if (m.copy_beta_us_per_byte == 0)  // a copy costs what a byte on one host does, at most
      m.copy_beta_us_per_byte = local_beta_us_per_byte > 0
                                    ? std::min(m.beta_us_per_byte, local_beta_us_per_byte)
                                    : m.beta_us_per_byte;
    if (gbps > 0) m.beta_us_per_byte = 8e-3 / gbps;
    if (alpha_us > 0) m.alpha_us = alpha_us;
    if (h.blocked()) {
      m.hosts = h.hosts;
      m.ranks_per_host = h.local_size;
      m.local_alpha_us = local_alpha_us;
      m.local_beta_us_per_byte = local_beta_us_per_byte;
    }
    return m;
  }

 private:
  [[nodiscard]] static double positive_from_env(const char* var, int rank) {
    const std::string s = env_string(var);
    if (s.empty()) return 0;
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (end == s.c_str() || *end != '\0' || !(v > 0) || v > 1e9)
      throw error(errc::invalid_argument, "", 0, rank, -1,
                  std::string(var) + "=" + s + " is not a number > 0");
    return v;
  }
};

/// The host map from every rank's host identity (index = rank), as seen by rank `me`.
[[nodiscard]] inline host_map map_identities(const std::vector<std::string>& ids, int me) {
  host_map m;
  const std::size_t p = ids.size();
  m.host_of.assign(p, -1);
  m.local_of.assign(p, 0);
  for (std::size_t r = 0; r < p; ++r) {
    if (m.host_of[r] >= 0) continue;
    const int h = m.hosts++;
    int local = 0;
    for (std::size_t q = r; q < p; ++q)
      if (ids[q] == ids[r]) {
        m.host_of[q] = h;
        m.local_of[q] = local++;
      }
    m.count.push_back(local);
  }
  const auto i = static_cast<std::size_t>(me);
  m.host = m.host_of[i];
  m.local_rank = m.local_of[i];
  m.local_size = m.count[static_cast<std::size_t>(m.host)];
  return m;
}
}  // namespace detail

}  // namespace tutti::inline v0

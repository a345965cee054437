#pragma once
/// \file
/// Which ranks of a communicator share a host, and the communicator of those ranks
/// (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED), over the parent's transport or over shared
/// memory whatever the parent's transport:
///
///   auto world = tutti::communicator<tutti::gloo>::from_env();   // several hosts
///   tutti::host_map h = tutti::map_hosts(world);                 // h.hosts, h.local_rank ...
///   auto local = tutti::split_host<tutti::shm>(world);           // this host's ranks, over shm

#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tutti/communicator.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/options.hpp"
#include "tutti/detail/communicator_split.hpp"
#include "tutti/detail/host.hpp"
#include "tutti/detail/split.hpp"

namespace tutti::inline v0 {

/// Where a communicator's ranks run. Hosts are numbered in the order of their lowest rank;
/// ranks on a host are numbered (local rank) in the order of their ranks. A host is a host
/// name, kernel boot and network namespace (detail/host.hpp).
struct host_map {
  std::vector<int> host_of;   ///< each rank's host
  std::vector<int> local_of;  ///< each rank's local rank on its host
  std::vector<int> count;     ///< ranks per host
  int hosts = 0;              ///< how many hosts
  int host = 0;               ///< this rank's host
  int local_rank = 0;         ///< this rank's local rank
  int local_size = 0;         ///< ranks on this rank's host
  /// Whether every host holds the same number of ranks (what hierarchical schedules want).
  [[nodiscard]] bool uniform() const noexcept {
    for (int c : count)
      if (c != count.front()) return false;
    return true;
  }
  /// The ranks on host `h`, in local-rank order.
  [[nodiscard]] std::vector<int> ranks_on(int h) const {
    std::vector<int> out;
    for (std::size_t r = 0; r < host_of.size(); ++r)
      if (host_of[r] == h) out.push_back(static_cast<int>(r));
    return out;
  }
};

namespace detail {
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

/// Which of `comm`'s ranks share a host. Collective over `comm` (host memory: every transport
/// but nccl); the same map on every rank.
template <class Comm>
[[nodiscard]] host_map map_hosts(Comm& comm) {
  static_assert(
      std::is_same_v<typename Comm::memory_space, host_memory>,
      "tutti::map_hosts: the ranks' host names travel through the communicator, which "
      "must work on host memory (not tutti::nccl: map the hosts with a host communicator)");
  return detail::map_identities(detail::exchange_over(comm)(detail::host_identity()), comm.rank());
}

/// The communicator of the ranks of `comm` that share this rank's host, ranked as in `comm`,
/// over transport `Local` (default: `comm`'s own, through comm.split; tutti::shm from a parent
/// of any host-memory transport, meeting through the parent) and policy `A` (default:
/// `comm`'s). Collective over `comm`.
template <class Local = void, class A = void, class Comm>
[[nodiscard]] auto split_host(Comm& comm, const options& child_opts) {
  using T = std::conditional_t<std::is_void_v<Local>, typename Comm::transport_type, Local>;
  using P = std::conditional_t<std::is_void_v<A>, typename Comm::algorithm_type, A>;
  const host_map m = map_hosts(comm);
  const int color = m.host, key = comm.rank();
  if constexpr (std::is_same_v<T, typename Comm::transport_type>) {
    return std::move(*comm.template split<P>(color, key, child_opts));
  } else {
    static_assert(
        requires(const detail::split_plan& p, const detail::split_exchange& x) {
          T::join_split(p, x, child_opts);
        },
        "tutti::split_host<Local>: Local must be able to join a child through its parent "
        "(tutti::shm can), or be the parent's own transport");
    detail::split_plan plan;
    plan.color = color;
    plan.key = key;
    plan.members = m.ranks_on(m.host);
    plan.rank = m.local_rank;
    plan.size = m.local_size;
    return communicator<T, P>(
        std::move(*T::join_split(plan, detail::exchange_over(comm), child_opts)), child_opts);
  }
}
template <class Local = void, class A = void, class Comm>
[[nodiscard]] auto split_host(Comm& comm) {
  return split_host<Local, A>(comm, comm.opts());
}

}  // namespace tutti::inline v0

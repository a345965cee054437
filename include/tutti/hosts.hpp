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
    T child = std::move(*T::join_split(plan, detail::exchange_over(comm), child_opts));
    // Ranks of other simulated hosts on this machine (network namespaces) share its CPUs.
    if constexpr (requires(T& t) { t.share_machine(comm.transport().host_ranks()); })
      child.share_machine(comm.transport().host_ranks());
    return communicator<T, P>(std::move(child), child_opts);
  }
}
template <class Local = void, class A = void, class Comm>
[[nodiscard]] auto split_host(Comm& comm) {
  return split_host<Local, A>(comm, comm.opts());
}

}  // namespace tutti::inline v0

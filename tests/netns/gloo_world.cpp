// One rank of a tutti::gloo world, for the multi-host test (run.sh starts one per network
// namespace, with the launcher variables a multi-host torchrun would set: LOCAL_WORLD_SIZE=1,
// MASTER_ADDR = rank 0's address).
//   gloo_world check      every policy's collectives, exact values, small and 4 MiB messages;
//                         the host map, split_host over shm, a split across hosts
//   gloo_world cluster    (two ranks per namespace) tutti::cluster's levels; hierarchical and
//                         automatic all_reduce and broadcast, exact values; the link it
//                         measured when it joined, no faster than TUTTI_TEST_LINK_MAX_GBPS
//                         where that is set (run.sh: links shaped to 1 Gbit/s with tbf);
//                         a flat message inside a namespace priced as a single copy where
//                         every pair there has them
//   gloo_world kill <k>   rank k kills itself mid-loop; the others must raise peer_lost naming
//                         it within 1 s (exit 0 if they do)
// Exit status 0 = everything as expected; prints one line per finding otherwise.

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <tutti/algorithm/hierarchical.hpp>
#include <tutti/transport/cluster.hpp>
#include <tutti/transport/gloo.hpp>
#include <tutti/tutti.hpp>

namespace {

template <class P>
int check_policy() {
  auto comm = tutti::communicator<tutti::gloo, P>::from_env();
  const int p = comm.size(), r = comm.rank();
  int bad = 0;
  for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{1} << 20}) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = float((r + 1) * (i % 7));
    comm.all_reduce(std::span<float>(v), tutti::sum);
    const float ranks = float(p) * float(p + 1) / 2.0f;  // 1 + 2 + ... + p
    for (std::size_t i = 0; i < n; ++i)
      if (v[i] != ranks * float(i % 7)) {
        std::printf("rank %d: %s all_reduce n=%zu wrong at %zu\n", r, P::name, n, i);
        ++bad;
        break;
      }
    if constexpr (tutti::detail::has_broadcast<P, tutti::gloo>) {
      std::vector<int> b(n, r == 1 % p ? 42 : -1);
      comm.broadcast(std::span<int>(b), 1 % p);
      for (int x : b)
        if (x != 42) {
          std::printf("rank %d: %s broadcast n=%zu wrong\n", r, P::name, n);
          ++bad;
          break;
        }
    }
    if constexpr (tutti::detail::has_all_gather<P, tutti::gloo>) {
      std::vector<double> mine(n, double(r)), all(n * static_cast<std::size_t>(p), -1.0);
      comm.all_gather(std::span<const double>(mine), std::span<double>(all));
      for (std::size_t i = 0; i < all.size(); ++i)
        if (const std::size_t owner = i / n; all[i] != double(owner)) {
          std::printf("rank %d: %s all_gather n=%zu wrong at %zu\n", r, P::name, n, i);
          ++bad;
          break;
        }
    }
  }
  if constexpr (tutti::detail::has_barrier<P, tutti::gloo>) comm.barrier();
  return bad;
}

int kill_mode(int victim) {
  auto comm = tutti::communicator<tutti::gloo, tutti::ring>::from_env();
  std::vector<float> v(4096, 1.0f);
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto last_ok = start;
  try {
    for (int i = 0;; ++i) {
      if (comm.rank() == victim && i == 50) raise(SIGKILL);
      comm.all_reduce(std::span<float>(v), tutti::max);
      last_ok = clock::now();
      if (clock::now() - start > std::chrono::seconds(60)) {
        std::printf("rank %d: no error after 60 s\n", comm.rank());
        return 1;
      }
    }
  } catch (const tutti::error& e) {
    // The victim dies at its 50th call; ranks run within a call or two of each other.
    if (e.kind() != tutti::errc::peer_lost || e.peer() != victim) {
      std::printf("rank %d: expected peer_lost naming rank %d, got: %s\n", comm.rank(), victim,
                  e.what());
      return 1;
    }
    // The victim died after the last call that completed here: the error must follow within 1 s.
    const double s = std::chrono::duration<double>(clock::now() - last_ok).count();
    std::printf("rank %d: raised %.3f s after its last completed call: %s\n", comm.rank(), s,
                e.what());
    return s < 1.0 ? 0 : 1;
  }
}

}  // namespace

/// Across hosts: each rank is a host of its own (one per namespace), so split_host gives a
/// world of one over shared memory; a parity split over gloo between namespaces, keys
/// reversed, sums exactly its members' ranks.
int check_groups() {
  auto comm = tutti::communicator<tutti::gloo>::from_env();
  const int p = comm.size(), r = comm.rank();
  int bad = 0;
  const tutti::host_map h = tutti::map_hosts(comm);
  if (h.hosts != p || h.local_size != 1 || h.local_rank != 0 || h.host != r) {
    std::printf("rank %d: host map: %d hosts, host %d, local %d of %d\n", r, h.hosts, h.host,
                h.local_rank, h.local_size);
    ++bad;
  }
  auto local = tutti::split_host<tutti::shm>(comm);
  std::vector<int> one{r};
  local.all_reduce(std::span<int>(one), tutti::sum);
  if (local.size() != 1 || one[0] != r) {
    std::printf("rank %d: split_host over shm: size %d, sum %d\n", r, local.size(), one[0]);
    ++bad;
  }
  auto half = comm.split(r % 2, -r);
  std::vector<int> v{r, 1};
  half->all_reduce(std::span<int>(v), tutti::sum);
  int sum = 0, count = 0, above = 0;
  for (int q = r % 2; q < p; q += 2) {
    sum += q;
    ++count;
    if (q > r) ++above;
  }
  if (v[0] != sum || v[1] != count || half->rank() != above) {
    std::printf("rank %d: parity split: sum %d of %d, rank %d of %d\n", r, v[0], sum, half->rank(),
                half->size());
    ++bad;
  }
  return bad;
}

/// Two ranks per namespace: tutti::cluster finds the hosts (one per namespace), joins each
/// host's ranks over shm and the ranks with equal local rank across hosts over gloo, and
/// hierarchical and automatic sum exactly.
template <class P>
int check_cluster() {
  auto comm = tutti::communicator<tutti::cluster, P>::from_env();
  const int p = comm.size(), r = comm.rank();
  auto& t = comm.transport();
  int bad = 0;
  const int per_host = std::atoi(std::getenv("LOCAL_WORLD_SIZE"));
  if (!t.two_level() || t.hosts().hosts != p / per_host || t.local().size() != per_host) {
    std::printf("rank %d: %s levels: %d hosts, %d on this one\n", r, P::name, t.hosts().hosts,
                t.local().size());
    ++bad;
  }
  // The link measured at join (TUTTI_LINK_GBPS unset): every rank uses rank 0's numbers, which
  // a link shaped to a rate cannot beat (a loaded machine only makes them slower).
  const tutti::cost_model m = t.world_costs();
  const double gbps = 8e-3 / m.beta_us_per_byte;
  if (r == 0) std::printf("link measured: %.3g Gbit/s, %.3g us one way\n", gbps, m.alpha_us);
  if (const char* max = std::getenv("TUTTI_TEST_LINK_MAX_GBPS"); max && gbps > std::atof(max)) {
    std::printf("rank %d: the link measured %.3g Gbit/s, above its shaping (%s)\n", r, gbps, max);
    ++bad;
  }
  // A flat policy's message between two ranks of a namespace rides gloo's single copies where
  // every such pair has them (every rank's view gathered here), else TCP: automatic prices it so.
  int copies = 1;
  for (int q = 0; q < p; ++q)
    if (q != r && q / per_host == r / per_host && !t.single_copy(q)) copies = 0;
  std::vector<int> every(static_cast<std::size_t>(p));
  comm.all_gather(std::span<const int>(&copies, 1), std::span<int>(every));
  const bool all_copies = std::ranges::count(every, 1) == p;
  const double flat_local =
      all_copies ? tutti::gloo::single_copy_alpha_us : tutti::gloo::costs.alpha_us;
  if (per_host > 1 && m.flat_local_alpha_us != flat_local) {
    std::printf(
        "rank %d: a flat message inside a host priced at %g us, not %g (single copies: %s)\n", r,
        m.flat_local_alpha_us, flat_local, all_copies ? "every pair" : "not every pair");
    ++bad;
  }
  if (r == 0 && per_host > 1)
    std::printf("single copies inside every host: %s\n", all_copies ? "yes" : "no");
  for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{1} << 20}) {
    std::vector<std::int64_t> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = (r + 1) * static_cast<std::int64_t>(i % 7);
    comm.all_reduce(std::span<std::int64_t>(v), tutti::sum);
    for (std::size_t i = 0; i < n; ++i)
      if (v[i] != std::int64_t{p} * (p + 1) / 2 * static_cast<std::int64_t>(i % 7)) {
        std::printf("rank %d: %s cluster all_reduce n=%zu wrong at %zu\n", r, P::name, n, i);
        ++bad;
        break;
      }
    for (int root = 0; root < p; ++root) {
      std::vector<int> b(n, r == root ? root : -1);
      comm.broadcast(std::span<int>(b), root);
      if (b[n - 1] != root || b[0] != root) {
        std::printf("rank %d: %s cluster broadcast from %d wrong\n", r, P::name, root);
        ++bad;
      }
    }
  }
  return bad;
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  try {
    if (mode == "kill" && argc > 2) return kill_mode(std::atoi(argv[2]));
    if (mode == "cluster")
      return check_cluster<tutti::hierarchical>() + check_cluster<tutti::automatic>() == 0 ? 0 : 1;
    if (mode != "check") {
      std::fprintf(stderr, "usage: gloo_world check | cluster | kill <rank>\n");
      return 2;
    }
    int bad = check_policy<tutti::ring>() + check_policy<tutti::tree>() +
              check_policy<tutti::recursive_halving>() + check_policy<tutti::native>() +
              check_policy<tutti::automatic>() + check_groups();
    return bad == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
}

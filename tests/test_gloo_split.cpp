// Sub-communicators over tutti::gloo across processes on loopback: every color/key pattern
// with every collective on each child (tests/split_checks.hpp), a mesh, a rank killed inside a
// group, and a child meeting through the parent's store under keys of its own.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <tutti/bootstrap/spawn.hpp>
#include <tutti/hosts.hpp>
#include <tutti/mesh.hpp>
#include <tutti/transport/gloo.hpp>
#include <tutti/transport/shm.hpp>

#include "fork_ranks.hpp"
#include "harness.hpp"
#include "scoped_env.hpp"
#include "split_checks.hpp"

namespace {

// Every size in Release; under the sanitizers (each TCP message costs much more there) 1, 2, a
// power of two and an odd one.
std::vector<int> sizes() {
  if (harness::sanitized) return {1, 2, 3, 4};
  return {1, 2, 3, 4, 5, 6, 7, 8};
}

}  // namespace

TEST_CASE("gloo split: every pattern, every collective on each child, single copies and TCP") {
  for (const bool tcp_only : {false, true}) {
    CAPTURE(tcp_only);
    scoped_env env;
    env.gloo_tcp_only(tcp_only);
    for (int p : sizes()) {
      if (tcp_only && p > 4) continue;  // the TCP path is the same at every size
      CAPTURE(p);
      const int rc = tutti::spawn(p, [] {
        auto comm = tutti::communicator<tutti::gloo>::from_env();
        const std::string bad = split_checks::all_patterns(comm);
        if (!bad.empty()) std::fprintf(stderr, "%s\n", bad.c_str());
        // A child counts its parent's ranks on this host among its own: they share the CPUs.
        auto alone = comm.split(comm.rank(), 0);
        if (alone->transport().host_ranks() != comm.size()) {
          std::fprintf(stderr, "rank %d: a 1-rank child counts %d ranks on this host, not %d\n",
                       comm.rank(), alone->transport().host_ranks(), comm.size());
          return 3;
        }
        return bad.empty() ? 0 : 1;
      });
      CHECK(rc == 0);
    }
  }
}

TEST_CASE("gloo mesh: 2x2 with named dimensions, sums along each") {
  const int rc = tutti::spawn(4, [] {
    auto comm = tutti::communicator<tutti::gloo>::from_env();
    tutti::mesh m(comm, {2, 2}, {"dp", "tp"});
    const int r = comm.rank();
    std::vector<int> v{r};
    m["tp"].all_reduce(std::span<int>(v), tutti::sum);
    if (v[0] != (r / 2) * 4 + 1) return 1;
    v = {r};
    m["dp"].all_reduce(std::span<int>(v), tutti::sum);
    if (v[0] != 2 + 2 * (r % 2)) return 2;
    return m.coord("dp") == r / 2 && m.coord("tp") == r % 2 ? 0 : 3;
  });
  CHECK(rc == 0);
}

TEST_CASE("gloo split: a rank killed inside a group is named by its group and by the parent") {
  fork_ranks::temp_dir dir;
  split_checks::check_killed_in_group(
      [&](int r, int n) { return tutti::communicator<tutti::gloo>::from_url(dir.url(), r, n); });
}

TEST_CASE("gloo split_host<shm>: the ranks of this host over shared memory, from a gloo world") {
  const int rc = tutti::spawn(4, [] {
    auto comm = tutti::communicator<tutti::gloo>::from_env();
    const tutti::host_map h = tutti::map_hosts(comm);
    if (h.hosts != 1 || h.local_size != 4 || h.local_rank != comm.rank()) return 1;
    auto local = tutti::split_host<tutti::shm>(comm);
    const std::string bad = split_checks::check_child(local, {0, 1, 2, 3});
    if (!bad.empty()) std::fprintf(stderr, "rank %d: %s\n", comm.rank(), bad.c_str());
    return bad.empty() ? 0 : 2;
  });
  CHECK(rc == 0);
}

// tutti::cluster (layered<shm, gloo>) and tutti::hierarchical across processes on this machine,
// its ranks grouped into hosts with TUTTI_HOST (every "host" still shares /dev/shm: the levels
// are real shm and gloo worlds, only the grouping is chosen): the host map and levels, every
// collective through hierarchical and automatic with exact values at several host shapes,
// uneven hosts (flat), and a rank killed inside a host. Across network namespaces, the same
// runs in tests/netns (gloo_world cluster).

#include <signal.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <tutti/algorithm/hierarchical.hpp>
#include <tutti/bootstrap/spawn.hpp>
#include <tutti/transport/cluster.hpp>

#include "fork_ranks.hpp"
#include "split_checks.hpp"

namespace {

/// Puts rank r (of RANK) on host hosts_of[r] before it joins.
void place(const std::vector<int>& hosts_of) {
  const int r = std::atoi(std::getenv("RANK"));
  ::setenv("TUTTI_HOST", ("h" + std::to_string(hosts_of[static_cast<std::size_t>(r)])).c_str(), 1);
}

/// all_gather (out of place and in place) and reduce_scatter (sum, max) of `n` elements per
/// rank; the first wrong value, or "".
template <class Comm>
std::string check_blocks(Comm& comm, std::size_t n) {
  const int p = comm.size(), r = comm.rank();
  const auto at = [](int q, std::size_t i) {  // rank q's element i
    return static_cast<std::int32_t>(q * 100003 + static_cast<int>(i % 65521));
  };
  const std::size_t total = n * static_cast<std::size_t>(p);
  std::vector<std::int32_t> mine(n), all(total, -1), in_place(total, -1);
  for (std::size_t i = 0; i < n; ++i)
    mine[i] = in_place[static_cast<std::size_t>(r) * n + i] = at(r, i);
  comm.all_gather(std::span<const std::int32_t>(mine), std::span<std::int32_t>(all));
  comm.all_gather(std::span<std::int32_t>(in_place));
  for (std::size_t i = 0; i < total; ++i) {
    const std::int32_t want = at(static_cast<int>(i / n), i % n);
    if (all[i] != want) return "all_gather n=" + std::to_string(n) + " at " + std::to_string(i);
    if (in_place[i] != want)
      return "all_gather in place n=" + std::to_string(n) + " at " + std::to_string(i);
  }
  // Rank q's input: element i is at(q, i) (block b of it goes to rank b).
  std::vector<std::int32_t> in(total), sum(n, -1), hi(n, -1);
  for (std::size_t i = 0; i < total; ++i) in[i] = at(r, i);
  comm.reduce_scatter(std::span<const std::int32_t>(in), std::span<std::int32_t>(sum), tutti::sum);
  comm.reduce_scatter(std::span<const std::int32_t>(in), std::span<std::int32_t>(hi), tutti::max);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t j = static_cast<std::size_t>(r) * n + i;
    std::int32_t s = 0;
    for (int q = 0; q < p; ++q) s += at(q, j);
    if (sum[i] != s) return "reduce_scatter n=" + std::to_string(n) + " at " + std::to_string(i);
    if (hi[i] != at(p - 1, j))
      return "reduce_scatter max n=" + std::to_string(n) + " at " + std::to_string(i);
  }
  return {};
}

/// all_reduce (sum, avg), broadcast and reduce from every root, all_gather and reduce_scatter,
/// at counts around the ranks per host; the first wrong value, or "".
template <class Comm>
std::string check_rooted(Comm& comm) {
  const int p = comm.size(), r = comm.rank();
  for (std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{1000}, std::size_t{1} << 18}) {
    if (auto bad = check_blocks(comm, n < 1000 ? n : n / 16); !bad.empty()) return bad;
    std::vector<std::int64_t> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = (r + 1) * static_cast<std::int64_t>(i % 97);
    comm.all_reduce(std::span<std::int64_t>(v), tutti::sum);
    for (std::size_t i = 0; i < n; ++i)
      if (v[i] != static_cast<std::int64_t>(p) * (p + 1) / 2 * static_cast<std::int64_t>(i % 97))
        return "all_reduce n=" + std::to_string(n) + " at " + std::to_string(i);
    std::vector<double> a(n, 2.0 * r);
    comm.all_reduce(std::span<double>(a), tutti::avg);
    for (double x : a)
      if (x != p - 1.0) return "all_reduce avg n=" + std::to_string(n);
    for (int root = 0; root < p; ++root) {
      std::vector<int> b(n, r == root ? root + 100 : -1);
      comm.broadcast(std::span<int>(b), root);
      for (int x : b)
        if (x != root + 100) return "broadcast root " + std::to_string(root);
      std::vector<int> in(n, r + 1), out(n, -1);
      comm.reduce(std::span<const int>(in), std::span<int>(out), tutti::sum, root);
      if (r == root)
        for (int x : out)
          if (x != p * (p + 1) / 2) return "reduce root " + std::to_string(root);
    }
  }
  return {};
}

/// Runs p ranks on the hosts `hosts_of` names, each checking the levels and every collective
/// through P; returns spawn's status.
template <class P>
int run_shape(const std::vector<int>& hosts_of) {
  return tutti::spawn(static_cast<int>(hosts_of.size()), [hosts_of] {
    place(hosts_of);
    auto comm = tutti::communicator<tutti::cluster, P>::from_env();
    const int p = comm.size(), r = comm.rank();
    auto& t = comm.transport();
    const tutti::host_map& h = t.hosts();
    std::string bad;
    if (h.host_of[static_cast<std::size_t>(r)] != h.host || t.local().size() != h.local_size ||
        t.local().rank() != h.local_rank)
      bad = "the host level";
    if (t.two_level() != h.uniform()) bad = "two_level";
    if (t.two_level() && (t.cross().size() != h.hosts || t.cross().rank() != h.host))
      bad = "the cross level";
    std::vector<int> all(static_cast<std::size_t>(p));
    for (int q = 0; q < p; ++q) all[static_cast<std::size_t>(q)] = q;
    if (bad.empty()) bad = split_checks::check_child(comm, all);
    if (bad.empty()) bad = check_rooted(comm);
    if (!bad.empty()) std::fprintf(stderr, "rank %d (%s): %s\n", r, P::name, bad.c_str());
    return bad.empty() ? 0 : 1;
  });
}

}  // namespace

TEST_CASE("cluster: hierarchical and automatic at host shapes 2x2, 3x2, 2x3, 4x1, 1x4") {
  // Ranks numbered host by host, hosts taking turns, and neither (all_gather and
  // reduce_scatter take a path of their own for each: host_firsts, level_major).
  const std::vector<std::vector<int>> shapes{
      {0, 0, 1, 1}, {0, 0, 1, 1, 2, 2}, {0, 1, 0, 1, 0, 1}, {0, 1, 2, 3},
      {0, 0, 0, 0}, {1, 0, 0, 1},       {2, 0, 1, 1, 0, 2}};
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    CAPTURE(i);
    CHECK(run_shape<tutti::hierarchical>(shapes[i]) == 0);
    CHECK(run_shape<tutti::automatic>(shapes[i]) == 0);
  }
}

TEST_CASE("hierarchical: where each rank's block sits, by host shape") {
  const auto hosts = [](std::vector<std::string> ids) {
    return tutti::detail::map_identities(ids, 0);
  };
  using v = std::vector<std::size_t>;
  // Host by host: each host's first rank, and no reordering needed.
  CHECK(tutti::detail::host_firsts(hosts({"a", "a", "b", "b"})) == v{0, 2});
  CHECK(tutti::detail::host_firsts(hosts({"a", "b", "c"})) == v{0, 1, 2});
  // Hosts taking turns: not consecutive, but local rank-major is rank order already.
  CHECK(tutti::detail::host_firsts(hosts({"a", "b", "a", "b"})).empty());
  CHECK(tutti::detail::level_major(hosts({"a", "b", "a", "b"})).empty());
  // Neither: ranks 0 and 3 on one host, 1 and 2 on the other.
  CHECK(tutti::detail::host_firsts(hosts({"b", "a", "a", "b"})).empty());
  CHECK(tutti::detail::level_major(hosts({"b", "a", "a", "b"})) == v{0, 1, 3, 2});
  CHECK(tutti::detail::level_major(hosts({"c", "a", "b", "b", "a", "c"})) == v{0, 1, 2, 5, 4, 3});
}

TEST_CASE("cluster: hosts with different numbers of ranks run flat, with the same results") {
  CHECK(run_shape<tutti::hierarchical>({0, 0, 1}) == 0);
  CHECK(run_shape<tutti::hierarchical>({1, 0, 0, 2, 1}) == 0);
}

TEST_CASE(
    "cluster: automatic predicts hierarchical for large all_reduce, all_gather, reduce_scatter "
    "across hosts") {
  tutti::cost_model m = tutti::gloo::costs;
  m.hosts = 2;
  m.ranks_per_host = 2;
  m.local_alpha_us = tutti::shm::costs.alpha_us;
  m.local_beta_us_per_byte = tutti::shm::costs.beta_us_per_byte;
  const auto big = tutti::detail::cost_inputs(64 << 20, 4, m);
  const double hier = tutti::detail::predicted_cost<tutti::hierarchical>(
      tutti::detail::collective::all_reduce, big);
  const double ring =
      tutti::detail::predicted_cost<tutti::ring>(tutti::detail::collective::all_reduce, big);
  CHECK(hier < ring);
  // all_gather and reduce_scatter of 64 MiB in all over 1 Gbit/s links: a host link carries
  // half of it under hierarchical, three quarters under a ring.
  m.beta_us_per_byte = 1.0 / 125;
  const auto gathered = tutti::detail::cost_inputs(64 << 20, 4, m);
  for (auto k :
       {tutti::detail::collective::all_gather, tutti::detail::collective::reduce_scatter}) {
    CAPTURE(static_cast<int>(k));
    const double h = tutti::detail::predicted_cost<tutti::hierarchical>(k, gathered);
    const double r = tutti::detail::predicted_cost<tutti::ring>(k, gathered);
    CHECK(h < r);
    CHECK(r / h > 1.4);
  }
  tutti::cost_model flat = tutti::gloo::costs;
  CHECK(!tutti::hierarchical::cost(tutti::detail::collective::all_reduce,
                                   tutti::detail::cost_inputs(64 << 20, 4, flat))
             .has_value());
}

TEST_CASE("cluster: a rank killed mid all_reduce is named, by world rank, on every level") {
  fork_ranks::shared_report rep;
  const int n = 4;
  fork_ranks::temp_dir dir;
  const auto status = fork_ranks::run_ranks(n, [&](int r) {
    ::setenv("TUTTI_HOST", r < 2 ? "h0" : "h1", 1);
    auto comm = tutti::communicator<tutti::cluster, tutti::hierarchical>::from_url(dir.url(), r, n);
    std::vector<float> v(1 << 16, 1.0f);
    return fork_ranks::expect_error(rep.operator->(), r, [&] {
      for (int i = 0;; ++i) {
        if (r == 3 && i == 5) raise(SIGKILL);
        comm.all_reduce(std::span<float>(v), tutti::max);
      }
    });
  });
  CHECK(WIFSIGNALED(status[3]));
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    CAPTURE(std::string(rep->what[r]));
    CHECK(fork_ranks::exited_with(status[static_cast<std::size_t>(r)], 0));
    // Rank 3's host neighbour (2) and its partner across hosts (1) see it die; rank 0 hears
    // of it through an abort, or sees it in the world.
    if (r != 0) CHECK(rep->peer[r] == 3);
    // A level's error reads in the world's terms: the world's call, then the level, how its
    // rank numbers read and its own call, once each.
    const std::string what = rep->what[r];
    CHECK(what.find("rank 3") != std::string::npos);  // named by its world rank, also on rank 0
    CHECK(what.starts_with("tutti: all_reduce #"));
    CHECK(what.find("tutti:", 1) == std::string::npos);
    if (r == 1) CHECK(what.find("(its ranks 0, 1 are ranks 1, 3)") != std::string::npos);
    if (r == 2)
      CHECK((what.find("(its ranks 0, 1 are ranks 2, 3)") != std::string::npos ||
             what.find("(its ranks 0, 1 are ranks 0, 2)") != std::string::npos));
  }
}

TEST_CASE("cluster: a level's rank numbers, as its errors give them in the world's") {
  using tutti::detail::level_ranks;
  CHECK(level_ranks({5}) == "its rank 0 is rank 5");
  CHECK(level_ranks({2, 3}) == "its ranks 0, 1 are ranks 2, 3");
  CHECK(level_ranks({0, 4, 9, 12, 16, 20, 24, 28}) ==
        "its ranks 0, 1, 2, 3, 4, 5, 6, 7 are ranks 0, 4, 9, 12, 16, 20, 24, 28");
  std::vector<int> across, block, odd;
  for (int k = 0; k < 16; ++k) {
    across.push_back(8 * k + 3);  // local rank 3 of 16 hosts of 8, numbered host by host
    block.push_back(32 + k);      // the third host of 16 ranks
    odd.push_back(k < 9 ? k : 2 * k);
  }
  CHECK(level_ranks(across) == "its rank k is rank 8k + 3");
  CHECK(level_ranks(block) == "its rank k is rank k + 32");
  CHECK(level_ranks(odd) ==
        "its ranks 0, 1, 2, 3, 4, 5, 6, 7, ... are ranks 0, 1, 2, 3, 4, 5, 6, 7, ...");
}

namespace {

/// α and β of a flat tutti::gloo world of 4 ranks on two hosts (TUTTI_HOST h0 h0 h1 h1), with
/// `env` set on every rank before it joins, and of a split child spanning both hosts; checks
/// that every rank and the child see the same numbers and that `expect` holds. spawn's status.
template <class Expect>
int run_link(const std::vector<std::pair<const char*, const char*>>& env, Expect expect) {
  return tutti::spawn(4, [&env, &expect] {
    place({0, 0, 1, 1});
    for (const auto& [k, v] : env) ::setenv(k, v, 1);
    auto comm = tutti::communicator<tutti::gloo>::from_env();
    const tutti::cost_model m = comm.transport().world_costs();
    const std::vector<double> mine{m.alpha_us, m.beta_us_per_byte};
    std::vector<double> all(8);
    comm.all_gather(std::span<const double>(mine), std::span<double>(all));
    auto child = comm.split(comm.rank() % 2, comm.rank());  // {0, 2} and {1, 3}: both hosts
    const tutti::cost_model c = child->transport().world_costs();
    std::string bad;
    for (std::size_t q = 0; q < 4; ++q)
      if (all[2 * q] != mine[0] || all[2 * q + 1] != mine[1])
        bad = "rank " + std::to_string(q) + " sees another link";
    if (c.alpha_us != m.alpha_us || c.beta_us_per_byte != m.beta_us_per_byte || c.hosts != 2)
      bad = "the split child sees another link";
    if (!(m.alpha_us > 0) || !(m.beta_us_per_byte > 0) || m.hosts != 2 || m.ranks_per_host != 2)
      bad = "not a link across 2 hosts of 2";
    if (bad.empty()) bad = expect(m);
    if (!bad.empty())
      std::fprintf(stderr, "rank %d: alpha %.17g us, beta %.17g us/B: %s\n", comm.rank(),
                   m.alpha_us, m.beta_us_per_byte, bad.c_str());
    return bad.empty() ? 0 : 1;
  });
}

}  // namespace

TEST_CASE("gloo across hosts: the link is measured where TUTTI_LINK_GBPS / _ALPHA_US are unset") {
  const auto none = [](const tutti::cost_model&) { return std::string(); };
  // These "hosts" share a machine: TCP between them, as between real hosts.
  const std::pair<const char*, const char*> tcp{"TUTTI_GLOO_CMA", "0"};
  // Measured: any positive numbers, the same on every rank and in the child (run_link).
  CHECK(run_link({tcp}, none) == 0);
  // Both set: nothing measured, exactly what was set.
  CHECK(run_link({tcp, {"TUTTI_LINK_GBPS", "25"}, {"TUTTI_LINK_ALPHA_US", "7"}},
                 [](const tutti::cost_model& m) {
                   return m.alpha_us == 7.0 && m.beta_us_per_byte == 8e-3 / 25 ? "" : "not as set";
                 }) == 0);
  // Only the speed set: it stands, the latency is measured.
  CHECK(run_link({tcp, {"TUTTI_LINK_GBPS", "25"}}, [](const tutti::cost_model& m) {
          return m.beta_us_per_byte == 8e-3 / 25 ? "" : "TUTTI_LINK_GBPS not kept";
        }) == 0);
  // Probe off: Gloo's loopback fit, as before the probe; inside a host too (TCP there).
  CHECK(run_link({tcp, {"TUTTI_LINK_PROBE", "0"}}, [](const tutti::cost_model& m) {
          return m.alpha_us == tutti::gloo::costs.alpha_us &&
                         m.beta_us_per_byte == tutti::gloo::costs.beta_us_per_byte &&
                         m.local_alpha_us == tutti::gloo::costs.alpha_us &&
                         m.local_beta_us_per_byte == tutti::gloo::costs.beta_us_per_byte
                     ? ""
                     : "not the loopback fit";
        }) == 0);
  // Single copies between the hosts and inside them (where this machine allows them): their
  // fit, not measured.
  if (fork_ranks::siblings_can_read_memory())
    CHECK(run_link({}, [](const tutti::cost_model& m) {
            return m.alpha_us == tutti::gloo::single_copy_alpha_us &&
                           m.beta_us_per_byte == tutti::gloo::single_copy_beta_us_per_byte &&
                           m.local_alpha_us == tutti::gloo::single_copy_alpha_us &&
                           m.local_beta_us_per_byte == tutti::gloo::single_copy_beta_us_per_byte
                       ? ""
                       : "not the single copies' fit";
          }) == 0);
}

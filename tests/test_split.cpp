// Sub-communicators (communicator::split, group) and tutti::mesh on inproc (threads) and shm
// (processes): every collective on the children of every color/key pattern at world sizes 1-8,
// nested splits, groups, mismatched and invalid calls, a rank that fails or dies inside a group.

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <tutti/algorithm/automatic.hpp>
#include <tutti/algorithm/recursive_doubling.hpp>
#include <tutti/algorithm/recursive_halving.hpp>
#include <tutti/algorithm/ring.hpp>
#include <tutti/algorithm/tree.hpp>
#include <tutti/hosts.hpp>
#include <tutti/mesh.hpp>
#include <tutti/run.hpp>
#include <tutti/transport/shm.hpp>

#include "fork_ranks.hpp"
#include "split_checks.hpp"

namespace {

using split_checks::all_patterns;
using split_checks::check_child;

/// Collects the first failure from the ranks of an inproc world.
struct first_failure {
  std::mutex mu;
  std::string text;
  void add(const std::string& s) {
    std::lock_guard lock(mu);
    if (text.empty() && !s.empty()) text = s;
  }
};

}  // namespace

TEST_CASE("inproc split: every pattern, world sizes 1-8, every collective on each child") {
  for (int p = 1; p <= 8; ++p) {
    CAPTURE(p);
    first_failure f;
    // A rank that finds a wrong result returns early, and the others then raise peer_lost:
    // keep the first rank's own text, which comes before the others' exceptions.
    try {
      tutti::inproc::run(p, [&](auto& comm) { f.add(all_patterns(comm)); });
    } catch (const std::exception& e) {
      f.add(e.what());
    }
    CHECK(f.text == "");
  }
}

TEST_CASE("inproc split: nested splits, another policy, parent and child interleaved") {
  for (int p : {4, 6, 8}) {
    CAPTURE(p);
    first_failure f;
    tutti::inproc::run(p, [&](auto& comm) {
      const int r = comm.rank();
      // Halves by parity, ranked by parent rank; then pairs inside each half.
      auto half = comm.split(r % 2, r);
      std::vector<int> half_members;
      for (int q = r % 2; q < p; q += 2) half_members.push_back(q);
      auto pair = half->split(half->rank() / 2, -half->rank());
      std::vector<int> pair_members;
      const int base = (half->rank() / 2) * 2;
      for (int i = std::min(base + 1, half->size() - 1); i >= base; --i)
        pair_members.push_back(half_members[static_cast<std::size_t>(i)]);
      f.add(check_child(*pair, pair_members));
      // A child on another policy than its parent's.
      auto ring = comm.template split<tutti::ring>(0, -r);
      std::vector<std::int32_t> x{r, 1};
      ring->all_reduce(std::span<std::int32_t>(x), tutti::sum);
      if (ring->rank() != p - 1 - r || x[0] != p * (p - 1) / 2 || x[1] != p)
        f.add("the ring child's rank or sum is wrong");
      // A child's async work queued while the parent runs a collective: both complete.
      std::vector<std::int32_t> mine{r}, all{r};
      auto w = half->all_reduce_async(std::span<std::int32_t>(mine), tutti::sum);
      comm.all_reduce(std::span<std::int32_t>(all), tutti::sum);
      w.wait();
      std::int32_t want = 0;
      for (int q : half_members) want += q;
      if (mine[0] != want || all[0] != p * (p - 1) / 2) f.add("interleaved sums are wrong");
      f.add(check_child(*half, half_members));
      // Children wait as crowded as the world they came from: its other threads still run.
      if (comm.transport().machine_ranks() != p || half->transport().machine_ranks() != p ||
          pair->transport().machine_ranks() != p)
        f.add("a child's machine_ranks is not its parent's " + std::to_string(p));
    });
    CHECK(f.text == "");
  }
}

TEST_CASE("inproc group: a listed subset in the listed order, nothing elsewhere") {
  first_failure f;
  tutti::inproc::run(6, [&](auto& comm) {
    const int r = comm.rank();
    const std::vector<int> ranks{4, 1, 5};
    auto g = comm.group(ranks);
    if (g.has_value() != (r == 4 || r == 1 || r == 5)) f.add("membership of the group");
    if (g) f.add(check_child(*g, ranks));
    auto solo = comm.group(std::vector<int>{2});
    if (solo.has_value() != (r == 2)) f.add("membership of the group of one");
    if (solo) f.add(check_child(*solo, {2}));
    if (comm.group(std::vector<int>{}).has_value()) f.add("the empty group has a member");
  });
  CHECK(f.text == "");
}

TEST_CASE("inproc group: ranks passing different lists all raise mismatch") {
  std::atomic<int> mismatches{0};
  CHECK_THROWS_AS(tutti::inproc::run(3,
                                     [&](auto& comm) {
                                       std::vector<int> ranks{0, 1, 2};
                                       if (comm.rank() == 2) ranks = {0, 1};
                                       try {
                                         (void)comm.group(ranks);
                                       } catch (const tutti::error& e) {
                                         if (e.kind() == tutti::errc::mismatch) ++mismatches;
                                         throw;
                                       }
                                     }),
                  tutti::error);
  CHECK(mismatches.load() == 3);
}

TEST_CASE("inproc split: its errors name split, and the collective inside that raised") {
  // A split against another rank's all_reduce: the all_gather split runs meets it.
  std::atomic<int> named{0};
  CHECK_THROWS_AS(tutti::inproc::run(2,
                                     [&](auto& comm) {
                                       try {
                                         if (comm.rank() == 0) {
                                           (void)comm.split(0, 0);
                                         } else {
                                           std::vector<std::int64_t> v(6);
                                           comm.all_reduce(std::span<std::int64_t>(v), tutti::sum);
                                         }
                                       } catch (const tutti::error& e) {
                                         if (comm.rank() == 0 && e.collective() == "split" &&
                                             e.kind() == tutti::errc::mismatch &&
                                             e.reason().starts_with("its all_gather: "))
                                           ++named;
                                         throw;
                                       }
                                     }),
                  tutti::error);
  CHECK(named.load() == 1);
  // A split of a communicator an earlier error broke, and a group of it.
  tutti::inproc::run(2, [](auto& comm) {
    std::vector<int> v(comm.rank() == 0 ? 3 : 4);
    CHECK_THROWS_AS(comm.all_reduce(std::span<int>(v), tutti::sum), tutti::error);
    const std::string split_error = ": split #2 on rank " + std::to_string(comm.rank()) +
                                    " (peer " + std::to_string(1 - comm.rank()) +
                                    "): its all_gather: communicator unusable after";
    CHECK_THROWS_WITH_AS((void)comm.split(0, 0), doctest::Contains(split_error.c_str()),
                         tutti::error);
    CHECK_THROWS_WITH_AS((void)comm.group(std::vector<int>{0}),
                         doctest::Contains(": group #3 on rank"), tutti::error);
  });
}

TEST_CASE("inproc group and split: bad rank lists raise invalid_argument on every rank") {
  for (const std::vector<int>& bad :
       {std::vector<int>{0, 0}, std::vector<int>{0, 3}, std::vector<int>{-1}}) {
    std::atomic<int> invalid{0};
    CHECK_THROWS_AS(tutti::inproc::run(3,
                                       [&](auto& comm) {
                                         try {
                                           (void)comm.group(bad);
                                         } catch (const tutti::error& e) {
                                           if (e.kind() == tutti::errc::invalid_argument) ++invalid;
                                           throw;
                                         }
                                       }),
                    tutti::error);
    CHECK(invalid.load() == 3);
  }
}

TEST_CASE("inproc split: a rank that fails is named in its group, not waited for") {
  std::atomic<int> named{0};
  tutti::options o;
  o.timeout = std::chrono::seconds(120);  // a missed propagation would show as a timeout
  CHECK_THROWS_WITH_AS(
      tutti::inproc::run(
          4,
          [&](auto& comm) {
            auto half = comm.split(comm.rank() % 2, 0);
            if (comm.rank() == 3) throw std::runtime_error("rank 3 gives up");
            std::vector<float> v(8, 1.0f);
            try {
              half->all_reduce(std::span<float>(v), tutti::sum);
            } catch (const tutti::error& e) {
              if (comm.rank() == 1 && e.kind() == tutti::errc::peer_lost && e.peer() == 1) ++named;
              throw;
            }
          },
          o),
      "rank 3 gives up", std::runtime_error);
  CHECK(named.load() == 1);
}

TEST_CASE("mesh: 2x2, 2x3 and 2x2x2 on inproc; coordinates and sums along every dimension") {
  const std::vector<std::vector<int>> shapes{{2, 2}, {2, 3}, {3, 2}, {2, 2, 2}, {1, 4}, {5}};
  for (const auto& shape : shapes) {
    int p = 1;
    for (int s : shape) p *= s;
    CAPTURE(p);
    first_failure f;
    tutti::inproc::run(p, [&](auto& comm) {
      using comm_t = std::remove_reference_t<decltype(comm)>;
      tutti::mesh<comm_t> m(comm, shape);
      const int r = comm.rank();
      // Row-major coordinates: the last dimension varies fastest.
      int rest = r;
      for (std::size_t d = shape.size(); d-- > 0;) {
        if (m.coords()[d] != rest % shape[d]) f.add("coordinate " + std::to_string(d));
        rest /= shape[d];
      }
      if (m.rank_at(m.coords()) != r) f.add("rank_at");
      for (std::size_t d = 0; d < shape.size(); ++d) {
        auto& c = m.along(d);
        if (c.size() != shape[d] || c.rank() != m.coords()[d]) f.add("dimension's rank or size");
        // The members along d: this rank's coordinates with coordinate d running.
        std::vector<int> members;
        std::vector<int> at = m.coords();
        for (int i = 0; i < shape[d]; ++i) {
          at[d] = i;
          members.push_back(m.rank_at(at));
        }
        f.add(check_child(c, members));
      }
    });
    CHECK(f.text == "");
  }
}

TEST_CASE("mesh: named dimensions, and the arguments it refuses") {
  tutti::inproc::run(4, [](auto& comm) {
    using comm_t = std::remove_reference_t<decltype(comm)>;
    tutti::mesh<comm_t> m(comm, {2, 2}, {"dp", "tp"});
    CHECK(m.size("dp") == 2);
    CHECK(m.coord("dp") == comm.rank() / 2);
    CHECK(m.coord("tp") == comm.rank() % 2);
    std::vector<int> v{comm.rank()};
    m["tp"].all_reduce(std::span<int>(v), tutti::sum);
    CHECK(v[0] == (comm.rank() / 2) * 4 + 1);  // {0,1} -> 1, {2,3} -> 5
    v = {comm.rank()};
    m["dp"].all_reduce(std::span<int>(v), tutti::sum);
    CHECK(v[0] == 2 + 2 * (comm.rank() % 2));  // {0,2} -> 2, {1,3} -> 4
    CHECK_THROWS_AS((void)m.dim("pp"), tutti::error);
    CHECK_THROWS_AS((tutti::mesh<comm_t>(comm, {3, 2})), tutti::error);
    CHECK_THROWS_AS((tutti::mesh<comm_t>(comm, {4, 0, 1})), tutti::error);
    CHECK_THROWS_AS((tutti::mesh<comm_t>(comm, {2, 2}, {"a"})), tutti::error);
    CHECK_THROWS_AS((tutti::mesh<comm_t>(comm, {2, 2}, {"a", "a"})), tutti::error);
    CHECK_THROWS_WITH_AS((tutti::mesh<comm_t>(comm, {2, 2}, {"a", ""})),
                         doctest::Contains("dimension 1's name is empty"), tutti::error);
  });
}

TEST_CASE("shm split: every pattern, world sizes 1-8, across processes") {
  for (int p = 1; p <= 8; ++p) {
    CAPTURE(p);
    fork_ranks::temp_dir dir;
    const auto status = fork_ranks::run_ranks(p, [&](int r) {
      auto comm = tutti::communicator<tutti::shm>::from_url(dir.url(), r, p);
      const std::string bad = all_patterns(comm);
      if (!bad.empty()) std::fprintf(stderr, "%s\n", bad.c_str());
      // Children wait as crowded as their parent: its other processes still run.
      auto alone = comm.split(r, 0);
      if (alone->transport().machine_ranks() != p) return 3;
      auto nested = alone->split(0, 0);
      if (nested->transport().machine_ranks() != p) return 4;
      if (p % 2 == 0) {
        tutti::mesh m(comm, {2, p / 2}, {"dp", "tp"});
        std::vector<int> v{r};
        m["dp"].all_reduce(std::span<int>(v), tutti::sum);
        if (v[0] != 2 * (r % (p / 2)) + p / 2) return 2;
      }
      return bad.empty() ? 0 : 1;
    });
    for (int r = 0; r < p; ++r)
      CHECK(fork_ranks::exited_with(status[static_cast<std::size_t>(r)], 0));
  }
}

TEST_CASE("shm split: a rank killed inside a group is named by its group and by the parent") {
  fork_ranks::temp_dir dir;
  split_checks::check_killed_in_group(
      [&](int r, int n) { return tutti::communicator<tutti::shm>::from_url(dir.url(), r, n); });
}

TEST_CASE("host map: hosts numbered by their lowest rank, local ranks in rank order") {
  const std::vector<std::string> ids{"a", "b", "a", "c", "b", "a"};
  const tutti::host_map m = tutti::detail::map_identities(ids, 4);
  CHECK(m.host_of == std::vector<int>{0, 1, 0, 2, 1, 0});
  CHECK(m.local_of == std::vector<int>{0, 0, 1, 0, 1, 2});
  CHECK(m.count == std::vector<int>{3, 2, 1});
  CHECK(m.hosts == 3);
  CHECK(m.host == 1);
  CHECK(m.local_rank == 1);
  CHECK(m.local_size == 2);
  CHECK(!m.uniform());
  CHECK(m.ranks_on(0) == std::vector<int>{0, 2, 5});
  CHECK(tutti::detail::map_identities({"x", "y", "y", "x"}, 0).uniform());
}

TEST_CASE("host map: ranks in blocks host by host; the link a world across hosts is priced by") {
  using tutti::detail::map_identities;
  CHECK(map_identities({"a", "a", "b", "b"}, 0).blocked());
  CHECK(map_identities({"a", "b", "c"}, 1).blocked());  // one rank per host
  CHECK(!map_identities({"a", "b", "a", "b"}, 0).blocked());
  CHECK(!map_identities({"a", "a", "b"}, 0).blocked());  // uneven hosts

  const tutti::detail::link_settings link{.gbps = 1.0, .alpha_us = 50.0};
  const tutti::cost_model base{.alpha_us = 40.0, .beta_us_per_byte = 1.0 / 1500.0};
  const tutti::cost_model m = link.apply(base, map_identities({"a", "a", "b", "b"}, 2), 2.0, 1e-4);
  CHECK(m.alpha_us == 50.0);
  CHECK(m.beta_us_per_byte == doctest::Approx(8e-3));
  CHECK(m.hosts == 2);
  CHECK(m.ranks_per_host == 2);
  CHECK(m.local_alpha_us == 2.0);
  CHECK(m.local_beta_us_per_byte == 1e-4);
  CHECK(link.apply(base, map_identities({"a", "a"}, 0), 2.0, 1e-4) == base);  // one host
  // Interleaved hosts: the link's α and β, but no levels (nearest ranks are not on one host).
  const tutti::cost_model mixed = link.apply(base, map_identities({"a", "b", "a", "b"}, 0), 2, 1);
  CHECK(mixed.alpha_us == 50.0);
  CHECK(mixed.hosts == 0);
  CHECK(tutti::detail::link_settings{}.apply(base, map_identities({"a", "b"}, 0), 2, 1).alpha_us ==
        40.0);

  // recursive_halving across 2 hosts x 2: one step each way inside a host, one across, each
  // carrying half the vector; the reduction of 3/4 of it.
  const double n = 1 << 20;
  const tutti::detail::cost_inputs in(n, 4, m);
  const double want =
      2 * (2.0 + 0.5 * n * 1e-4 + 50.0 + 0.5 * n * 8e-3) + 0.75 * n * m.gamma_us_per_byte;
  CHECK(tutti::recursive_halving::cost(tutti::detail::collective::all_reduce, in).value() ==
        doctest::Approx(want));
  // tree: the binomial reduce and broadcast each take one step inside and one across, the
  // whole vector each; recursive doubling one exchange inside, one across by both ranks of a
  // host at once (the link shared by 2).
  const double g = m.gamma_us_per_byte;
  CHECK(tutti::tree::cost(tutti::detail::collective::all_reduce, in).value() ==
        doctest::Approx(2 * (2.0 + n * 1e-4 + 50.0 + n * 8e-3) + 2 * n * g));
  CHECK(tutti::recursive_doubling::cost(tutti::detail::collective::all_reduce, in).value() ==
        doctest::Approx(2.0 + n * 1e-4 + 50.0 + 2 * n * 8e-3 + 2 * n * g));
  // A schedule's own copies (ring's and recursive halving's reduce_scatter copy the input into
  // scratch and their block out) cost a byte on one host, not the link's β: the cheapest byte
  // the model knows there, a message inside a host.
  CHECK(m.copy_beta_us_per_byte == 1e-4);
  CHECK(in.cb == 1e-4);
  // ring, flat and one flow per link: its steps at the link's α and β.
  CHECK(tutti::detail::predicted_cost<tutti::ring>(tutti::detail::collective::reduce_scatter, in) ==
        doctest::Approx(3 * 50.0 + 0.75 * n * (8e-3 + g) + 2 * n * 1e-4));
  // recursive halving's reduce_scatter, flat: both ranks of a host on its link at every step.
  CHECK(tutti::recursive_halving::cost(tutti::detail::collective::reduce_scatter, in).value() ==
        doctest::Approx(2 * 50.0 + 0.75 * n * (2 * 8e-3 + g) + 2 * n * 1e-4));
  // On one host a copy is priced at β, as before.
  CHECK(tutti::detail::cost_inputs(n, 4, base).cb == base.beta_us_per_byte);
  // 3 hosts: not a power of two, so the flat view (the slower level, the link shared by 2).
  const tutti::cost_model m3 =
      link.apply(base, map_identities({"a", "a", "b", "b", "c", "c"}, 0), 2.0, 1e-4);
  const tutti::detail::cost_inputs in3(n, 6, m3);
  CHECK(tutti::recursive_halving::cost(tutti::detail::collective::all_reduce, in3).value() ==
        doctest::Approx(tutti::recursive_halving::cost(tutti::detail::collective::all_reduce,
                                                       in3.flat_across_hosts(true))
                            .value()));

  ::setenv("TUTTI_LINK_GBPS", "fast", 1);
  CHECK_THROWS_AS((void)tutti::detail::link_settings::from_env(0), tutti::error);
  ::setenv("TUTTI_LINK_GBPS", "25", 1);
  CHECK(tutti::detail::link_settings::from_env(0).gbps == 25.0);
  ::unsetenv("TUTTI_LINK_GBPS");
  CHECK(tutti::detail::link_settings::from_env(0).gbps == 0.0);
}

TEST_CASE("split_host on one host: every rank, in rank order (inproc threads, shm processes)") {
  first_failure f;
  tutti::inproc::run(3, [&](auto& comm) {
    const tutti::host_map m = tutti::map_hosts(comm);
    if (m.hosts != 1 || m.local_rank != comm.rank() || m.local_size != 3) f.add("host map");
    auto local = tutti::split_host(comm);
    f.add(check_child(local, {0, 1, 2}));
  });
  CHECK(f.text == "");
  fork_ranks::temp_dir dir;
  const auto status = fork_ranks::run_ranks(3, [&](int r) {
    auto comm = tutti::communicator<tutti::shm>::from_url(dir.url(), r, 3);
    auto local = tutti::split_host<tutti::shm, tutti::ring>(comm);
    std::vector<int> v{r};
    local.all_reduce(std::span<int>(v), tutti::sum);
    return v[0] == 3 && local.rank() == r ? 0 : 1;
  });
  for (int st : status) CHECK(fork_ranks::exited_with(st, 0));
}

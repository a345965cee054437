// The collective suite (tests/suite.hpp) across processes over tutti::gloo on loopback: for
// every policy that runs on point-to-point messages, and tutti::native (Gloo's own
// collectives), at world sizes 1-8; tutti::spawn forks the ranks, each builds
// communicator<gloo, P>::from_env() and runs the sweep. Also the program, as written.
//
// Element types: one of each size and kind (1, 2, 4, 8 and 16 bytes; integer and floating),
// every op they admit. The algorithms see bytes and a type-erased reduction, and test_shm and
// test_collectives run all 17 types through them; what the transport adds per type is the
// element size (Gloo's own collectives are instantiated per size) — and every TCP message
// costs tens of microseconds here, so the full matrix would take many minutes per policy.

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include <doctest/doctest.h>

#include <tutti/transport/gloo.hpp>

#include "fork_ranks.hpp"
#include "scoped_env.hpp"
#include "suite.hpp"

namespace {

// Under the sanitizers one type of each size (as harness::sanitizer_types; Gloo's own
// collectives take no bool).
using gloo_types =
    std::conditional_t<tutti_harness::few_types,
                       std::tuple<std::int8_t, tutti::bfloat16, std::int32_t, double, long double>,
                       std::tuple<std::int8_t, tutti::bfloat16, std::uint16_t, std::int32_t, float,
                                  double, std::uint64_t, long double>>;

// Each size twice: collective messages as single copies (where this host lets siblings read
// each other's memory), then through Gloo's TCP pairs alone (TUTTI_GLOO_CMA=0). Once for
// native: Gloo's own collectives send every byte themselves.
template <class P>
void sweep_policy(const std::vector<int>& sizes) {
  if constexpr (harness::sweeps_policy<P>) {  // not instantiated otherwise (TSan)
    for (const bool tcp_only : {false, true}) {
      if (tcp_only && std::is_same_v<P, tutti::native>) continue;
      CAPTURE(tcp_only);
      scoped_env env;
      env.gloo_tcp_only(tcp_only);
      for (int p : sizes) {
        CAPTURE(p);
        const int rc = tutti::spawn(p, [] {
          auto comm = tutti::communicator<tutti::gloo, P>::from_env();
          suite::failures f;
          suite::run_suite<P, gloo_types>(comm, f);
          if (f.count.load() == 0) return 0;
          std::fprintf(stderr, "%s rank %d: %ld failures\n%s", P::name, comm.rank(), f.count.load(),
                       f.text().c_str());
          return 1;
        });
        CHECK_MESSAGE(rc == 0, P::name << " at " << p << " ranks failed (see stderr)");
      }
    }
  }
}

// Every policy at every size in Release; under the sanitizers (each TCP message there costs
// much more) the sizes that cover 1, 2, a power of two and the odd ones; under TSan 2 and 3 (a
// race needs two ranks; 3 folds one into a power of two as 5 does).
std::vector<int> sizes() {
  if (harness::thread_sanitized) return {2, 3};
  if (harness::sanitized) return {1, 2, 3, 5};
  return {1, 2, 3, 4, 5, 6, 7, 8};
}

}  // namespace

TEST_CASE("the issue's program: spawn 4, all_reduce over gloo") {
  const int rc = tutti::spawn(4, [] {
    auto comm = tutti::communicator<tutti::gloo>::from_env();
    std::vector<float> v(1 << 16, comm.rank() + 1.0f);  // NOLINT: verbatim
    comm.all_reduce(std::span<float>(v), tutti::sum);
    return v[0] == 10.0f ? 0 : 1;
  });
  CHECK(rc == 0);
}

TEST_CASE("gloo ring: every collective it implements") { sweep_policy<tutti::ring>(sizes()); }
TEST_CASE("gloo tree: every collective it implements") { sweep_policy<tutti::tree>(sizes()); }
TEST_CASE("gloo recursive_halving: every collective it implements") {
  sweep_policy<tutti::recursive_halving>(sizes());
}
// Under the sanitizers (each TCP message there costs much more) recursive doubling and Bruck
// stay in Release: what they ask of the transport (exchanges with one partner a step, several
// messages in flight) ring, recursive halving and automatic ask too, and test_shm and
// test_collectives run them under the sanitizers on the other transports.
TEST_CASE("gloo recursive_doubling: every collective it implements") {
  if constexpr (!harness::sanitized) sweep_policy<tutti::recursive_doubling>(sizes());
}
TEST_CASE("gloo bruck: every collective it implements") {
  if constexpr (!harness::sanitized) sweep_policy<tutti::bruck>(sizes());
}
TEST_CASE("gloo native: every collective Gloo has") { sweep_policy<tutti::native>(sizes()); }
TEST_CASE("gloo automatic: every collective") { sweep_policy<tutti::automatic>(sizes()); }

TEST_CASE("gloo::part_size: parts of whole elements and never more than the rule gives") {
  using tutti::gloo;
  // Whole below 2 x part_min; up to max_parts parts of >= part_min; parts of about part_max
  // beyond; a whole number of elements each, and never more parts than the rule gives.
  CHECK(gloo::part_size(0, 4) == 0);
  CHECK(gloo::part_size(3, 1) == 3);
  CHECK(gloo::part_size(gloo::part_min * 2 - 4, 4) == gloo::part_min * 2 - 4);
  CHECK(gloo::part_size(gloo::part_min * 2, 4) == gloo::part_min);
  CHECK(gloo::part_size(std::size_t{4} << 20, 8) == std::size_t{512} << 10);
  CHECK(gloo::part_size(std::size_t{16} << 20, 4) == std::size_t{1} << 20);
  CHECK(gloo::part_size(std::size_t{64} << 20, 2) == std::size_t{1} << 20);
  CHECK(gloo::part_size(std::size_t{12} * 100000, 12) ==
        std::size_t{12} * 25000);  // 4 parts of 25,000 elements
  CHECK(gloo::part_size(std::size_t{12} * 100001, 12) ==
        std::size_t{12} * 25001);  // the last part shorter
  for (std::size_t elem : {1, 2, 4, 8, 12, 16})
    for (std::size_t bytes = 0; bytes < (std::size_t{40} << 20); bytes = bytes * 3 + elem * 7) {
      CAPTURE(elem);
      CAPTURE(bytes);
      const std::size_t b = bytes / elem * elem, part = gloo::part_size(b, elem);
      if (b == 0) continue;
      CHECK(part % elem == 0);
      CHECK(part <= b);
      const std::size_t parts = (b + part - 1) / part;
      CHECK(parts <= std::max<std::size_t>(gloo::max_parts, b / gloo::part_max));
      CHECK((parts == 1 || part >= gloo::part_min));
    }
}

namespace {

using gloo_comm = tutti::communicator<tutti::gloo>;

/// Whether every pair has single copies exactly where `mode` leaves them on (and its receives
/// go up a step early to match); prints the first pair that does not.
bool single_copies_as_mode_says(gloo_comm& comm, const std::string& m, bool siblings_can_read) {
  using tutti::gloo;
  for (int q = 0; q < comm.size(); ++q) {
    const bool expect =
        siblings_can_read && m != "off" && !(m == "off on rank 0" && (comm.rank() == 0 || q == 0));
    if (q != comm.rank() && comm.transport().single_copy(q) != expect) {
      std::fprintf(stderr, "rank %d: single_copy(%d) is %d\n", comm.rank(), q, int(!expect));
      return false;
    }
    // A receive goes up a step early where it is a single copy or one TCP part.
    const std::size_t two_parts = 2 * gloo::part_min;
    if (q != comm.rank() && (!comm.transport().post_ahead(q, two_parts - 4, 4) ||
                             comm.transport().post_ahead(q, two_parts, 4) != expect)) {
      std::fprintf(stderr, "rank %d: post_ahead(%d) wrong\n", comm.rank(), q);
      return false;
    }
  }
  return true;
}

/// Whether the world's costs are as expected; prints them where not.
bool world_costs_as_expected(gloo_comm& comm, bool every_pair) {
  using tutti::gloo;
  // What automatic weighs, the same on every rank: every rank on this machine, its CPUs;
  // single copies' cost only where every pair has them.
  const tutti::cost_model costs = comm.transport().world_costs();
  const unsigned hw = std::thread::hardware_concurrency();
  if (hw != 0 && (comm.transport().host_ranks() != comm.size() ||
                  costs.ranks_per_cpu != static_cast<double>(comm.size()) / hw)) {
    std::fprintf(stderr, "rank %d: %d ranks here, %g per CPU\n", comm.rank(),
                 comm.transport().host_ranks(), costs.ranks_per_cpu);
    return false;
  }
  if (costs.alpha_us != (every_pair ? gloo::single_copy_alpha_us : gloo::costs.alpha_us) ||
      costs.beta_us_per_byte !=
          (every_pair ? gloo::single_copy_beta_us_per_byte : gloo::costs.beta_us_per_byte) ||
      costs.gamma_us_per_byte != gloo::costs.gamma_us_per_byte) {
    std::fprintf(stderr, "rank %d: alpha %g, beta %g\n", comm.rank(), costs.alpha_us,
                 costs.beta_us_per_byte);
    return false;
  }
  return true;
}

/// The blocks the test case describes, through `comm` and then ring, recursive halving and
/// tree; what differs from the exact int32 sums goes to `f`.
void large_blocks(gloo_comm& comm, suite::failures& f) {
  const std::size_t k = tutti::gloo::part_min / sizeof(std::int32_t);
  for (std::size_t n : {2 * k - 1, 4 * k + 1, 6 * k + 5, (std::size_t{9} << 18) + 7}) {
    suite::all_reduce_case<std::int32_t, tutti::sum_t>(comm, f, n, false);
    suite::all_reduce_case<std::int32_t, tutti::sum_t>(comm, f, n, true);
    suite::reduce_scatter_case<std::int32_t, tutti::sum_t>(comm, f, n / 2 + 1, false);
    suite::reduce_case<std::int32_t, tutti::sum_t>(comm, f, n, false);
    suite::broadcast_case<std::int32_t>(comm, f, n);
  }
  auto ring = tutti::communicator<tutti::gloo, tutti::ring>::from_env();
  auto halving = tutti::communicator<tutti::gloo, tutti::recursive_halving>::from_env();
  auto tree = tutti::communicator<tutti::gloo, tutti::tree>::from_env();
  for (std::size_t n : {3 * k + 1, (std::size_t{5} << 18) + 3}) {
    suite::all_reduce_case<std::int32_t, tutti::sum_t>(ring, f, n, false);
    suite::all_reduce_case<std::int32_t, tutti::sum_t>(halving, f, n, true);
    suite::all_reduce_case<std::int32_t, tutti::sum_t>(tree, f, n, false);
  }
}

/// One rank of the large-messages test under `mode` ("on", "off", "off on rank 0"): its exit
/// code.
int large_messages_rank(const std::string& m, bool siblings_can_read) {
  const char* rank = std::getenv("RANK");
  if (m == "off" || (m == "off on rank 0" && rank != nullptr && std::string_view(rank) == "0"))
    ::setenv("TUTTI_GLOO_CMA", "0", 1);
  auto comm = gloo_comm::from_env();
  if (!single_copies_as_mode_says(comm, m, siblings_can_read)) return 1;
  if (!world_costs_as_expected(comm, siblings_can_read && m == "on")) return 1;
  suite::failures f;
  large_blocks(comm, f);
  if (f.count.load() == 0) return 0;
  std::fprintf(stderr, "rank %d: %ld failures\n%s", comm.rank(), f.count.load(), f.text().c_str());
  return 1;
}

}  // namespace

TEST_CASE("large collective messages travel in parts that pair up on both ends") {
  const bool siblings_can_read = fork_ranks::siblings_can_read_memory();
  if (!siblings_can_read)
    MESSAGE("siblings may not read each other's memory here (Yama, seccomp): TCP only");
  // Blocks just under, at and over the part boundaries, split unevenly across ranks, through
  // every policy that sends large blocks point to point; exact int32 sums. With single copies
  // on every rank; on none (TUTTI_GLOO_CMA=0); on every rank but 0 (its pairs stay on TCP, the
  // others' do not).
  for (const char* mode : {"on", "off", "off on rank 0"}) {
    for (int p : {2, 3}) {
      CAPTURE(mode);
      CAPTURE(p);
      scoped_env env;
      ::unsetenv("TUTTI_GLOO_CMA");  // a test's own setting: the modes set it
      const std::string m = mode;
      const int rc = tutti::spawn(
          p, [&m, siblings_can_read] { return large_messages_rank(m, siblings_can_read); });
      CHECK(rc == 0);
    }
  }
}

TEST_CASE("Gloo's loop thread runs under SCHED_BATCH; the rank's own thread keeps its policy") {
  // detail::batch_scheduling_guard (bench/RESULTS.md, "Gloo's loop thread spins on a lock"):
  // the threads a world starts are its loop thread (SCHED_BATCH), tutti's waker and, on rank
  // 0, the store's server (SCHED_OTHER; a sanitizer's own thread may join them). With
  // TUTTI_GLOO_LOOP_BATCH=0 none runs under SCHED_BATCH.
  for (const bool batch : {true, false}) {
    CAPTURE(batch);
    scoped_env env;
    env.set("TUTTI_GLOO_LOOP_BATCH", batch ? "1" : "0");
    const int rc = tutti::spawn(2, [batch] {
      const auto threads = [] {
        std::set<pid_t> tids;
        for (const auto& e : std::filesystem::directory_iterator("/proc/self/task"))
          tids.insert(static_cast<pid_t>(std::stol(e.path().filename().string())));
        return tids;
      };
      const std::set<pid_t> before = threads();
      auto comm = tutti::communicator<tutti::gloo>::from_env();
      int started = 0, batched = 0;
      for (pid_t tid : threads()) {
        if (before.contains(tid)) continue;
        ++started;
        if (sched_getscheduler(tid) == SCHED_BATCH) ++batched;
      }
      if (sched_getscheduler(0) != SCHED_OTHER || started < 2 || (batched > 0) != batch) {
        std::fprintf(stderr, "rank %d: policy %d; %d threads started, %d under SCHED_BATCH\n",
                     comm.rank(), sched_getscheduler(0), started, batched);
        return 1;
      }
      std::vector<int> v(1000, comm.rank() + 1);
      comm.all_reduce(std::span<int>(v), tutti::sum);
      return std::all_of(v.begin(), v.end(), [](int x) { return x == 3; }) ? 0 : 1;
    });
    CHECK(rc == 0);
  }
}

namespace {

// The inbox test's messages: m and m + 64 share a slot (same call, tag and size).
constexpr int inbox_messages = static_cast<int>(tutti::detail::cma_inbox::capacity) + 9;
constexpr std::size_t inbox_words = std::size_t{1} << 17;  // 512 KiB each
using messages = std::vector<std::vector<std::int32_t>>;

std::int32_t inbox_value(int from, int m, std::size_t i) {
  return static_cast<std::int32_t>(m * 1000003 + static_cast<int>(i) + from * 7);
}

/// Rank `me`'s messages to send, and receive buffers filled with -1.
void fill_messages(int me, messages& out, messages& in) {
  for (int m = 0; m < inbox_messages; ++m) {
    out[m].resize(inbox_words);
    in[m].assign(inbox_words, -1);
    for (std::size_t i = 0; i < inbox_words; ++i) out[m][i] = inbox_value(me, m, i);
  }
}

/// Sends `out` and receives `in`: rank 1 posts its receives in reverse order before its sends,
/// rank 0 after them and waits for them in reverse order.
void exchange_messages(tutti::gloo& t, int me, messages& out, messages& in) {
  using tutti::detail::space;
  const int peer = 1 - me;
  tutti::detail::call c;
  c.fp.coll = tutti::detail::collective::all_to_all;
  c.seq = 1;
  c.elem_size = 4;
  const auto tag = [](int m) { return static_cast<std::uint64_t>(m % 64); };
  std::vector<tutti::gloo::request> sends(inbox_messages), recvs(inbox_messages);
  const auto bytes = [](std::vector<std::int32_t>& v) {
    return std::as_writable_bytes(std::span(v));
  };
  const auto post_recv = [&](int m) {
    recvs[m] = t.irecv(peer, bytes(in[m]), c, space::collective, tag(m));
  };
  const auto deadline = tutti::detail::clock::now() + std::chrono::seconds(60);
  if (me == 1)
    for (int m = inbox_messages - 1; m >= 0; --m) post_recv(m);
  for (int m = 0; m < inbox_messages; ++m)
    sends[m] = t.isend(peer, bytes(out[m]), c, space::collective, tag(m));
  if (me == 0) {
    for (int m = 0; m < inbox_messages; ++m) post_recv(m);
    for (int m = inbox_messages - 1; m >= 0; --m) t.wait(recvs[m], c, deadline);
    for (int m = 0; m < inbox_messages; ++m) t.wait(sends[m], c, deadline);
  } else {
    for (int m = 0; m < inbox_messages; ++m) t.wait(sends[m], c, deadline);
    for (int m = 0; m < inbox_messages; ++m) t.wait(recvs[m], c, deadline);
  }
}

/// How many of rank `me`'s received messages differ from what the peer sent on their slot.
int wrong_messages(int me, const messages& in) {
  const int peer = 1 - me;
  int wrong = 0;
  for (int m = 0; m < inbox_messages; ++m) {
    // Rank 1 posted m + 64 before m on their shared slot: each got the other's message.
    int sent_as = m;
    if (me == 1 && m % 64 < inbox_messages - 64) sent_as = m >= 64 ? m - 64 : m + 64;
    for (std::size_t i = 0; i < inbox_words; ++i)
      if (in[m][i] != inbox_value(peer, sent_as, i)) {
        std::fprintf(stderr, "rank %d message %d word %zu: %d, not %d\n", me, m, i, in[m][i],
                     inbox_value(peer, sent_as, i));
        ++wrong;
        break;
      }
  }
  return wrong;
}

}  // namespace

TEST_CASE("single copies: more messages in flight than an inbox holds, matched as Gloo would") {
  // Each rank posts 73 single-copy messages to the other (an inbox holds 64 descriptors: the
  // rest wait in the sender's outbox until the receiver takes some), then its receives. Rank 1
  // posts its receives in reverse order and rank 0 waits for them in reverse order, so
  // descriptors arrive both before and after their receive is posted. Messages m and m + 64
  // share a slot (same call, tag and size): as with Gloo's slots, the first receive posted on a
  // slot gets the first message sent on it. Exact contents, from both ranks.
  if (!fork_ranks::siblings_can_read_memory()) {
    MESSAGE("siblings may not read each other's memory here (Yama, seccomp): no single copies");
    return;
  }
  const int rc = tutti::spawn(2, [] {
    auto comm = gloo_comm::from_env();
    const int me = comm.rank();
    if (!comm.transport().single_copy(1 - me)) return 2;
    messages out(inbox_messages), in(inbox_messages);
    fill_messages(me, out, in);
    exchange_messages(comm.transport(), me, out, in);
    return wrong_messages(me, in) == 0 ? 0 : 1;
  });
  CHECK(rc == 0);
}

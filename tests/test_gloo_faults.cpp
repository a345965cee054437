// tutti::gloo across real processes when things go wrong: a rank killed in a loop of
// all_reduces (every other rank raises peer_lost naming it within 1 s), mismatched calls (every
// rank raises mismatch), a rank that never calls (timeout at the deadline, nothing hangs),
// send/recv with disagreeing sizes (a timeout, never Gloo's abort of the receiving process),
// and the interface settings.

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include <tutti/transport/gloo.hpp>
#include <tutti/tutti.hpp>

#include "fork_ranks.hpp"
#include "scoped_env.hpp"

using namespace fork_ranks;  // NOLINT(google-build-using-namespace): test helpers

namespace {

template <class P = tutti::automatic>
auto join(const temp_dir& dir, int r, int n, tutti::options opts = {}) {
  return tutti::communicator<tutti::gloo, P>::from_url(dir.url(), r, n, opts);
}

/// Two ranks under `native` with a 500 ms timeout run `call(comm, rank)`, which must raise on
/// both; returns the errc each raised.
template <class Call>
std::array<int, 2> native_disagreement(Call&& call) {
  shared_report rep;
  temp_dir dir;
  const auto status = run_ranks(2, [&](int r) {
    tutti::options opts;
    opts.timeout = std::chrono::milliseconds(500);
    auto comm = join<tutti::native>(dir, r, 2, opts);
    const int rc = expect_error(rep.operator->(), r, [&] { call(comm, r); });
    // Keep the connections open until the other rank raised too: a rank leaving first closes
    // them, and the other (its deadline a little later) would see peer_lost instead of its own
    // timeout (a CI run under a sanitizer did).
    (void)await_report(rep.operator->(), 1 - r);
    return rc;
  });
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    CHECK(exited_with(status[static_cast<std::size_t>(r)], 0));
  }
  return {rep->kind[0], rep->kind[1]};
}

}  // namespace

TEST_CASE("a rank killed during all_reduces: the others raise naming it within 1 s") {
  // Through Gloo's TCP pairs alone (TUTTI_GLOO_CMA=0), then with single copies where this host
  // allows them (a survivor waits for the dead rank's descriptor or acknowledgement, and looks
  // at its connection every millisecond).
  for (const bool tcp_only : {true, false}) {
    CAPTURE(tcp_only);
    scoped_env env;
    env.gloo_tcp_only(tcp_only);
    for (int n : {2, 4}) {
      CAPTURE(n);
      shared_report rep;
      temp_dir dir;
      check_killed_rank(
          n, 50, rep, [&](int r) { return join<tutti::ring>(dir, r, n); }, [](auto&, int) {});
    }
  }
}

TEST_CASE("single copies: a rank killed during large all_reduces is named within 1 s") {
  // 2 and 1 MiB messages between ranks on this host, single copies read in chunks: a survivor
  // waits for the dead rank's descriptor, or for the dead rank to acknowledge a message it was
  // to read, or reads from a process that is gone (ESRCH).
  for (int n : {2, 4}) {
    CAPTURE(n);
    shared_report rep;
    temp_dir dir;
    check_killed_rank(
        n, 5, rep, [&](int r) { return join<tutti::ring>(dir, r, n); },
        [](auto& comm, int r) {
          bool single = false;
          for (int q = 0; q < comm.size(); ++q) single = single || comm.transport().single_copy(q);
          if (!single) std::fprintf(stderr, "rank %d: no single copies (Yama?)\n", r);
        },
        std::size_t{1} << 20);
  }
}

TEST_CASE("single copies: a sender that gives up on a message its receiver reads makes it raise") {
  // Rank 0 posts a 1 MiB single-copy send and destroys it unwaited (as an exception unwinding
  // an algorithm does), which aborts its world; its buffer lives on. Rank 1 has the descriptor
  // already and reads the bytes only afterwards: it must not take them as the message (the
  // sender may have freed or reused its buffer by then), however intact they look.
  if (!siblings_can_read_memory()) {
    MESSAGE("processes may not read each other's memory here (Yama, seccomp): no single copies");
    return;
  }
  shared_report rep;
  temp_dir dir;
  const auto status = run_ranks(2, [&](int r) {
    auto comm = join<tutti::ring>(dir, r, 2);
    auto& t = comm.transport();
    if (!t.single_copy(1 - r)) return 1;
    tutti::detail::call c;
    c.fp.coll = tutti::detail::collective::broadcast;
    c.seq = 1;
    c.elem_size = 4;
    std::vector<std::byte> buf(std::size_t{1} << 20, std::byte{static_cast<unsigned char>(r)});
    const std::span<std::byte> bytes(buf);
    if (r == 0) {
      {
        auto sent = t.isend(1, bytes, c, tutti::detail::space::collective, 0);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the descriptor arrives
      }                                                               // abandoned
      rep->kind[0] = static_cast<int>(tutti::errc::aborted);
      std::this_thread::sleep_for(std::chrono::seconds(1));  // the buffer stays readable
      return 0;
    }
    auto got = t.irecv(0, bytes, c, tutti::detail::space::collective, 0);
    if (!await_report(rep.operator->(), 0)) return 1;
    return expect_error(rep.operator->(), r, [&] {
      t.wait(got, c, tutti::detail::clock::now() + std::chrono::seconds(5));
    });
  });
  CHECK(exited_with(status[0], 0));
  CHECK(exited_with(status[1], 0));
  CHECK(rep->kind[1] == static_cast<int>(tutti::errc::aborted));
}

TEST_CASE("single copies: a sender that gives up after a third rank died and frees its buffer") {
  // Found under load: rank 0 saw rank 3 die and gave up its message to rank 1, whose read then
  // failed (EFAULT: the buffer was gone) and blamed rank 0, alive, with a transport failure.
  // The receiver must name the dead rank, as the world's abort record does.
  if (!siblings_can_read_memory()) {
    MESSAGE("processes may not read each other's memory here (Yama, seccomp): no single copies");
    return;
  }
  shared_report rep;
  temp_dir dir;
  constexpr std::size_t bytes = std::size_t{1} << 20;
  const auto status = run_ranks(3, [&](int r) {
    auto comm = join<tutti::ring>(dir, r, 3);
    auto& t = comm.transport();
    rep->pids[r] = getpid();
    tutti::detail::call c;
    c.fp.coll = tutti::detail::collective::broadcast;
    c.seq = 1;
    c.elem_size = 4;
    if (r == 2) {  // dies once rank 0's message is on its way
      while (rep->died_ns == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      raise(SIGKILL);
    }
    if (r == 0) {
      if (!t.single_copy(1)) return 1;
      void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) return 1;
      const std::span<std::byte> buf(static_cast<std::byte*>(p), bytes);
      int dummy = 0;
      const int rc = expect_error(rep.operator->(), r, [&] {
        auto sent = t.isend(1, buf, c, tutti::detail::space::collective, 0);
        auto from_dead = t.irecv(2, std::as_writable_bytes(std::span<int>(&dummy, 1)), c,
                                 tutti::detail::space::collective, 1);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the descriptor arrives
        rep->died_ns = now_ns();
        t.wait(from_dead, c, tutti::detail::clock::now() + std::chrono::seconds(10));
      });                // unwinding gives the send up
      munmap(p, bytes);  // and frees its buffer: rank 1's read fails
      rep->segment[0] = 1;
      (void)await_report(rep.operator->(), 1);
      return rc;
    }
    std::vector<std::byte> in(bytes);
    auto got = t.irecv(0, std::span<std::byte>(in), c, tutti::detail::space::collective, 0);
    const auto until = clock_type::now() + std::chrono::seconds(10);
    while (rep->segment[0] == 0 && clock_type::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return expect_error(rep.operator->(), r, [&] {
      t.wait(got, c, tutti::detail::clock::now() + std::chrono::seconds(5));
    });
  });
  CHECK((WIFSIGNALED(status[2]) && WTERMSIG(status[2]) == SIGKILL));
  for (int r : {0, 1}) check_named_death(status, rep.operator->(), r, 2);
}

TEST_CASE("mismatched calls raise mismatch on every rank, not a hang or a crash") {
  for (std::size_t count : {std::size_t{10}, std::size_t{100000}}) {
    CAPTURE(count);
    shared_report rep;
    temp_dir dir;
    const auto status = run_ranks(3, [&](int r) {
      auto comm = join<tutti::ring>(dir, r, 3);
      std::vector<float> v(r == 1 ? count + 1 : count, 1.0f);
      const auto t0 = clock_type::now();
      const int rc = expect_error(rep.operator->(), r,
                                  [&] { comm.all_reduce(std::span<float>(v), tutti::sum); });
      return rc == 0 && clock_type::now() - t0 < std::chrono::seconds(5) ? 0 : 1;
    });
    for (int r = 0; r < 3; ++r) {
      CAPTURE(r);
      CHECK(exited_with(status[static_cast<std::size_t>(r)], 0));
      CHECK(rep->kind[r] == static_cast<int>(tutti::errc::mismatch));
      // The other side of the mismatch, never this rank (a rank that learns of the mismatch
      // from the writer's abort record once named itself: tests/mismatch found it).
      CHECK(rep->peer[r] >= 0);
      CHECK(rep->peer[r] != r);
    }
  }
}

TEST_CASE("native: mismatched counts time out at the deadline instead of crashing") {
  // Gloo's own collectives cannot be woken to compare calls; their tags carry the fingerprint,
  // so the messages never meet (Gloo would abort a process receiving a longer message).
  const auto kinds = native_disagreement([](auto& comm, int r) {
    std::vector<float> v(r == 1 ? 2000 : 1000, 1.0f);
    comm.all_reduce(std::span<float>(v), tutti::sum);
  });
  for (const int kind : kinds)
    CHECK((kind == static_cast<int>(tutti::errc::timeout) ||
           kind == static_cast<int>(tutti::errc::peer_lost)));
}

TEST_CASE("native: calls of count 0 meet, so a disagreement at count 0 raises too") {
  // Gloo's collectives exchange nothing at count 0; tutti meets the others in a barrier on the
  // call's tag (fingerprint and count in it) instead. tests/mismatch found every rank returning
  // normally from count-0 calls that disagreed in root or collective.
  SUBCASE("agreed: every collective at count 0 returns, and the next call is right") {
    temp_dir dir;
    const auto status = run_ranks(3, [&](int r) {
      auto comm = join<tutti::native>(dir, r, 3);
      std::vector<float> none;
      const std::span<float> e(none);
      comm.all_reduce(e, tutti::sum);
      comm.reduce(e, tutti::max, 2);
      comm.broadcast(e, 1);
      comm.all_gather(std::span<const float>(e), e);
      comm.gather(std::span<const float>(e), e, 0);
      comm.scatter(std::span<const float>(e), e, 2);
      comm.all_to_all(std::span<const float>(e), e);
      std::vector<float> v(4, static_cast<float>(r) + 1.0f);
      comm.all_reduce(std::span<float>(v), tutti::sum);
      return v == std::vector<float>(4, 6.0f) ? 0 : 1;
    });
    for (int r = 0; r < 3; ++r) CHECK(exited_with(status[static_cast<std::size_t>(r)], 0));
  }
  // The first rank to raise meets its deadline (timeout) and closes its connections; the other,
  // whose deadline comes a little later, may see them close first on a busy machine (peer_lost,
  // naming the first). Neither returns normally.
  const auto disagree = [](auto&& call) {
    const auto kinds = native_disagreement(call);
    const int timeout = static_cast<int>(tutti::errc::timeout);
    const int lost = static_cast<int>(tutti::errc::peer_lost);
    CHECK((kinds[0] == timeout || kinds[1] == timeout));
    for (const int kind : kinds) CHECK((kind == timeout || kind == lost));
  };
  SUBCASE("broadcast roots disagree") {
    disagree([](auto& comm, int r) { comm.broadcast(std::span<float>(), r); });
  }
  SUBCASE("scatter on one rank, gather on the other") {
    disagree([](auto& comm, int r) {
      if (r == 0)
        comm.scatter(std::span<const float>(), std::span<float>(), 0);
      else
        comm.gather(std::span<const float>(), std::span<float>(), 0);
    });
  }
  SUBCASE("count 0 on one rank, 10 on the other") {
    disagree([](auto& comm, int r) {
      std::vector<float> v(r == 0 ? 0 : 10, 1.0f);
      comm.all_reduce(std::span<float>(v), tutti::sum);
    });
  }
}

TEST_CASE("a receive polled with done() from a rank that dies: raises naming it within 1 s") {
  temp_dir dir;
  check_killed_rank_polled([&](int r) { return join(dir, r, 2, tutti::options{}); });
}

TEST_CASE("a rank that never calls: the other times out at its deadline") {
  temp_dir dir;
  check_silent_rank([&](int r, const tutti::options& o) { return join(dir, r, 2, o); });
}

TEST_CASE("a stopped rank (SIGSTOP): every other rank times out naming it, not a neighbour") {
  // Found by tutti-faults --mode stop: ranks waiting on a live neighbour named that neighbour
  // (and the first to time out recorded that name for the rest). The stopped rank's beat key
  // in the store stands still.
  SUBCASE("ring") {
    temp_dir dir;
    check_stopped_rank(
        [&](int r, const tutti::options& o) { return join<tutti::ring>(dir, r, 4, o); });
  }
  SUBCASE("tree") {
    temp_dir dir;
    check_stopped_rank(
        [&](int r, const tutti::options& o) { return join<tutti::tree>(dir, r, 4, o); });
  }
  SUBCASE("recursive_doubling") {
    temp_dir dir;
    check_stopped_rank([&](int r, const tutti::options& o) {
      return join<tutti::recursive_doubling>(dir, r, 4, o);
    });
  }
  SUBCASE("native") {  // inside Gloo's own collective: the waker's watch keeps the beats
    temp_dir dir;
    check_stopped_rank(
        [&](int r, const tutti::options& o) { return join<tutti::native>(dir, r, 4, o); });
  }
}

TEST_CASE("send/recv: 24 MB messages arrive whole; sizes that disagree time out, no crash") {
  shared_report rep;
  temp_dir dir;
  const auto status = run_ranks(2, [&](int r) {
    // The whole messages under the default deadline: filling and checking 24 MB outside tutti
    // takes longer than a short deadline allows under the sanitizers on a loaded machine (the
    // peer is then rightly named as making no progress). The mismatch below runs on a child
    // communicator with a 400 ms deadline.
    auto comm = join(dir, r, 2);
    tutti::options short_deadline;
    short_deadline.timeout = std::chrono::milliseconds(400);
    auto quick = comm.split(0, r, short_deadline);
    if (!quick) return 4;
    // Two tags, one message far larger than a TCP socket buffer.
    std::vector<double> big(3'000'000), small(3);
    if (r == 0) {
      for (std::size_t i = 0; i < big.size(); ++i) big[i] = double(i);
      small = {1.5, 2.5, 3.5};
      comm.send(std::span<const double>(small), 1, 7);
      comm.send(std::span<const double>(big), 1, 9);
    } else {
      std::vector<double> got_big(big.size()), got_small(3);
      comm.recv(std::span<double>(got_small), 0, 7);
      comm.recv(std::span<double>(got_big), 0, 9);
      if (got_small != std::vector<double>{1.5, 2.5, 3.5}) return 2;
      for (std::size_t i = 0; i < got_big.size(); ++i)
        if (got_big[i] != double(i)) return 3;
    }
    // Now rank 0 sends 8 ints where rank 1 expects 4: both time out, neither process dies.
    std::vector<int> eight(8, 1), four(4, 0);
    return expect_error(rep.operator->(), r, [&] {
      if (r == 0)
        quick->send(std::span<const int>(eight), 1, 3);
      else
        quick->recv(std::span<int>(four), 0, 3);
    });
  });
  CHECK(exited_with(status[0], 0));
  CHECK(exited_with(status[1], 0));
  CHECK(rep->kind[1] == static_cast<int>(tutti::errc::timeout));
}

TEST_CASE("TUTTI_SOCKET_IFNAME: a missing interface is a clear error; lo works") {
  {
    scoped_env env;
    env.set("TUTTI_SOCKET_IFNAME", "no-such-if0");
    temp_dir dir;
    try {
      (void)join(dir, 0, 1);
      FAIL("expected an error");
    } catch (const tutti::error& e) {
      CHECK(e.kind() == tutti::errc::invalid_argument);
      CHECK(std::string(e.what()).find("no-such-if0") != std::string::npos);
    }
  }
  scoped_env env;
  env.set("TUTTI_SOCKET_IFNAME", "lo");
  temp_dir dir;
  const auto status = run_ranks(2, [&](int r) {
    auto comm = join(dir, r, 2);
    if (comm.transport().address().find("127.0.0.1") == std::string::npos) return 2;
    std::vector<int> v(3, r + 1);
    comm.all_reduce(std::span<int>(v), tutti::sum);
    return v == std::vector<int>{3, 3, 3} ? 0 : 1;
  });
  CHECK(exited_with(status[0], 0));
  CHECK(exited_with(status[1], 0));
}

TEST_CASE("from_url tcp://: rank 0 serves the store, the others connect") {
  const int port = 20000 + static_cast<int>(getpid() % 20000);
  const auto status = run_ranks(3, [&](int r) {
    auto comm =
        tutti::communicator<tutti::gloo>::from_url("tcp://127.0.0.1:" + std::to_string(port), r, 3);
    std::vector<long long> v(100, r);
    comm.all_reduce(std::span<long long>(v), tutti::sum);
    for (auto x : v)
      if (x != 3) return 1;
    return 0;
  });
  for (int r = 0; r < 3; ++r) CHECK(exited_with(status[static_cast<std::size_t>(r)], 0));
}

TEST_CASE("send/recv after a collective: a slow peer is not a mismatch") {
  temp_dir dir;
  check_slow_send_after_collective(
      [&](int r, const tutti::options& o) { return join(dir, r, 2, o); });
}

TEST_CASE("a survivor waiting to send to a killed rank raises naming it; SIGPIPE kills nobody") {
  // Rank 0 dies while rank 1 sends it a 16 MiB message it never receives ("send"), or streams
  // small messages into its socket ("writes": SIGPIPE is at its default action, which would end
  // rank 1 if a write reached the broken socket unblocked), or runs Gloo's own all_reduce with it
  // ("native": Gloo's error names only an address; tutti finds the rank whose connection
  // closed). The random harness (faults.kill_gloo) also covers a send that Gloo leaves waiting.
  for (const char* what : {"send", "writes", "native"}) {
    CAPTURE(what);
    shared_report rep;
    temp_dir dir;
    const std::string w = what;
    const auto status = run_ranks(2, [&](int r) {
      auto comm = w == "native" ? std::optional<tutti::communicator<tutti::gloo, tutti::native>>(
                                      join<tutti::native>(dir, r, 2))
                                : std::nullopt;
      auto p2p = join(dir, r, 2);
      rep->pids[r] = getpid();
      std::vector<float> v(std::size_t{1} << 22, 1.0f);  // 16 MiB
      if (r == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        rep->died_ns = now_ns();
        raise(SIGKILL);
      }
      return expect_error(rep.operator->(), r, [&] {
        if (w == "send") p2p.send(std::span<const float>(v), 0, 7);
        if (w == "writes")
          for (int i = 0;; ++i) p2p.send(std::span<const float>(v.data(), 16), 0, i);
        if (w == "native") comm->all_reduce(std::span<float>(v), tutti::sum);
      });
    });
    CHECK(WIFSIGNALED(status[0]));
    CHECK(exited_with(status[1], 0));  // not killed by SIGPIPE
    CHECK(rep->kind[1] == static_cast<int>(tutti::errc::peer_lost));
    CHECK(rep->peer[1] == 0);
    const double seconds = double(rep->caught_ns[1] - rep->died_ns) * 1e-9;
    CHECK(seconds < 1.0);
  }
}

TEST_CASE("native: a root whose send is half on the wire when its peer dies raises at once") {
  // Rank 1 dies while Gloo's broadcast streams 256 MiB to it from rank 0, so rank 0's send sits
  // in its pair's write queue. When a connection fails Gloo wakes the waits of pending receives
  // and of sends not yet started, but not of a send already queued (finding 11): without tutti
  // failing the call's buffers itself, rank 0 waited in waitSend until the deadline (20 s here).
  shared_report rep;
  temp_dir dir;
  tutti::options opts;
  opts.timeout = std::chrono::seconds(20);
  const auto status = run_ranks(2, [&](int r) {
    auto comm = join<tutti::native>(dir, r, 2, opts);
    rep->pids[r] = getpid();
    std::vector<float> v(std::size_t{1} << 26, r == 0 ? 1.0f : 0.0f);  // 256 MiB
    std::optional<std::thread> killer;
    if (r == 1) {
      // Once the first 16 MiB have arrived (Gloo's loop thread receives into v in order).
      killer.emplace([&rep, p = v.data() + (std::size_t{1} << 22)] {
        while (std::atomic_ref<float>(*p).load(std::memory_order_relaxed) == 0.0f)
          std::this_thread::yield();
        rep->died_ns = now_ns();
        raise(SIGKILL);
      });
    }
    return expect_error(rep.operator->(), r, [&] { comm.broadcast(std::span<float>(v), 0); });
  });
  CHECK(WIFSIGNALED(status[1]));
  CHECK(exited_with(status[0], 0));
  CHECK(rep->kind[0] == static_cast<int>(tutti::errc::peer_lost));
  CHECK(rep->peer[0] == 1);
  const double seconds = double(rep->caught_ns[0] - rep->died_ns) * 1e-9;
  CHECK(seconds < 1.0);
}

namespace {

/// Where a stalling rank stops for good during the bootstrap, as a rank that hangs (or whose
/// host dies) there.
enum class stall_at {
  addresses,  // right after publishing its Gloo addresses: it never connects its pairs
  host,       // its pairs connected, instead of saying which host it is on
};

/// A store whose rank stops at `at`: sleeps for `sleep` (past rank 0's limit), then exits.
class stalling_store final : public tutti::bootstrap::store {
 public:
  stalling_store(std::shared_ptr<tutti::bootstrap::store> s, stall_at at,
                 std::chrono::milliseconds sleep)
      : s_(std::move(s)), at_(at), sleep_(sleep) {}
  void set(std::string_view key, std::span<const std::byte> value) override {
    // Gloo's key for this rank's addresses is "<prefix><rank>"; tutti's host key
    // "<prefix>host/<rank>".
    const std::string_view last = key.substr(key.rfind('/') + 1);
    const bool digits =
        !last.empty() && last.find_first_not_of("0123456789") == std::string_view::npos;
    const bool host = key.find("/host/") != std::string_view::npos;
    if (at_ == stall_at::host && host) stall();
    s_->set(key, value);
    if (at_ == stall_at::addresses && digits && !host) stall();
  }
  std::vector<std::byte> get(std::string_view key, std::chrono::milliseconds t) override {
    return s_->get(key, t);
  }
  std::int64_t add(std::string_view key, std::int64_t delta) override {
    return s_->add(key, delta);
  }
  void wait(std::span<const std::string> keys, std::chrono::milliseconds t) override {
    s_->wait(keys, t);
  }

 private:
  [[noreturn]] void stall() const {
    std::this_thread::sleep_for(sleep_);
    _exit(0);
  }
  std::shared_ptr<tutti::bootstrap::store> s_;
  stall_at at_;
  std::chrono::milliseconds sleep_;
};

/// n ranks join over gloo with `timeout`, every rank but 0 stalling at `at`; checks that rank
/// 0 raised errc::timeout naming one of them within 2.5 timeouts of starting to join.
void check_bootstrap_stall(int n, std::chrono::milliseconds timeout, stall_at at) {
  shared_report rep;
  temp_dir dir;
  const std::string path = dir.url().substr(std::string_view("file://").size());
  tutti::options opts;
  opts.timeout = timeout;
  const auto status = run_ranks(n, [&](int r) {
    std::shared_ptr<tutti::bootstrap::store> st =
        std::make_shared<tutti::bootstrap::file_store>(path, std::chrono::seconds(10));
    if (r != 0) st = std::make_shared<stalling_store>(std::move(st), at, 4 * timeout);
    if (r == 0) rep->died_ns = now_ns();  // here: when rank 0 starts to join
    return expect_error(rep.operator->(), r, [&] {
      tutti::communicator<tutti::gloo> comm(
          tutti::gloo::connect(st, "tutti/gloo/stall", r, n, "", -1, opts), opts);
      comm.barrier();
    });
  });
  CHECK(exited_with(status[0], 0));
  CHECK(rep->kind[0] == static_cast<int>(tutti::errc::timeout));
  CHECK(rep->peer[0] > 0);
  const double seconds = double(rep->caught_ns[0] - rep->died_ns) * 1e-9;
  CHECK(seconds < 2.5 * std::chrono::duration<double>(timeout).count());
}

}  // namespace

TEST_CASE("bootstrap: a peer that hangs after the mesh forms is named in the timeout") {
  // After Gloo's mesh every rank says which host it is on, through the store. A rank waiting
  // there for a peer that never says raised the store's timeout, which names a key, not a
  // rank (peer -1); under load the case below took that path (its world formed) and failed.
  // 2 s: long enough for 3 ranks' mesh to form on a loaded machine, so that the wait for the
  // hosts is where rank 0's deadline passes (still connecting, it would name that peer too).
  check_bootstrap_stall(3, std::chrono::seconds(2), stall_at::host);
}

TEST_CASE("bootstrap: peers that publish and then hang make a rank time out once, not per pair") {
  // Gloo's connectFullMesh connects the pairs one after another, each waiting up to the whole
  // timeout for the peer to connect: with 8 hung peers rank 0 waited up to 8 timeouts
  // (finding 7). The bootstrap has one deadline now. Where rank 0 happens to be the side that
  // connects to every peer (their kernels accept), the world forms and its first call times
  // out instead: either way within two timeouts (and a half: the process start).
  check_bootstrap_stall(9, std::chrono::seconds(1), stall_at::addresses);
}

// torch_tcp_store against real torch.distributed TCPStore servers (libuv and legacy), started
// as child processes of TUTTI_TORCH_PYTHON; values crossing between tutti and torch's own
// client; and against a raw socket server that answers with garbage, truncated or oversized
// replies, or not at all: each must raise a tutti::error quickly.

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include <tutti/bootstrap/torch_store.hpp>
#include <tutti/detail/unique_fd.hpp>

#include "caught.hpp"

#ifndef TUTTI_TORCH_PYTHON
#error "build with -DTUTTI_TORCH_PYTHON=\"/path/to/python\" (CMake: TUTTI_TORCH_PYTHON)"
#endif

using namespace std::chrono_literals;
using tutti::errc;
using tutti::bootstrap::torch_tcp_store;
using tutti::detail::unique_fd;
using caught_t = tutti_test::caught;
using tutti_test::catch_error;
using tutti_test::contains;

namespace {

using clock_type = std::chrono::steady_clock;

// Serves a TCPStore on a free port, prints the port, then answers one command a line from
// stdin through its own client (which prefixes keys with "/"): "set K V", "get K", "add K N".
// Exits when stdin closes.
constexpr const char* server_script = R"(
import sys, torch.distributed as d
s = d.TCPStore('127.0.0.1', 0, 1, True, wait_for_workers=False, use_libuv=sys.argv[1] == '1')
print(s.port, flush=True)
for line in sys.stdin:
    cmd, key, *rest = line.split()
    if cmd == 'set':
        s.set(key, rest[0]); print('ok', flush=True)
    elif cmd == 'get':
        print(s.get(key).decode(), flush=True)
    elif cmd == 'add':
        print(s.add(key, int(rest[0])), flush=True)
)";

/// A torch TCPStore server in a child Python process, stopped when this object goes.
class torch_server {
 public:
  explicit torch_server(bool libuv) {
    ::signal(SIGPIPE, SIG_IGN);
    int in[2], out[2];
    REQUIRE(::pipe2(in, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::execl(TUTTI_TORCH_PYTHON, TUTTI_TORCH_PYTHON, "-c", server_script, libuv ? "1" : "0",
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    to_.reset(in[1]);
    from_.reset(out[0]);
    const std::string port = line(120s);  // importing torch takes a while on a busy machine
    REQUIRE_MESSAGE(!port.empty(), "the torch server did not start (" TUTTI_TORCH_PYTHON ")");
    port_ = std::stoi(port);
  }
  torch_server(const torch_server&) = delete;
  torch_server& operator=(const torch_server&) = delete;
  ~torch_server() {
    to_.reset();  // the script's loop ends
    for (int i = 0; i < 200; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(50ms);
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  [[nodiscard]] int port() const { return port_; }

  /// One command to torch's own client, and its answer.
  std::string ask(const std::string& command) {
    const std::string text = command + "\n";
    REQUIRE(::write(to_.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size()));
    return line(30s);
  }

 private:
  std::string line(std::chrono::milliseconds timeout) {
    const auto deadline = clock_type::now() + timeout;
    std::string s;
    char ch = 0;
    while (clock_type::now() < deadline) {
      pollfd p{from_.get(), POLLIN, 0};
      if (::poll(&p, 1, 100) != 1) continue;
      if (::read(from_.get(), &ch, 1) != 1) break;
      if (ch == '\n') return s;
      s += ch;
    }
    return {};
  }

  pid_t pid_ = -1;
  unique_fd to_, from_;
  int port_ = 0;
};

/// Milliseconds `f` took.
template <class F>
long long took_ms(F&& f) {
  const auto t0 = clock_type::now();
  f();
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t0).count();
}

/// set and get, exact bytes: text, empty, binary with zeros, a replaced value, 1 MiB. Leaves
/// 'a' = "world" and 'bin' for the checks after it.
void set_and_get_exact_bytes(torch_tcp_store& st) {
  st.set_string("a", "hello");
  CHECK(st.get_string("a", 1s) == "hello");
  st.set_string("empty", "");
  CHECK(st.get("empty", 1s).empty());
  const std::vector<std::byte> binary{std::byte{0}, std::byte{255}, std::byte{0}, std::byte{7}};
  st.set("bin", binary);
  CHECK(st.get("bin", 1s) == binary);
  st.set_string("a", "world");
  CHECK(st.get_string("a", 0ms) == "world");
  std::vector<std::byte> big(std::size_t{1} << 20);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::byte>(i * 31 % 251);
  st.set("big", big);
  CHECK(st.get("big", 1s) == big);
}

/// get and wait time out naming what is missing, and the connection still works after.
void timeouts_name_what_is_missing(torch_tcp_store& st) {
  const caught_t miss = catch_error([&] { (void)st.get("missing", 300ms); });
  CHECK(miss.raised);
  CHECK(miss.kind == errc::timeout);
  CHECK(contains(miss.what, "still missing: 'missing'"));
  CHECK(catch_error([&] { (void)st.get("missing", 0ms); }).kind == errc::timeout);
  const std::vector<std::string> some{"a", "absent", "bin"};
  const caught_t partial = catch_error([&] { st.wait(some, 200ms); });
  CHECK(partial.kind == errc::timeout);
  CHECK(contains(partial.what, "(still missing: 'absent')"));
  st.wait(std::vector<std::string>{"a", "bin"}, 0ms);
  st.wait(std::vector<std::string>{}, 0ms);
  CHECK(st.get_string("a", 1s) == "world");
}

/// add: counters as decimal text, negative deltas, a value that is not a number.
void add_counts(torch_tcp_store& st) {
  CHECK(st.add("c", 5) == 5);
  CHECK(st.add("c", -7) == -2);
  CHECK(st.get_string("c", 1s) == "-2");
  CHECK(st.add("fresh", 0) == 0);
  const caught_t not_number = catch_error([&] { (void)st.add("a", 1); });
  CHECK(not_number.kind == errc::invalid_argument);
  CHECK(contains(not_number.what, "not a decimal 64-bit integer"));
  CHECK(st.add("c", 2) == 0);  // the store still works
}

/// A waiter wakes when another client sets the keys; adds from many threads all count.
void two_clients(torch_tcp_store& st, torch_tcp_store& other) {
  std::thread setter([&] {
    std::this_thread::sleep_for(100ms);
    other.set_string("late1", "1");
    other.set_string("late2", "2");
  });
  st.wait(std::vector<std::string>{"late1", "late2"}, 10s);
  CHECK(st.get_string("late2", 0ms) == "2");
  setter.join();
  std::vector<std::thread> adders;
  adders.reserve(4);
  for (int t = 0; t < 4; ++t)
    adders.emplace_back([&, t] {
      torch_tcp_store& s = t % 2 == 0 ? st : other;
      for (int i = 0; i < 25; ++i) (void)s.add("many", 1);
    });
  for (auto& t : adders) t.join();
  CHECK(st.add("many", 0) == 100);
}

/// torch's own client prefixes "/": the same keys, both ways; `st`'s prefix does not see them.
void torch_client_keys(torch_server& server, torch_tcp_store& st) {
  torch_tcp_store as_torch("127.0.0.1", server.port(), "/", 10s);
  as_torch.set_string("from_tutti", "v1");
  CHECK(server.ask("get from_tutti") == "v1");
  CHECK(server.ask("set from_torch v2") == "ok");
  CHECK(as_torch.get_string("from_torch", 1s) == "v2");
  CHECK(as_torch.add("shared", 3) == 3);
  CHECK(server.ask("add shared 4") == "7");
  CHECK(as_torch.get_string("shared", 1s) == "7");
  CHECK(catch_error([&] { (void)st.get("from_torch", 0ms); }).kind == errc::timeout);
}

/// Everything above, in order, through clients of one torch server (`libuv` or legacy).
void exercise(bool libuv) {
  torch_server server(libuv);
  torch_tcp_store st("127.0.0.1", server.port(), "tutti/", 10s);
  set_and_get_exact_bytes(st);
  timeouts_name_what_is_missing(st);
  add_counts(st);
  torch_tcp_store other("127.0.0.1", server.port(), "tutti/", 10s);
  two_clients(st, other);
  torch_client_keys(server, st);
}

// What the client refuses before it sends anything (no server needed).
TEST_CASE("torch_tcp_store: bad arguments and torch's own limits are invalid_argument") {
  torch_tcp_store st("127.0.0.1", 1, "p/", 100ms);
  CHECK(catch_error([&] { st.set_string("", "v"); }).kind == errc::invalid_argument);
  const std::vector<std::byte> over(tutti::detail::torch_max_value_bytes + 1);
  const caught_t big = catch_error([&] { st.set("k", over); });
  CHECK(big.kind == errc::invalid_argument);
  CHECK(contains(big.what, "torch's server takes 8388608 at most"));
  CHECK(catch_error([] { torch_tcp_store("", 1); }).kind == errc::invalid_argument);
  CHECK(catch_error([] { torch_tcp_store("h", 0); }).kind == errc::invalid_argument);
  CHECK(catch_error([] { torch_tcp_store("h", 1, std::string(9000, 'p')); }).kind ==
        errc::invalid_argument);
}

/// A raw TCP server on 127.0.0.1 (fault injection): each connection gets `script(fd)`; when it
/// returns true the connection is held until the client leaves, else closed at once.
class raw_server {
 public:
  explicit raw_server(std::function<bool(int)> script) : script_(std::move(script)) {
    listener_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    REQUIRE(::bind(listener_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(listener_.get(), 8) == 0);
    REQUIRE(::getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  raw_server(const raw_server&) = delete;
  raw_server& operator=(const raw_server&) = delete;
  ~raw_server() {
    stop_ = true;
    thread_.join();
  }
  [[nodiscard]] int port() const { return port_; }

 private:
  void run() {
    while (!stop_) {
      pollfd p{listener_.get(), POLLIN, 0};
      if (::poll(&p, 1, 20) != 1) continue;
      unique_fd c(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!c) continue;
      timeval tv{5, 0};
      (void)::setsockopt(c.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      if (!script_(c.get())) continue;
      char buf[256];
      while (!stop_) {
        pollfd q{c.get(), POLLIN, 0};
        if (::poll(&q, 1, 20) == 1 && ::recv(c.get(), buf, sizeof buf, 0) <= 0) break;
      }
    }
  }

  unique_fd listener_;
  std::function<bool(int)> script_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

void put(int fd, const std::vector<std::uint8_t>& b) {
  (void)::send(fd, b.data(), b.size(), MSG_NOSIGNAL);
}

std::vector<std::uint8_t> le64(std::uint64_t v) {
  std::vector<std::uint8_t> b;
  b.reserve(8);
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  return b;
}

/// Reads torch's handshake (VALIDATE, PING) and answers the PING: with its nonce when `right`.
bool handshake(int fd, bool right = true) {
  std::uint8_t b[10];
  if (::recv(fd, b, sizeof b, MSG_WAITALL) != 10 || b[0] != 0 || b[5] != 13) return false;
  put(fd, {static_cast<std::uint8_t>(b[6] ^ (right ? 0 : 0x5a)), b[7], b[8], b[9]});
  return true;
}

/// Reads one request: whatever arrives within 2 s, until the line is quiet for 50 ms.
void drain(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 2000) != 1) return;
  char buf[4096];
  do {
    if (::recv(fd, buf, sizeof buf, MSG_DONTWAIT) <= 0) return;
  } while (::poll(&p, 1, 50) == 1);
}

/// Runs `op` on a client (timeout 500 ms) of a raw_server running `script`; checks the kind,
/// the message and that it took under 3 s.
template <class Op>
void expect_failure(std::function<bool(int)> script, Op op, errc kind, std::string_view text) {
  raw_server server(std::move(script));
  torch_tcp_store st("127.0.0.1", server.port(), "", 500ms);
  caught_t c;
  const long long ms = took_ms([&] { c = catch_error([&] { op(st); }); });
  CHECK(c.raised);
  CHECK(c.kind == kind);
  CHECK_MESSAGE(contains(c.what, text), c.what);
  CHECK(ms < 3000);
  if (kind != errc::timeout || !contains(c.what, "could not connect")) {
    // A broken connection stays broken: the next call raises at once.
    const caught_t again = catch_error([&] { st.set_string("k", "v"); });
    CHECK(again.raised);
  }
}

void set_k(torch_tcp_store& st) { st.set_string("k", "v"); }
void get_k(torch_tcp_store& st) { (void)st.get("k", 10s); }

TEST_CASE("torch_tcp_store: a broken handshake or nobody listening raises quickly") {
  SUBCASE("a wrong PING answer") {
    expect_failure([](int fd) { return handshake(fd, false); }, set_k, errc::transport_failure,
                   "answered torch's handshake wrongly");
  }
  SUBCASE("the server closes during the handshake, every time") {
    expect_failure([](int) { return false; }, set_k, errc::timeout,
                   "closed the connection during the handshake");
  }
  SUBCASE("nobody listens") {
    unique_fd probe(::socket(AF_INET, SOCK_STREAM, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    REQUIRE(::bind(probe.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::getsockname(probe.get(), reinterpret_cast<sockaddr*>(&a), &len) == 0);
    torch_tcp_store st("127.0.0.1", ntohs(a.sin_port), "", 300ms);
    const caught_t c = catch_error([&] { st.set_string("k", "v"); });
    CHECK(c.kind == errc::timeout);
    CHECK(contains(c.what, "could not connect within 300 ms"));
  }
}

TEST_CASE("torch_tcp_store: garbage or oversized or truncated replies to a get raise quickly") {
  SUBCASE("a garbage WAIT answer") {
    expect_failure(
        [](int fd) {
          if (handshake(fd)) drain(fd), put(fd, {7});
          return true;
        },
        get_k, errc::transport_failure, "malformed reply from the store server (WAIT answered 7)");
  }
  SUBCASE("a value length of 2^60") {
    expect_failure(
        [](int fd) {
          if (!handshake(fd)) return false;
          drain(fd);
          std::vector<std::uint8_t> r{0};
          for (auto b : le64(std::uint64_t{1} << 60)) r.push_back(b);
          put(fd, r);
          return true;
        },
        get_k, errc::transport_failure, "over the limit of 16777216");
  }
  SUBCASE("a truncated value, then the server closes") {
    expect_failure(
        [](int fd) {
          if (!handshake(fd)) return false;
          drain(fd);
          std::vector<std::uint8_t> r{0};
          for (auto b : le64(10)) r.push_back(b);
          r.insert(r.end(), {'a', 'b', 'c'});
          put(fd, r);
          return false;
        },
        get_k, errc::peer_lost, "get of key 'k': the store server closed the connection");
  }
  SUBCASE("a garbage CANCEL_WAIT answer") {
    expect_failure(
        [](int fd) {
          if (!handshake(fd)) return false;
          drain(fd);  // WAIT
          drain(fd);  // CANCEL_WAIT, once the client's 200 ms pass
          put(fd, {9});
          return true;
        },
        [](torch_tcp_store& st) { (void)st.get("k", 200ms); }, errc::transport_failure,
        "CANCEL_WAIT answered 9");
  }
  SUBCASE("a garbage CHECK answer") {
    expect_failure(
        [](int fd) {
          if (handshake(fd)) drain(fd), put(fd, {5});
          return true;
        },
        [](torch_tcp_store& st) { (void)st.get("k", 0ms); }, errc::transport_failure,
        "CHECK answered 5");
  }
}

TEST_CASE("torch_tcp_store: missing or cut-off replies to a set or an add raise quickly") {
  SUBCASE("no answer to a set") {
    expect_failure([](int fd) { return handshake(fd); }, set_k, errc::timeout,
                   "set of key 'k': the store server did not answer within 500 ms");
  }
  SUBCASE("the server closes during an add, and on reconnecting") {
    expect_failure(
        [](int fd) {
          if (handshake(fd)) drain(fd);
          return false;
        },
        [](torch_tcp_store& st) { (void)st.add("k", 1); }, errc::peer_lost,
        "add to key 'k': the store server closed the connection");
  }
  SUBCASE("a truncated add answer") {
    expect_failure(
        [](int fd) {
          if (handshake(fd)) drain(fd), put(fd, {1, 2, 3});
          return false;
        },
        [](torch_tcp_store& st) { (void)st.add("k", 1); }, errc::peer_lost,
        "the store server closed the connection");
  }
}

TEST_CASE("torch_tcp_store: against torch's libuv TCPStore server") { exercise(true); }

TEST_CASE("torch_tcp_store: against torch's legacy TCPStore server (use_libuv=False)") {
  exercise(false);
}

}  // namespace

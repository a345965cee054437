// The bootstrap stores: tcp_store between threads and forked processes, deadlines, protocol
// abuse and malformed replies, TUTTI_STORE_FD adoption; file_store across processes; init URLs.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include <tutti/bootstrap/file_store.hpp>
#include <tutti/bootstrap/store.hpp>
#include <tutti/bootstrap/tcp_store.hpp>
#include <tutti/bootstrap/url.hpp>
#include <tutti/detail/unique_fd.hpp>

#include "caught.hpp"
#include "scoped_env.hpp"

using namespace std::chrono_literals;
namespace bs = tutti::bootstrap;
using clk = std::chrono::steady_clock;
using tutti::errc;
using tutti::detail::unique_fd;

namespace {

/// Timeout for operations that are expected to succeed.
constexpr std::chrono::milliseconds generous = 10s;

using tutti_test::catch_error;
using tutti_test::caught;
using tutti_test::contains;

long long ms_since(clk::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clk::now() - t0).count();
}

/// A TCP socket bound to 127.0.0.1 on a free port, listening if asked. A bound socket that
/// does not listen refuses connections while keeping the port reserved.
struct test_socket {
  unique_fd fd;
  int port = 0;
};

test_socket bound_socket(bool listening) {
  test_socket s;
  s.fd.reset(::socket(AF_INET, SOCK_STREAM, 0));  // no SOCK_CLOEXEC: adoption must set it
  REQUIRE(s.fd);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(s.fd.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0);
  if (listening) REQUIRE(::listen(s.fd.get(), 64) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(s.fd.get(), reinterpret_cast<sockaddr*>(&a), &len) == 0);
  s.port = ntohs(a.sin_port);
  return s;
}

/// Runs `body` in a forked child, which exits 0 when it returns true, 1 when false, 2 when
/// it throws (the message goes to stderr). The child never returns into doctest.
template <class F>
pid_t fork_child(F&& body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int code = 2;
    try {
      code = body() ? 0 : 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child %d: %s\n", static_cast<int>(::getpid()), e.what());
    }
    std::fflush(nullptr);
    ::_exit(code);
  }
  return pid;
}

/// The child's exit code, or -1 when it died of a signal.
int exit_code(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -2;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/// prefix0, prefix1, ..., prefix{n-1}.
std::vector<std::string> numbered(const std::string& prefix, int n) {
  std::vector<std::string> keys;
  keys.reserve(static_cast<std::size_t>(n));
  for (int j = 0; j < n; ++j) keys.push_back(prefix + std::to_string(j));
  return keys;
}

std::vector<std::byte> bytes(std::string_view s) {
  const auto b = tutti::detail::store_bytes(s);
  return {b.begin(), b.end()};
}

std::vector<std::byte> le32(std::uint32_t v) {
  return {std::byte(v & 0xff), std::byte((v >> 8) & 0xff), std::byte((v >> 16) & 0xff),
          std::byte(v >> 24)};
}

std::vector<std::byte> cat(std::initializer_list<std::vector<std::byte>> parts) {
  std::vector<std::byte> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

/// A blocking raw connection to 127.0.0.1:port whose reads give up after 5 s.
unique_fd raw_connect(int port) {
  unique_fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(fd);
  timeval tv{5, 0};
  REQUIRE(::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  REQUIRE(::connect(fd.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

void send_raw(int fd, const std::vector<std::byte>& data) {
  REQUIRE(::send(fd, data.data(), data.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(data.size()));
}

/// Reads until the peer closes: true on EOF or reset, false when 5 s pass first.
bool closed_by_peer(int fd) {
  char buf[256];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

/// Reads one request frame from a blocking socket; false on EOF.
bool read_frame(int fd) {
  std::byte head[4];
  if (::recv(fd, head, 4, MSG_WAITALL) != 4) return false;
  std::vector<std::byte> body(tutti::detail::store_load_le(head, 4));
  return ::recv(fd, body.data(), body.size(), MSG_WAITALL) == static_cast<ssize_t>(body.size());
}

/// A fake store server: accepts one client, answers its first request with `reply` (or
/// closes the connection when `reply` is empty, or stays silent with `silent`), then waits for
/// the client to leave.
class fake_server {
 public:
  explicit fake_server(std::vector<std::byte> reply, bool silent = false)
      : sock_(bound_socket(true)), thread_([this, r = std::move(reply), silent] {
          pollfd p{sock_.fd.get(), POLLIN, 0};
          if (::poll(&p, 1, 10'000) != 1) return;
          unique_fd conn(::accept(sock_.fd.get(), nullptr, nullptr));
          timeval tv{10, 0};
          if (!conn || ::setsockopt(conn.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0 ||
              !read_frame(conn.get()))
            return;
          if (r.empty() && !silent) return;
          if (!r.empty()) (void)::send(conn.get(), r.data(), r.size(), MSG_NOSIGNAL);
          char buf[64];
          while (::recv(conn.get(), buf, sizeof buf, 0) > 0) {
          }
        }) {}
  fake_server(const fake_server&) = delete;
  fake_server& operator=(const fake_server&) = delete;
  ~fake_server() { thread_.join(); }
  [[nodiscard]] int port() const { return sock_.port; }

 private:
  test_socket sock_;
  std::thread thread_;
};

/// A temporary directory, removed with its files.
class temp_dir {
 public:
  temp_dir() {
    std::string t = "/tmp/tutti_bootstrap_XXXXXX";
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    path_ = t;
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() { (void)std::system(("rm -rf '" + path_ + "'").c_str()); }
  [[nodiscard]] std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace

TEST_CASE("tcp_store: set, get, add and wait through the serving object and a client") {
  bs::tcp_store server("127.0.0.1", 0, true, generous);
  REQUIRE(server.is_server());
  REQUIRE(server.port() > 0);
  bs::tcp_store client("127.0.0.1", server.port(), false, generous);
  CHECK_FALSE(client.is_server());

  server.set_string("greeting", "hello");
  CHECK(client.get_string("greeting", generous) == "hello");
  client.set_string("greeting", "replaced");
  CHECK(server.get_string("greeting", generous) == "replaced");

  const std::vector<std::byte> binary{std::byte{0}, std::byte{0xff}, std::byte{0}, std::byte{7}};
  client.set("binary", binary);
  CHECK(server.get("binary", generous) == binary);
  client.set_string("empty", "");
  CHECK(server.get("empty", generous).empty());

  CHECK(client.add("counter", 5) == 5);  // a missing key counts as 0
  CHECK(server.add("counter", -8) == -3);
  CHECK(client.get_string("counter", generous) == "-3");
  server.set_string("counter", "40");
  CHECK(client.add("counter", 2) == 42);

  const std::vector<std::string> keys{"greeting", "binary", "counter"};
  client.wait(keys, generous);
  client.wait(std::span<const std::string>{}, 0ms);
  CHECK(client.get_string("greeting", 0ms) == "replaced");  // present: no waiting needed

  const caught not_a_number = catch_error([&] { (void)client.add("greeting", 1); });
  CHECK(not_a_number.kind == errc::invalid_argument);
  CHECK(contains(not_a_number.what, "'greeting'"));
  server.set_string("big", "9223372036854775807");
  CHECK(catch_error([&] { (void)client.add("big", 1); }).kind == errc::invalid_argument);
  client.set_string("still", "works");  // a failed add leaves the connection usable
  CHECK(server.get_string("still", generous) == "works");
}

TEST_CASE("tcp_store: limits and bad arguments raise invalid_argument") {
  bs::tcp_store server("127.0.0.1", 0, true, generous);
  const std::string longest(bs::max_key_bytes, 'k');
  const std::vector<std::byte> largest(bs::max_value_bytes, std::byte{0x5a});
  server.set(longest, largest);
  CHECK(server.get(longest, generous) == largest);

  for (const caught& c : {
           catch_error([&] { server.set_string("", "v"); }),
           catch_error([&] { server.set_string(longest + "k", "v"); }),
           catch_error([&] { server.set("k", std::vector<std::byte>(bs::max_value_bytes + 1)); }),
           catch_error([&] { (void)server.get("", 0ms); }),
           catch_error([&] { (void)server.add("", 1); }),
           catch_error([&] {
             server.wait(std::vector<std::string>{"ok", ""}, 0ms);
           }),
           catch_error([&] { bs::tcp_store("127.0.0.1", 0, false, 1s); }),
           catch_error([&] { bs::tcp_store("127.0.0.1", 65536, false, 1s); }),
           catch_error([&] { bs::tcp_store("", 1234, false, 1s); }),
       }) {
    CHECK(c.raised);
    CHECK(c.kind == errc::invalid_argument);
  }
  CHECK(server.get_string(longest, generous).size() == bs::max_value_bytes);
}

TEST_CASE("tcp_store: clients in threads see each other's keys") {
  constexpr int n = 4;
  bs::tcp_store server("127.0.0.1", 0, true, generous);
  std::vector<std::string> seen(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      bs::tcp_store c("127.0.0.1", server.port(), false, generous);
      c.set_string("thread/" + std::to_string(i), "from " + std::to_string(i));
      const std::vector<std::string> keys = numbered("thread/", n);
      c.wait(keys, generous);
      for (const auto& k : keys) seen[static_cast<std::size_t>(i)] += c.get_string(k, 0ms) + ";";
    });
  for (auto& t : threads) t.join();
  for (const auto& s : seen) CHECK(s == "from 0;from 1;from 2;from 3;");
}

TEST_CASE("tcp_store: get blocks until another client sets the key") {
  bs::tcp_store server("127.0.0.1", 0, true, generous);
  bs::tcp_store client("127.0.0.1", server.port(), false, generous);
  std::string got;
  std::thread waiter([&] { got = client.get_string("late", generous); });
  server.set_string("late", "arrived");
  waiter.join();
  CHECK(got == "arrived");
}

TEST_CASE("tcp_store: add is atomic across clients and across threads sharing one client") {
  constexpr int clients = 4;
  constexpr int adds = 1000;
  bs::tcp_store server("127.0.0.1", 0, true, generous);
  std::vector<std::vector<std::int64_t>> returned(clients);
  std::vector<std::thread> threads;
  threads.reserve(clients);
  for (int i = 0; i < clients; ++i)
    threads.emplace_back([&, i] {
      bs::tcp_store c("127.0.0.1", server.port(), false, generous);
      for (int k = 0; k < adds; ++k)
        returned[static_cast<std::size_t>(i)].push_back(c.add("counter", 1));
    });
  for (auto& t : threads) t.join();
  std::vector<std::int64_t> all;
  for (const auto& r : returned) all.insert(all.end(), r.begin(), r.end());
  std::sort(all.begin(), all.end());
  std::vector<std::int64_t> expected(std::size_t{clients} * adds);
  std::iota(expected.begin(), expected.end(), 1);
  CHECK(all == expected);  // every intermediate value handed out exactly once
  CHECK(server.get_string("counter", generous) == std::to_string(clients * adds));

  threads.clear();
  for (int i = 0; i < clients; ++i)
    threads.emplace_back([&] {
      for (int k = 0; k < 100; ++k) (void)server.add("shared", 3);
    });
  for (auto& t : threads) t.join();
  CHECK(server.add("shared", 0) == clients * 100 * 3);
}

TEST_CASE("tcp_store: clients in forked processes, connected before the server runs") {
  // Like tutti::spawn: the listening socket exists before the children fork, the server
  // adopts it later, so the children's connections wait in its backlog.
  constexpr int n = 3;
  constexpr int adds = 200;
  test_socket listener = bound_socket(true);
  const int port = listener.port;
  std::vector<pid_t> kids;
  kids.reserve(n);
  for (int i = 0; i < n; ++i)
    kids.push_back(fork_child([port, i] {
      bs::tcp_store c("127.0.0.1", port, false, generous);
      c.set_string("proc/" + std::to_string(i), "value " + std::to_string(i));
      for (int k = 0; k < adds; ++k) (void)c.add("procs", 1);
      const std::vector<std::string> keys = numbered("proc/", n);
      c.wait(keys, generous);
      for (int j = 0; j < n; ++j)
        if (c.get_string(keys[static_cast<std::size_t>(j)], 0ms) != "value " + std::to_string(j))
          return false;
      return c.get_string("from parent", generous) == "hi";
    }));
  REQUIRE(::setenv("TUTTI_STORE_FD", std::to_string(listener.fd.release()).c_str(), 1) == 0);
  bs::tcp_store server("127.0.0.1", port, true, generous);
  CHECK(std::getenv("TUTTI_STORE_FD") == nullptr);
  server.set_string("from parent", "hi");
  for (const pid_t pid : kids) CHECK(exit_code(pid) == 0);
  CHECK(server.get_string("procs", 0ms) == std::to_string(n * adds));
}

TEST_CASE("tcp_store: get and wait time out at the caller's deadline") {
  bs::tcp_store server("127.0.0.1", 0, true, generous);
  bs::tcp_store client("127.0.0.1", server.port(), false, generous);
  const std::string addr = "127.0.0.1:" + std::to_string(server.port());

  auto t0 = clk::now();
  const caught g = catch_error([&] { (void)client.get("missing", 200ms); });
  auto took = ms_since(t0);
  CHECK(g.kind == errc::timeout);
  CHECK(took >= 200);
  CHECK(took < 1000);  // the server's answer, not the client's 1 s grace
  CHECK(contains(g.what, "tcp_store " + addr));
  CHECK(contains(g.what, "'missing'"));
  CHECK(contains(g.what, "200 ms"));

  server.set_string("here", "1");
  t0 = clk::now();
  const caught w = catch_error([&] {
    client.wait(std::vector<std::string>{"here", "absent"}, 150ms);
  });
  took = ms_since(t0);
  CHECK(w.kind == errc::timeout);
  CHECK(took >= 150);
  CHECK(took < 1000);
  CHECK(contains(w.what, "still missing: 'absent')"));

  CHECK(catch_error([&] { (void)client.get("missing", 0ms); }).kind == errc::timeout);
  client.set_string("missing", "found");  // a timeout leaves the connection usable
  CHECK(client.get_string("missing", 0ms) == "found");
}

TEST_CASE("tcp_store: a client started before the server retries until it appears") {
  test_socket reserved = bound_socket(false);  // refuses connections until released
  const int port = reserved.port;
  std::atomic<bool> started{false};
  std::string got;
  caught failure;
  std::thread client([&] {
    started.store(true);
    failure = catch_error([&] {
      bs::tcp_store c("127.0.0.1", port, false, generous);
      got = c.get_string("hello", generous);
    });
  });
  while (!started.load()) std::this_thread::yield();
  reserved.fd.reset();
  bs::tcp_store server("127.0.0.1", port, true, generous);
  server.set_string("hello", "world");
  client.join();
  CHECK_FALSE(failure.raised);
  CHECK(got == "world");
}

TEST_CASE("tcp_store: a client gives up when nothing ever listens") {
  const test_socket reserved = bound_socket(false);
  const auto t0 = clk::now();
  const caught c = catch_error([&] { bs::tcp_store("127.0.0.1", reserved.port, false, 300ms); });
  const auto took = ms_since(t0);
  CHECK(c.kind == errc::timeout);
  CHECK(took >= 300);
  CHECK(took < 2000);
  CHECK(contains(c.what, "127.0.0.1:" + std::to_string(reserved.port)));
  CHECK(contains(c.what, "300 ms"));
  CHECK(contains(c.what, "errno " + std::to_string(ECONNREFUSED)));
}

TEST_CASE("tcp_store: the server drops clients that break the protocol and serves the rest") {
  bs::tcp_store server("127.0.0.1", 0, true, generous);
  bs::tcp_store good("127.0.0.1", server.port(), false, generous);
  std::string parked_got;
  std::thread parked([&] {
    bs::tcp_store c("127.0.0.1", server.port(), false, generous);
    parked_got = c.get_string("after abuse", generous);
  });

  const auto set_op = std::vector<std::byte>{std::byte{1}};
  const auto wait_op = std::vector<std::byte>{std::byte{4}};
  const std::vector<std::vector<std::byte>> abuse{
      bytes("GET / HTTP/1.1\r\nHost: store\r\n\r\n"),  // garbage: "GET " announces 542 MB
      cat({le32(0xffffffffU), bytes("four gigabytes follow")}),
      cat({le32(0)}),                                     // empty frame
      cat({le32(1), {std::byte{0x7f}}}),                  // unknown op
      cat({le32(9), set_op, le32(1000), bytes("abcd")}),  // key longer than frame
      cat({le32(11), set_op, le32(1), bytes("k"), le32(0), {std::byte{9}}}),   // extra byte
      cat({le32(9), set_op, le32(0), le32(0)}),                                // empty key
      cat({le32(13), wait_op, std::vector<std::byte>(8), le32(0xffffffffU)}),  // huge count
  };
  for (const auto& frame : abuse) {
    const unique_fd raw = raw_connect(server.port());
    send_raw(raw.get(), frame);
    CHECK(closed_by_peer(raw.get()));
  }
  {  // a truncated frame: the client leaves mid-frame
    const unique_fd raw = raw_connect(server.port());
    send_raw(raw.get(), cat({le32(100), bytes("0123456789")}));
    REQUIRE(::shutdown(raw.get(), SHUT_WR) == 0);
    CHECK(closed_by_peer(raw.get()));
  }
  good.set_string("after abuse", "still serving");
  CHECK(server.get_string("after abuse", generous) == "still serving");
  parked.join();
  CHECK(parked_got == "still serving");
  bs::tcp_store late("127.0.0.1", server.port(), false, generous);
  CHECK(late.add("n", 1) == 1);
}

TEST_CASE("tcp_store: malformed or oversized replies are transport failures") {
  const std::vector<std::vector<std::byte>> replies{
      le32(0xffffffffU),                                           // oversized frame
      le32(0),                                                     // empty frame
      cat({le32(1), {std::byte{9}}}),                              // unknown status
      cat({le32(5), {std::byte{0}}, le32(100)}),                   // value longer than the frame
      cat({le32(3), {std::byte{2}, std::byte{0}, std::byte{0}}}),  // failed without a message
  };
  for (const auto& reply : replies) {
    fake_server fake(reply);
    bs::tcp_store client("127.0.0.1", fake.port(), false, generous);
    const caught c = catch_error([&] { (void)client.get("k", generous); });
    CHECK(c.kind == errc::transport_failure);
    CHECK(contains(c.what, "malformed reply"));
    const caught again = catch_error([&] { client.set_string("k", "v"); });
    CHECK(again.kind == errc::transport_failure);
    CHECK(contains(again.what, "lost earlier"));
  }
}

TEST_CASE("tcp_store: a server that closes the connection or stops answering") {
  {
    fake_server fake({});  // reads the request, then closes
    bs::tcp_store client("127.0.0.1", fake.port(), false, generous);
    const caught c = catch_error([&] { client.set_string("k", "v"); });
    CHECK(c.kind == errc::peer_lost);
    CHECK(contains(c.what, "closed the connection"));
  }
  {
    fake_server fake({}, true);  // reads the request, never answers
    bs::tcp_store client("127.0.0.1", fake.port(), false, generous);
    const auto t0 = clk::now();
    const caught c = catch_error([&] { (void)client.get("k", 200ms); });
    const auto took = ms_since(t0);
    CHECK(c.kind == errc::timeout);
    CHECK(took >= 200);
    CHECK(took < 200 + 1000 + 1500);  // the deadline plus the 1 s grace for the server's answer
  }
  {  // the real server going away while a client waits
    auto server = std::make_unique<bs::tcp_store>("127.0.0.1", 0, true, generous);
    bs::tcp_store client("127.0.0.1", server->port(), false, generous);
    client.set_string("k", "v");
    caught c;
    std::thread waiter([&] { c = catch_error([&] { (void)client.get("never", generous); }); });
    server.reset();
    waiter.join();
    CHECK(c.kind == errc::peer_lost);
    CHECK(catch_error([&] { (void)client.get("k", 0ms); }).kind == errc::peer_lost);
  }
}

TEST_CASE("tcp_store: adopts the listening socket named by TUTTI_STORE_FD") {
  test_socket listener = bound_socket(true);
  const int fd = listener.fd.release();
  REQUIRE(::setenv("TUTTI_STORE_FD", std::to_string(fd).c_str(), 1) == 0);
  bs::tcp_store server("127.0.0.1", listener.port, true, generous);
  CHECK(std::getenv("TUTTI_STORE_FD") == nullptr);
  CHECK(server.port() == listener.port);
  CHECK((::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
  bs::tcp_store client("127.0.0.1", listener.port, false, generous);
  client.set_string("adopted", "yes");
  CHECK(server.get_string("adopted", generous) == "yes");
}

TEST_CASE("tcp_store: ignores a TUTTI_STORE_FD that is not a listener on the requested port") {
  const test_socket other = bound_socket(true);
  test_socket wanted = bound_socket(false);
  const int port = wanted.port;
  wanted.fd.reset();
  const std::vector<std::string> values{std::to_string(other.fd.get()), "12abc",
                                        std::to_string(STDIN_FILENO)};
  for (const std::string& value : values) {
    REQUIRE(::setenv("TUTTI_STORE_FD", value.c_str(), 1) == 0);
    bs::tcp_store server("127.0.0.1", port, true, generous);
    CHECK(server.port() == port);
    REQUIRE(std::getenv("TUTTI_STORE_FD") != nullptr);
    CHECK(std::string(std::getenv("TUTTI_STORE_FD")) == value);
  }
  CHECK(::fcntl(other.fd.get(), F_GETFD) != -1);  // not taken over, still open
  REQUIRE(::unsetenv("TUTTI_STORE_FD") == 0);
}

TEST_CASE("tcp_store: a taken port is a transport failure that says so") {
  REQUIRE(std::getenv("TUTTI_STORE_FD") == nullptr);
  const test_socket taken = bound_socket(true);
  const caught c = catch_error([&] { bs::tcp_store("127.0.0.1", taken.port, true, 1s); });
  CHECK(c.kind == errc::transport_failure);
  CHECK(contains(c.what, "port " + std::to_string(taken.port) + " is already taken"));
  CHECK(contains(c.what, "EADDRINUSE"));
  CHECK(contains(c.what, "torchrun"));
  CHECK(contains(c.what, "MASTER_PORT"));
}

TEST_CASE("tcp_store: listens only on the address it was given") {
  REQUIRE(std::getenv("TUTTI_STORE_FD") == nullptr);
  const auto bound_to = [](const std::string& host) {
    const unique_fd fd = tutti::detail::bind_store_listener(host, 0);
    char text[INET_ADDRSTRLEN] = "";
    const sockaddr_in a = tutti::detail::store_local_address(fd.get());
    REQUIRE(::inet_ntop(AF_INET, &a.sin_addr, text, sizeof text) != nullptr);
    return std::string(text);
  };
  CHECK(bound_to("localhost") == "127.0.0.1");
  CHECK(bound_to("127.0.0.1") == "127.0.0.1");
  CHECK(bound_to("127.0.0.2") == "127.0.0.2");
  // Every interface only when asked for explicitly.
  CHECK(bound_to("0.0.0.0") == "0.0.0.0");
  CHECK(bound_to("") == "0.0.0.0");
  // A name binds the address it resolves to here, the one local clients connect to (for the
  // machine's own name on Debian: 127.0.1.1), never every interface.
  char name[256] = "";
  REQUIRE(::gethostname(name, sizeof name - 1) == 0);
  sockaddr_in resolved{};
  REQUIRE(tutti::detail::store_resolve(name, 0, resolved).empty());
  char expected[INET_ADDRSTRLEN] = "";
  REQUIRE(::inet_ntop(AF_INET, &resolved.sin_addr, expected, sizeof expected) != nullptr);
  CHECK(bound_to(name) == std::string(expected));
  CHECK(bound_to(name) != "0.0.0.0");
  bs::tcp_store server(name, 0, true, generous);
  bs::tcp_store client(name, server.port(), false, generous);
  client.set_string("by-hostname", "yes");
  CHECK(server.get_string("by-hostname", generous) == "yes");
  // An address of another machine (TEST-NET-1, RFC 5737) cannot be served from here.
  const caught c = catch_error([&] { (void)tutti::detail::bind_store_listener("192.0.2.1", 0); });
  CHECK(c.kind == errc::transport_failure);
  CHECK(contains(c.what, "192.0.2.1 is 192.0.2.1, not an address of this machine"));
  CHECK(contains(c.what, "0.0.0.0 to listen on every interface"));

  // TUTTI_STORE_BIND: the listening address only (clients still dial the given host).
  scoped_env env;
  env.set("TUTTI_STORE_BIND", "0.0.0.0");
  CHECK(bound_to(name) == "0.0.0.0");
  CHECK(bound_to("localhost") == "0.0.0.0");
  bs::tcp_store everywhere("localhost", 0, true, generous);
  bs::tcp_store dialer("127.0.0.1", everywhere.port(), false, generous);
  dialer.set_string("bind", "any");
  CHECK(everywhere.get_string("bind", generous) == "any");
  env.set("TUTTI_STORE_BIND", "192.0.2.1");
  const caught bad = catch_error([&] { (void)tutti::detail::bind_store_listener("localhost", 0); });
  CHECK(contains(bad.what, "(TUTTI_STORE_BIND)"));
}

TEST_CASE("file_store: set, get, add and wait; file mode and limits") {
  const temp_dir dir;
  const std::string path = dir.file("store");
  bs::file_store s(path, generous);
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);

  s.set_string("a", "1");
  s.set_string("a", "2");
  CHECK(s.get_string("a", 0ms) == "2");
  CHECK(s.add("n", 7) == 7);
  CHECK(s.add("n", -10) == -3);
  CHECK(s.get_string("n", 0ms) == "-3");
  s.wait(std::vector<std::string>{"a", "n"}, 0ms);
  s.set_string("text", "12 apples");
  CHECK(catch_error([&] { (void)s.add("text", 1); }).kind == errc::invalid_argument);
  CHECK(s.get_string("text", 0ms) == "12 apples");  // a failed add changes nothing
  CHECK(s.add("a", 1) == 3);                        // "2" is a decimal integer
  CHECK(catch_error([&] { s.set_string("", "v"); }).kind == errc::invalid_argument);
  CHECK(catch_error([&] { s.set_string(std::string(bs::max_key_bytes + 1, 'k'), "v"); }).kind ==
        errc::invalid_argument);

  bs::file_store other(path, generous);  // a second opener sees everything
  CHECK(other.get_string("a", 0ms) == "3");
  CHECK(other.get_string("n", 0ms) == "-3");

  s.remove();
  CHECK(::access(path.c_str(), F_OK) != 0);
  s.remove();  // already gone: fine
  CHECK(catch_error([&] { bs::file_store(dir.file("no/such/dir"), 1s); }).kind ==
        errc::transport_failure);
}

TEST_CASE("file_store: processes see each other's sets and adds atomically") {
  constexpr int n = 3;
  constexpr int adds = 300;
  const temp_dir dir;
  const std::string path = dir.file("store");
  bs::file_store parent(path, generous);
  std::vector<pid_t> kids;
  kids.reserve(n + 1);
  for (int i = 0; i < n; ++i)
    kids.push_back(fork_child([&path, i] {
      bs::file_store s(path, generous);
      s.set_string("proc/" + std::to_string(i), std::to_string(i * i));
      for (int k = 0; k < adds; ++k) (void)s.add("counter", 1);
      std::vector<std::string> keys = numbered("proc/", n);
      keys.emplace_back("go");
      s.wait(keys, generous);
      for (int j = 0; j < n; ++j)
        if (s.get_string("proc/" + std::to_string(j), 0ms) != std::to_string(j * j)) return false;
      return s.get_string("go", 0ms) == "now";
    }));
  // One more child uses the inherited object, concurrently with the parent using it.
  kids.push_back(fork_child([&parent] {
    for (int k = 0; k < adds; ++k) (void)parent.add("counter", 1);
    return true;
  }));
  for (int k = 0; k < adds; ++k) (void)parent.add("counter", 1);
  parent.set_string("go", "now");
  for (const pid_t pid : kids) CHECK(exit_code(pid) == 0);
  CHECK(parent.get_string("counter", generous) == std::to_string((n + 2) * adds));
}

TEST_CASE("file_store: get and wait time out at the deadline") {
  const temp_dir dir;
  bs::file_store s(dir.file("store"), generous);
  auto t0 = clk::now();
  const caught g = catch_error([&] { (void)s.get("missing", 200ms); });
  auto took = ms_since(t0);
  CHECK(g.kind == errc::timeout);
  CHECK(took >= 200);
  CHECK(took < 1000);
  CHECK(contains(g.what, "file_store " + dir.file("store")));
  CHECK(contains(g.what, "'missing'"));
  CHECK(contains(g.what, "200 ms"));
  t0 = clk::now();
  const caught w = catch_error([&] { s.wait(std::vector<std::string>{"x", "y"}, 100ms); });
  took = ms_since(t0);
  CHECK(w.kind == errc::timeout);
  CHECK(took >= 100);
  CHECK(took < 1000);
  CHECK(contains(w.what, "'x', 'y'"));
}

TEST_CASE("file_store: rejects foreign files and recovers from a half-written record") {
  const temp_dir dir;
  {
    std::ofstream(dir.file("foreign")) << "hello, this is not a store";
    const caught c = catch_error([&] { bs::file_store(dir.file("foreign"), 1s); });
    CHECK(c.kind == errc::transport_failure);
    CHECK(contains(c.what, "not a valid tutti file store"));
  }
  {
    const std::string path = dir.file("torn");
    std::vector<std::byte> content = cat({bytes("TUTTIKV1"), le32(1), le32(2), bytes("kvv")});
    const std::vector<std::byte> torn = cat({le32(3), le32(100), bytes("abc"), bytes("partial")});
    content.insert(content.end(), torn.begin(), torn.end());
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(content.data()),
               static_cast<std::streamsize>(content.size()));
    bs::file_store s(path, generous);
    CHECK(s.get_string("k", 0ms) == "vv");
    CHECK(catch_error([&] { (void)s.get("abc", 0ms); }).kind == errc::timeout);
    s.set_string("after", "tear");  // cuts the torn record off first
    bs::file_store fresh(path, generous);
    CHECK(fresh.get_string("k", 0ms) == "vv");
    CHECK(fresh.get_string("after", 0ms) == "tear");
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK(st.st_size == 8 + (8 + 1 + 2) + (8 + 5 + 4));
  }
}

TEST_CASE("parse_init_url: accepted forms") {
  auto u = bs::parse_init_url("env://");
  CHECK(u.scheme == "env");
  CHECK(u.host.empty());
  CHECK(u.port == -1);
  CHECK(u.path.empty());
  CHECK(u.query.empty());

  u = bs::parse_init_url("tcp://10.1.1.20:23456");
  CHECK(u.scheme == "tcp");
  CHECK(u.host == "10.1.1.20");
  CHECK(u.port == 23456);

  u = bs::parse_init_url("TCP://node-7.cluster:1/?world_size=4&rank=0&flag&note=a%20b");
  CHECK(u.scheme == "tcp");
  CHECK(u.host == "node-7.cluster");
  CHECK(u.port == 1);
  CHECK(u.query == std::map<std::string, std::string>{
                       {"world_size", "4"}, {"rank", "0"}, {"flag", ""}, {"note", "a b"}});

  u = bs::parse_init_url("tcp://[::1]:65535");
  CHECK(u.host == "::1");
  CHECK(u.port == 65535);

  u = bs::parse_init_url("file:///shared/jobs/x%20y?rank=2");
  CHECK(u.scheme == "file");
  CHECK(u.path == "/shared/jobs/x y");
  CHECK(u.query.at("rank") == "2");
  CHECK(bs::parse_init_url("file://localhost/tmp/z").path == "/tmp/z");

  u = bs::parse_init_url("redis://cache:6379");
  CHECK(u.scheme == "redis");
  CHECK(u.host == "cache");
  CHECK(u.port == 6379);
}

TEST_CASE("parse_init_url: rejected forms name the URL") {
  const std::vector<std::string> urls{"",
                                      "localhost:1234",
                                      "://h:1",
                                      "http://h:1",
                                      "tcp://host",
                                      "tcp://host:",
                                      "tcp://host:0",
                                      "tcp://host:65536",
                                      "tcp://host:-1",
                                      "tcp://host:12ab",
                                      "tcp://host:99999999999",
                                      "tcp://:1234",
                                      "tcp://a:b:1",
                                      "tcp://h:1/path",
                                      "file://relative/path",
                                      "file://",
                                      "redis://host",
                                      "redis://:6379",
                                      "env://somehost",
                                      "tcp://h:1?=v",
                                      "file:///a%zz",
                                      "file:///a%4"};
  for (const std::string& url : urls) {
    CAPTURE(url);
    const caught c = catch_error([&] { (void)bs::parse_init_url(url); });
    CHECK(c.raised);
    CHECK(c.kind == errc::invalid_argument);
    CHECK(contains(c.what, "'" + url + "'"));
  }
}

TEST_CASE("make_store: tcp, file and redis") {
  test_socket listener = bound_socket(true);
  REQUIRE(::setenv("TUTTI_STORE_FD", std::to_string(listener.fd.release()).c_str(), 1) == 0);
  const auto url = bs::parse_init_url("tcp://127.0.0.1:" + std::to_string(listener.port));
  const auto rank0 = bs::make_store(url, 0, generous);
  const auto rank1 = bs::make_store(url, 1, generous);
  CHECK(dynamic_cast<bs::tcp_store&>(*rank0).is_server());
  CHECK_FALSE(dynamic_cast<bs::tcp_store&>(*rank1).is_server());
  rank1->set_string("via", "url");
  CHECK(rank0->get_string("via", generous) == "url");

  const temp_dir dir;
  const auto f = bs::make_store(bs::parse_init_url("file://" + dir.file("s")), 3, generous);
  CHECK(dynamic_cast<bs::file_store&>(*f).path() == dir.file("s"));

  const caught redis =
      catch_error([&] { (void)bs::make_store(bs::parse_init_url("redis://h:6379"), 0, 1s); });
  CHECK(redis.kind == errc::invalid_argument);
  CHECK(contains(redis.what, "redis:// needs the tutti::gloo component"));
  CHECK(catch_error([&] { (void)bs::make_store(url, -1, 1s); }).kind == errc::invalid_argument);
}

TEST_CASE("env_store: one process-wide store for MASTER_ADDR:MASTER_PORT") {
  REQUIRE(::unsetenv("MASTER_ADDR") == 0);
  REQUIRE(::unsetenv("MASTER_PORT") == 0);
  const auto env = bs::parse_init_url("env://");
  caught c = catch_error([&] { (void)bs::make_store(env, 0, 1s); });
  CHECK(c.kind == errc::invalid_argument);
  CHECK(contains(c.what, "MASTER_ADDR"));
  REQUIRE(::setenv("MASTER_ADDR", "127.0.0.1", 1) == 0);
  c = catch_error([&] { (void)bs::env_store(0, 1s); });
  CHECK(c.kind == errc::invalid_argument);
  CHECK(contains(c.what, "MASTER_PORT"));
  REQUIRE(::setenv("MASTER_PORT", "http", 1) == 0);
  c = catch_error([&] { (void)bs::env_store(0, 1s); });
  CHECK(c.kind == errc::invalid_argument);
  CHECK(contains(c.what, "MASTER_PORT='http'"));

  test_socket listener = bound_socket(true);
  REQUIRE(::setenv("MASTER_PORT", std::to_string(listener.port).c_str(), 1) == 0);
  REQUIRE(::setenv("TUTTI_STORE_FD", std::to_string(listener.fd.release()).c_str(), 1) == 0);
  const auto first = bs::env_store(0, generous);
  CHECK(bs::env_store(0, generous) == first);
  CHECK(bs::env_store(5, generous) == first);  // ranks that are threads of rank 0's process
  CHECK(bs::make_store(env, 1, generous) == first);
  CHECK(dynamic_cast<bs::tcp_store&>(*first).is_server());

  const pid_t kid = fork_child([] {
    const auto s = bs::env_store(1, generous);
    const bool same = bs::env_store(1, generous) == s;
    s->set_string("child", "was here");
    return same && !dynamic_cast<bs::tcp_store&>(*s).is_server();
  });
  CHECK(first->get_string("child", generous) == "was here");
  CHECK(exit_code(kid) == 0);
  REQUIRE(::unsetenv("MASTER_ADDR") == 0);
  REQUIRE(::unsetenv("MASTER_PORT") == 0);
}

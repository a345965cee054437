// redis:// stores against a real redis-server this test starts on loopback (Debian's
// redis-server; the test reports itself skipped when none is on PATH): set/get/add/wait with
// deadlines, binary values, a server that goes away, and a tutti::gloo world meeting through it.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include <tutti/bootstrap/redis_store.hpp>
#include <tutti/transport/gloo.hpp>
#include <tutti/tutti.hpp>

#include "fork_ranks.hpp"

using namespace fork_ranks;  // NOLINT(google-build-using-namespace): test helpers
using namespace std::chrono_literals;

namespace {

/// True if an executable redis-server is on PATH.
bool have_redis() {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  std::size_t at = 0;
  while (at <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', at), dirs.size());
    const std::string dir = dirs.substr(at, end - at);
    if (::access(((dir.empty() ? "." : dir) + "/redis-server").c_str(), X_OK) == 0) return true;
    at = end + 1;
  }
  return false;
}

/// A free loopback port (bound, read, released).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

/// redis-server on 127.0.0.1:port, no persistence, stopped (SIGKILL) when this goes.
class redis_server {
 public:
  redis_server() : port_(free_port()) {
    std::fflush(nullptr);
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      const int null = ::open("/dev/null", O_WRONLY);  // its start-up banner and warnings
      if (null >= 0) {
        ::dup2(null, 1);
        ::dup2(null, 2);
      }
      const std::string port = std::to_string(port_);
      execlp("redis-server", "redis-server", "--port", port.c_str(), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
             static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  redis_server(const redis_server&) = delete;
  redis_server& operator=(const redis_server&) = delete;
  ~redis_server() { stop(); }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
  }
  [[nodiscard]] int port() const noexcept { return port_; }
  [[nodiscard]] std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

 private:
  int port_;
  pid_t pid_ = -1;
};

std::span<const std::byte> bytes(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

}  // namespace

TEST_CASE("redis_store: set, get, replace, add, wait, binary values, deadlines") {
  if (!have_redis()) {
    MESSAGE("redis-server not found on PATH; skipped (Debian: apt-get install redis-server)");
    return;
  }
  redis_server server;
  // The constructor retries until the server listens.
  tutti::bootstrap::redis_store st("127.0.0.1", server.port(), 10s);
  st.set_string("a", "one");
  CHECK(st.get_string("a", 1s) == "one");
  st.set_string("a", "two");  // a later set replaces the value
  CHECK(st.get_string("a", 1s) == "two");
  const std::string binary("x\0y\xff", 4);
  st.set("bin", bytes(binary));
  CHECK(st.get_string("bin", 1s) == binary);
  st.set_string("empty", "");
  CHECK(st.get_string("empty", 1s).empty());

  CHECK(st.add("counter", 5) == 5);
  CHECK(st.add("counter", -2) == 3);
  CHECK(st.get_string("counter", 1s) == "3");
  try {
    (void)st.add("a", 1);
    FAIL("add on a non-number must raise");
  } catch (const tutti::error& e) {
    CHECK(e.kind() == tutti::errc::invalid_argument);
  }

  const auto t0 = std::chrono::steady_clock::now();
  try {
    (void)st.get("missing", 200ms);
    FAIL("expected a timeout");
  } catch (const tutti::error& e) {
    CHECK(e.kind() == tutti::errc::timeout);
    CHECK(std::string(e.what()).find("missing") != std::string::npos);
  }
  const auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(waited >= 200ms);
  CHECK(waited < 3s);

  std::thread setter([&] {
    tutti::bootstrap::redis_store other("127.0.0.1", server.port(), 5s);
    std::this_thread::sleep_for(50ms);
    other.set_string("k1", "1");
    other.set_string("k2", "2");
  });
  const std::vector<std::string> keys{"k1", "k2"};
  st.wait(keys, 5s);
  setter.join();
  CHECK(st.get_string("k2", 0ms) == "2");

  server.stop();
  try {
    st.set_string("after", "x");
    FAIL("expected an error once the server is gone");
  } catch (const tutti::error& e) {
    CHECK(e.kind() == tutti::errc::peer_lost);
  }
}

TEST_CASE("redis_store: no server within the timeout is a clear error") {
  if (!have_redis()) return;
  const int port = free_port();  // nothing listens there
  const auto t0 = std::chrono::steady_clock::now();
  try {
    tutti::bootstrap::redis_store st("127.0.0.1", port, 300ms);
    FAIL("expected a timeout");
  } catch (const tutti::error& e) {
    CHECK(e.kind() == tutti::errc::timeout);
    CHECK(std::string(e.what()).find(std::to_string(port)) != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
}

TEST_CASE("a gloo world meets through redis://") {
  if (!have_redis()) return;
  redis_server server;
  const auto status = run_ranks(3, [&](int r) {
    auto comm = tutti::communicator<tutti::gloo>::from_url(server.url(), r, 3);
    std::vector<int> v(1000, r + 1);
    comm.all_reduce(std::span<int>(v), tutti::sum);
    for (int x : v)
      if (x != 6) return 1;
    return 0;
  });
  for (int r = 0; r < 3; ++r) CHECK(exited_with(status[static_cast<std::size_t>(r)], 0));
}

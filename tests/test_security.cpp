// Security of the bootstrap (issue 9): SHA-256 and HMAC-SHA-256 against their standard vectors,
// the tcp_store's token handshake (right, wrong and missing tokens, across tutti::spawn), the
// server's refusal to allocate for announced lengths or to serve unauthenticated requests,
// and the mode and names of shm segments.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <doctest/doctest.h>

#include <tutti/bootstrap/spawn.hpp>
#include <tutti/bootstrap/tcp_store.hpp>
#include <tutti/bootstrap/url.hpp>
#include <tutti/communicator.hpp>
#include <tutti/core/options.hpp>
#include <tutti/detail/cma.hpp>
#include <tutti/detail/gloo_support.hpp>
#include <tutti/detail/sha256.hpp>
#include <tutti/detail/shm_segment.hpp>
#include <tutti/detail/store/engine.hpp>
#include <tutti/detail/store/wire.hpp>
#include <tutti/detail/text_fields.hpp>
#include <tutti/transport/shm.hpp>

#include "caught.hpp"
#include "scoped_env.hpp"

using namespace std::chrono_literals;
namespace bs = tutti::bootstrap;
namespace td = tutti::detail;
using clk = std::chrono::steady_clock;
using tutti::errc;

namespace {

constexpr std::chrono::milliseconds generous = 10s;
/// A rejection must come well before any timeout the test gives.
constexpr auto prompt = 3s;

using tutti_test::catch_error;
using tutti_test::caught;
using tutti_test::contains;

std::span<const std::byte> bytes(std::string_view s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

std::string hex(std::span<const std::byte> d) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  for (const std::byte b : d) {
    s += digits[std::to_integer<int>(b) >> 4];
    s += digits[std::to_integer<int>(b) & 15];
  }
  return s;
}

std::string sha256_hex(std::string_view m) { return hex(td::sha256().update(bytes(m)).digest()); }

std::string hmac_hex(std::string_view key, std::string_view data) {
  const std::span<const std::byte> parts[] = {bytes(data)};
  return hex(td::hmac_sha256(bytes(key), parts));
}

/// A bare frame header announcing `len` payload bytes, and no payload.
std::vector<std::byte> header(std::uint32_t len) {
  std::vector<std::byte> h(4);
  for (std::size_t i = 0; i < 4; ++i) h[i] = std::byte((len >> (8 * i)) & 0xff);
  return h;
}

/// A raw TCP connection to 127.0.0.1:port, blocking, with 5 s receive and send timeouts.
td::unique_fd raw_connect(int port) {
  td::unique_fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(fd);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0);
  const timeval tv{5, 0};
  REQUIRE(::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0);
  REQUIRE(::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) == 0);
  return fd;
}

void send_all(int fd, std::span<const std::byte> b) {
  while (!b.empty()) {
    const ssize_t n = ::send(fd, b.data(), b.size(), MSG_NOSIGNAL);
    REQUIRE(n > 0);
    b = b.subspan(static_cast<std::size_t>(n));
  }
}

/// Reads one reply frame's payload; empty when the server closed the connection first.
std::vector<std::byte> read_frame(int fd) {
  std::vector<std::byte> buf;
  std::byte chunk[4096];
  for (;;) {
    if (buf.size() >= 4) {
      const std::size_t len = td::store_load_le(buf.data(), 4);
      if (buf.size() >= 4 + len) return {buf.begin() + 4, buf.begin() + 4 + static_cast<long>(len)};
    }
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    REQUIRE(n >= 0);  // a timeout (EAGAIN) would mean the server hung: fail, do not wait on
    if (n == 0) return {};
    buf.insert(buf.end(), chunk, chunk + n);
  }
}

/// Whether the server closed the connection: end of file (or a reset) within 5 s.
bool closed_by_server(int fd) {
  std::byte b[256];
  for (;;) {
    const ssize_t n = ::recv(fd, b, sizeof b, 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    if (n < 0) return false;  // timed out: still open
  }
}

/// The message of a "failed" reply, or "" when `reply` is not one.
std::string failure_message(const std::vector<std::byte>& reply) {
  td::store_parser p(reply);
  std::uint8_t status = 0;
  std::uint8_t code = 0;
  std::span<const std::byte> msg;
  if (!p.u8(status) || status != 2 || !p.u8(code) || !p.field(msg, 1 << 16) || !p.done()) return {};
  return td::store_string(msg);
}

/// The store still serves a well-behaved client with `token`.
void still_serves(int port, const std::string& token) {
  bs::tcp_store c("127.0.0.1", port, false, generous, token);
  c.set_string("alive", "yes");
  CHECK(c.get_string("alive", generous) == "yes");
}

}  // namespace

/// One round of "a child creates a segment and dies without unlinking it": what was seen
/// before and after this process's sweep.
struct orphan_round {
  bool seen_before_sweep = false;  // the orphan was still there just before the sweep
  bool child_dead_while_unreaped = false;
  int removed = 0;
  bool gone_after_sweep = false;
  bool child_dead_after_reaping = false;
  /// Whether this sweep alone decided the orphan's fate.
  [[nodiscard]] bool decisive() const {
    return seen_before_sweep && (removed >= 1 || !gone_after_sweep);
  }
};

orphan_round sweep_an_orphan(const td::shm_layout& l) {
  orphan_round r;
  int pipe_fd[2];
  REQUIRE(::pipe(pipe_fd) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(pipe_fd[0]);
    const std::string n = td::shm_random_name(0);
    auto m = td::shm_create(n, l);
    (void)!::write(pipe_fd[1], n.data(), n.size());
    ::_exit(0);  // the mapping goes with the process, the name stays
  }
  ::close(pipe_fd[1]);
  char buf[128] = {};
  const ssize_t got = ::read(pipe_fd[0], buf, sizeof buf - 1);
  ::close(pipe_fd[0]);
  REQUIRE(got > 0);
  const std::string orphan(buf, static_cast<std::size_t>(got));
  // Not reaped yet, the child is a zombie: dead all the same (a launcher reaps when it likes).
  siginfo_t info{};
  REQUIRE(::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT) == 0);
  r.child_dead_while_unreaped = !td::shm_process_alive(child);
  r.seen_before_sweep = ::access(("/dev/shm" + orphan).c_str(), F_OK) == 0;
  r.removed = td::shm_sweep_orphans();
  r.gone_after_sweep = ::access(("/dev/shm" + orphan).c_str(), F_OK) != 0;
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  r.child_dead_after_reaping = !td::shm_process_alive(child);
  ::shm_unlink(orphan.c_str());  // where the sweep failed, so that no round leaves it behind
  return r;
}

TEST_CASE("cma_offer: decode takes exactly what encode writes, nothing else") {
  // The single-copy probe's store record (tutti::gloo): another process writes it.
  using tutti::detail::cma_offer;
  const cma_offer o{"boot-id:4026531836:4026531840", 4242, 0x7ffd1234abc8, 0x9e3779b97f4a7c15};
  CHECK(o.encode() == "boot-id:4026531836:4026531840 4242 7ffd1234abc8 9e3779b97f4a7c15");
  const auto back = cma_offer::decode(o.encode());
  REQUIRE(back.has_value());
  CHECK(back->host == o.host);
  CHECK(back->pid == 4242);
  CHECK(back->address == 0x7ffd1234abc8);
  CHECK(back->value == 0x9e3779b97f4a7c15);
  CHECK(cma_offer::decode("h 1 0 0").has_value());
  CHECK(cma_offer{}.encode() == "off");
  for (const char* bad : {"off",
                          "",
                          " 1 2 3",
                          "h",
                          "h ",
                          "h 1 2",
                          "h 1 2 3 ",
                          "h 1 2 3 4",
                          "h 0 2 3",
                          "h -1 2 3",
                          "h +1 2 3",
                          "h 01 2 3",
                          "h 1 02 3",
                          "h 1 2A 3",
                          "h 1 0x2 3",
                          "h 1  2 3",
                          "h 1 2 3\n",
                          "h 2147483648 2 3",
                          "h 1 10000000000000000 3",
                          "h 1 2 g"}) {
    CAPTURE(bad);
    CHECK_FALSE(cma_offer::decode(bad).has_value());
  }
}

TEST_CASE("store records: integers and fields exactly as written, nothing else") {
  using tutti::detail::parse_integer;
  CHECK(parse_integer<int>("0") == 0);
  CHECK(parse_integer<int>("-1") == -1);
  CHECK(parse_integer<int>("2147483647") == 2147483647);
  CHECK(parse_integer<std::uint64_t>("ffffffffffffffff", 16) == ~std::uint64_t{0});
  for (const char* bad : {"", "-0", "01", "+1", "1a", " 1", "1 ", "2147483648", "-", "0x1"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_integer<int>(bad).has_value());
  }
  CHECK_FALSE(parse_integer<std::uint64_t>("-1").has_value());
  CHECK_FALSE(parse_integer<std::uint64_t>("FF", 16).has_value());
  CHECK_FALSE(parse_integer<std::uint64_t>("18446744073709551616").has_value());
}

TEST_CASE("gloo store records: abort and call records parse exactly what ranks write") {
  // Ranks read each other's records from the store: why a rank aborted the world, and its
  // last call (compared for mismatches, printed in timeout errors).
  using tutti::detail::gloo_abort_record;
  const gloo_abort_record rec{tutti::errc::peer_lost, 0, 3, "rank 3 closed its connection"};
  CHECK(rec.encode() == "3 0 3 rank 3 closed its connection");
  const auto back = gloo_abort_record::decode(rec.encode());
  REQUIRE(back.has_value());
  CHECK(back->code == tutti::errc::peer_lost);
  CHECK(back->writer == 0);
  CHECK(back->subject == 3);
  CHECK(back->what == rec.what);
  const auto empty = gloo_abort_record::decode("2 1 -1 ");
  REQUIRE(empty.has_value());
  CHECK(empty->subject == -1);
  CHECK(empty->what.empty());
  for (const char* bad : {"", "3 0 3", "0 0 3 x", "7 0 3 x", "3 -2 3 x", "3 0  3 x", "03 0 3 x",
                          "3 0 99999999999 x", "x 0 3 y"}) {
    CAPTURE(bad);
    CHECK_FALSE(gloo_abort_record::decode(bad).has_value());
  }

  tutti::detail::call c;
  c.seq = 17;
  c.fp = {tutti::detail::collective::all_reduce, tutti::dtype::float32, tutti::op_kind::sum, -1,
          1000};
  const auto parsed = tutti::detail::gloo_parse_call(tutti::detail::gloo_call_record(c));
  REQUIRE(parsed.has_value());
  CHECK(parsed->first == 17);
  CHECK(parsed->second == c.fp);
  CHECK(parsed->second.describe() == "all_reduce(float, count 1000, sum)");
  for (const char* bad : {"", "1 2", "1 2 3 ", "-1 2 3", "1 2 3 4", "1 2 18446744073709551616"}) {
    CAPTURE(bad);
    CHECK_FALSE(tutti::detail::gloo_parse_call(bad).has_value());
  }
  // Any head parses (another process wrote it) and describes itself without reading past the
  // table of names.
  const auto odd = tutti::detail::gloo_parse_call("1 18446744073709551615 5");
  REQUIRE(odd.has_value());
  CHECK(odd->second.describe() == "?(?, count 5, ?)");
}

TEST_CASE("sha256: FIPS 180-4 test vectors") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(
      sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqk"
                 "lmnopqrlmnopqrsmnopqrstnopqrstu") ==
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  const std::string million(1'000'000, 'a');
  CHECK(sha256_hex(million) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // Fed in pieces that straddle block boundaries: the same digest.
  td::sha256 h;
  for (std::size_t at = 0, step = 1; at < million.size(); at += step, step = step % 131 + 7)
    h.update(bytes(std::string_view(million).substr(at, step)));
  CHECK(hex(h.digest()) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("hmac_sha256: RFC 4231 test cases 1-4, 6, 7") {
  CHECK(hmac_hex(std::string(20, '\x0b'), "Hi There") ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(hmac_hex("Jefe", "what do ya want for nothing?") ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK(hmac_hex(std::string(20, '\xaa'), std::string(50, '\xdd')) ==
        "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  std::string key4;
  for (char c = 1; c <= 25; ++c) key4 += c;
  CHECK(hmac_hex(key4, std::string(50, '\xcd')) ==
        "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  const std::string long_key(131, '\xaa');
  CHECK(hmac_hex(long_key, "Test Using Larger Than Block-Size Key - Hash Key First") ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  CHECK(hmac_hex(long_key,
                 "This is a test using a larger than block-size key and a larger than block-size "
                 "data. The key needs to be hashed before being used by the HMAC algorithm.") ==
        "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
  // Parts are concatenated.
  const std::span<const std::byte> parts[] = {bytes("what do ya "), bytes(""),
                                              bytes("want for nothing?")};
  CHECK(hex(td::hmac_sha256(bytes("Jefe"), parts)) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST_CASE("equal_constant_time and random_bytes") {
  CHECK(td::equal_constant_time(bytes("abc"), bytes("abc")));
  CHECK_FALSE(td::equal_constant_time(bytes("abc"), bytes("abd")));
  CHECK_FALSE(td::equal_constant_time(bytes("abc"), bytes("ab")));
  CHECK(td::equal_constant_time(bytes(""), bytes("")));
  td::store_nonce a{};
  td::store_nonce b{};
  REQUIRE(td::random_bytes(a));
  REQUIRE(td::random_bytes(b));
  CHECK(a != b);
}

TEST_CASE("tcp_store token: the same token on both sides works; options and env carry it") {
  scoped_env env;
  env.set("TUTTI_STORE_TOKEN", "s3cret");
  CHECK(tutti::options{}.store_token == "s3cret");
  CHECK(bs::default_store_token() == "s3cret");
  bs::tcp_store server("127.0.0.1", 0, true, generous);  // token from the environment
  bs::tcp_store client("127.0.0.1", server.port(), false, generous, "s3cret");
  client.set_string("k", "v");
  CHECK(server.get_string("k", generous) == "v");
  CHECK(client.add("n", 5) == 5);
  CHECK(server.add("n", 2) == 7);
  // Through an init URL and the make_store default.
  const auto via_url =
      bs::make_store(bs::parse_init_url("tcp://127.0.0.1:" + std::to_string(server.port())), 1);
  CHECK(via_url->get_string("k", generous) == "v");
}

TEST_CASE("tcp_store token: a wrong token is rejected promptly, both ways") {
  bs::tcp_store server("127.0.0.1", 0, true, generous, "right");
  const auto t0 = clk::now();
  const caught c =
      catch_error([&] { bs::tcp_store("127.0.0.1", server.port(), false, 30s, "wrong"); });
  CHECK(clk::now() - t0 < prompt);
  CHECK(c.raised);
  CHECK(c.kind == errc::transport_failure);
  CHECK(contains(c.what, "the token was rejected"));
  CHECK(contains(c.what, "TUTTI_STORE_TOKEN"));
  still_serves(server.port(), "right");

  // A raw client that answers the challenge with a wrong proof: the server says so and closes.
  const td::unique_fd raw = raw_connect(server.port());
  td::store_nonce mine{};
  send_all(raw.get(), td::store_frame().u8(5).raw(mine).finish());
  const std::vector<std::byte> challenge = read_frame(raw.get());
  REQUIRE(challenge.size() == 1 + 2 * td::store_nonce_bytes);
  CHECK(std::to_integer<int>(challenge[0]) == 3);
  const auto theirs = std::span<const std::byte>(challenge).subspan(1, td::store_nonce_bytes);
  // The server proved the token it holds.
  CHECK(td::equal_constant_time(td::store_auth_proof("right", true, mine, theirs),
                                std::span<const std::byte>(challenge).subspan(33)));
  // Replaying the server's own proof (a reflection) is not the client's proof.
  send_all(raw.get(),
           td::store_frame().u8(6).raw(std::span<const std::byte>(challenge).subspan(33)).finish());
  CHECK(contains(failure_message(read_frame(raw.get())), "the token was rejected"));
  CHECK(closed_by_server(raw.get()));
  still_serves(server.port(), "right");
}

TEST_CASE("tcp_store token: a client without one is refused with a clear error") {
  bs::tcp_store server("127.0.0.1", 0, true, generous, "right");
  bs::tcp_store client("127.0.0.1", server.port(), false, 30s, "");
  const auto t0 = clk::now();
  const caught c = catch_error([&] { client.set_string("k", "v"); });
  CHECK(clk::now() - t0 < prompt);
  CHECK(c.kind == errc::transport_failure);
  CHECK(contains(c.what, "this store server requires a token"));
  CHECK(contains(c.what, "TUTTI_STORE_TOKEN"));
  const caught later = catch_error([&] { (void)client.get_string("k", 30s); });
  CHECK(later.raised);
  CHECK(clk::now() - t0 < prompt);

  // A raw get without authenticating: refused, closed, and nothing was stored or served.
  const td::unique_fd raw = raw_connect(server.port());
  send_all(raw.get(), td::store_frame().u8(2).u64(0).field(bytes("k")).finish());
  CHECK(contains(failure_message(read_frame(raw.get())), "requires a token"));
  CHECK(closed_by_server(raw.get()));
  // A frame longer than the handshake allows is refused from its length alone.
  const td::unique_fd big = raw_connect(server.port());
  send_all(big.get(), header(std::uint32_t{1} << 30));
  CHECK(contains(failure_message(read_frame(big.get())), "requires a token"));
  CHECK(closed_by_server(big.get()));
  still_serves(server.port(), "right");
}

TEST_CASE("tcp_store token: a client with a token and a server without one") {
  bs::tcp_store server("127.0.0.1", 0, true, generous, "");
  const auto t0 = clk::now();
  const caught c = catch_error([&] { bs::tcp_store("127.0.0.1", server.port(), false, 30s, "t"); });
  CHECK(clk::now() - t0 < prompt);
  CHECK(c.kind == errc::transport_failure);
  CHECK(contains(c.what, "this store server has no token, but the client sent one"));
  still_serves(server.port(), "");
}

TEST_CASE("tcp_store: garbage and huge lengths are dropped; the server serves the others") {
  bs::tcp_store server("127.0.0.1", 0, true, generous, "");
  const std::vector<std::vector<std::byte>> abuses{
      header(0xffffffffU),                                      // length far over the limit
      header(std::uint32_t(td::store_max_frame) + 1),           // one byte over
      td::store_frame().u8(99).finish(),                        // unknown op
      td::store_frame().u8(1).u32(5).finish(),                  // field past the frame
      td::store_frame().u8(6).raw(td::store_nonce{}).finish(),  // auth without hello
      header(0),                                                // an empty frame
  };
  for (const auto& abuse : abuses) {
    const td::unique_fd raw = raw_connect(server.port());
    send_all(raw.get(), abuse);
    CHECK(closed_by_server(raw.get()));
    still_serves(server.port(), "");
  }
}

TEST_CASE("store_engine: memory follows the bytes received, never an announced length") {
  td::store_engine open_engine;
  td::store_connection& c = open_engine.add(td::unique_fd{});
  CHECK(c.authenticated);
  CHECK(td::store_engine::in_cap(c) == 4 + td::store_max_frame);
  // The largest legal frame announced: the engine waits for it without reserving anything.
  c.in = header(std::uint32_t(td::store_max_frame));
  open_engine.step(clk::now());
  CHECK_FALSE(c.dead);
  CHECK(c.in.size() == 4);
  CHECK(c.in.capacity() == 4);
  // One byte more is a protocol break: closed, nothing answered.
  c.in = header(std::uint32_t(td::store_max_frame) + 1);
  open_engine.step(clk::now());
  CHECK(c.dead);
  CHECK(c.out.empty());

  // Before authenticating, a connection may buffer one handshake-sized frame only.
  td::store_engine guarded("token");
  td::store_connection& u = guarded.add(td::unique_fd{});
  CHECK_FALSE(u.authenticated);
  CHECK(td::store_engine::in_cap(u) == 4 + td::store_auth_max_frame);
  u.in = header(std::uint32_t(td::store_auth_max_frame) + 1);
  guarded.step(clk::now());
  CHECK(u.closing);
  CHECK(u.in.empty());
  CHECK(contains(failure_message({u.out.begin() + 4, u.out.end()}), "requires a token"));
  // A set before authenticating stores nothing.
  td::store_connection& v = guarded.add(td::unique_fd{});
  v.in = td::store_frame().u8(1).field(bytes("k")).field(bytes("v")).finish();
  guarded.step(clk::now());
  CHECK(v.closing);
  CHECK(guarded.size() == 0);
}

TEST_CASE("tcp_store token: tutti::spawn's ranks inherit it; a rank without it is refused") {
  scoped_env env;
  env.set("TUTTI_STORE_TOKEN", "spawned-secret");
  env.set("TUTTI_TIMEOUT", "20");
  // Every rank meets through rank 0's token-protected store and all-reduces over shm.
  CHECK(tutti::spawn(3, [] {
          auto comm = tutti::communicator<tutti::shm>::from_env();
          std::vector<int> v{comm.rank() + 1};
          comm.all_reduce(std::span<int>(v), tutti::sum);
          return v[0] == 6 ? 0 : 1;
        }) == 0);
  // Rank 1 drops the token: its first request is refused with a clear message, and with the
  // token it then gets through (so rank 0 is released).
  CHECK(tutti::spawn(2, [] {
          const int rank = std::atoi(std::getenv("RANK"));
          if (rank == 0) {
            auto st = bs::env_store(0);
            return st->get_string("released", 20s) == "yes" ? 0 : 1;
          }
          ::unsetenv("TUTTI_STORE_TOKEN");
          const auto [addr, port] = td::url_master_address();
          bs::tcp_store bare(addr, port, false, 20s);
          int rc = 2;
          try {
            bare.set_string("released", "no");
          } catch (const tutti::error& e) {
            rc = contains(e.what(), "requires a token") ? 0 : 3;
          }
          bs::tcp_store with(addr, port, false, 20s, "spawned-secret");
          with.set_string("released", "yes");
          return rc;
        }) == 0);
}

TEST_CASE("shm segments: random names, created exclusively with mode 0600") {
  std::set<std::string> names;
  for (int i = 0; i < 64; ++i) {
    const std::string n = td::shm_random_name(0);
    CHECK(n.rfind("/tutti-", 0) == 0);
    const auto parts = td::shm_parse_name(n);
    REQUIRE(parts.has_value());
    CHECK(parts->pid == ::getpid());
    CHECK(parts->pid_ns == td::pid_namespace());
    const std::string random = n.substr(n.rfind('-') + 1);  // 128 bits from getrandom
    CHECK(random.size() == 32);
    CHECK(random.find_first_not_of("0123456789abcdef") == std::string::npos);
    names.insert(n);
  }
  CHECK(names.size() == 64);

  const td::shm_layout l{2, 4096, 4096};
  const std::string name = td::shm_random_name(0);
  // Neither a permissive nor a strict umask changes the mode.
  const mode_t old_mask = ::umask(0);
  td::shm_mapping m = td::shm_create(name, l);
  (void)::umask(0377);
  const std::string strict_name = td::shm_random_name(0);
  td::shm_mapping strict = td::shm_create(strict_name, l);
  (void)::umask(old_mask);
  struct stat strict_st {};
  REQUIRE(::stat(("/dev/shm" + strict_name).c_str(), &strict_st) == 0);
  CHECK((strict_st.st_mode & 07777) == 0600);
  CHECK(::shm_unlink(strict_name.c_str()) == 0);
  struct stat st {};
  REQUIRE(::stat(("/dev/shm" + name).c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  CHECK(st.st_uid == ::geteuid());
  CHECK(static_cast<std::size_t>(st.st_size) == l.total_bytes());
  // O_EXCL: a second create of the same name fails instead of sharing or truncating it.
  const caught again = catch_error([&] { (void)td::shm_create(name, l); });
  CHECK(again.kind == errc::transport_failure);
  CHECK(contains(again.what, "File exists"));
  // The first object survived that attempt.
  REQUIRE(::stat(("/dev/shm" + name).c_str(), &st) == 0);
  auto [attached, layout] = td::shm_attach(name, 1, 2);
  CHECK(layout.total_bytes() == l.total_bytes());
  CHECK(::shm_unlink(name.c_str()) == 0);
}

TEST_CASE("shm segment names: parsed strictly; a segment whose creator died is swept") {
  const std::string ns = [] {
    char b[17];
    std::snprintf(b, sizeof b, "%llx", td::pid_namespace());
    return std::string(b);
  }();
  const std::string r32(32, 'a');
  // "<head>-<ns>-<pid>-<tail>", each part as given.
  auto name = [](std::string_view head, std::string_view nspace, std::string_view pid,
                 std::string_view tail) {
    std::string n(head);
    n += nspace;
    n += '-';
    n += pid;
    n += '-';
    n += tail;
    return n;
  };
  CHECK(td::shm_parse_name(name("/tutti-", ns, "42", r32)).has_value());
  CHECK(td::shm_parse_name(name("tutti-", ns, "42", r32)).has_value());  // as readdir gives it
  CHECK(td::shm_parse_name(name("/tutti-", ns, "42", r32))->pid == 42);
  const std::string r33(33, 'a'), g32(32, 'g');
  for (const std::string& bad :
       {name("/tutti-", ns, "42", r33), name("/tutti-", ns, "42", g32),
        name("/tutti-", ns, "0", r32), name("/tutti-", ns, "", r32), name("/tutti-", ns, "x1", r32),
        name("/tutti-", ns, "4294967296", r32), name("/tutti-", "", "42", r32),
        name("/other-", ns, "42", r32), std::string("/tutti-") + r32, std::string("/tutti-")})
    CHECK_FALSE(td::shm_parse_name(bad).has_value());
  // An attach refuses a name that is not a segment's.
  CHECK_THROWS_AS((void)td::shm_attach(std::string("/tutti-") + r32, 1, 2), tutti::error);

  // A child creates a segment and dies without unlinking it (rank 0 killed before publishing
  // the name): the sweep removes it, and leaves a live creator's segment alone.
  const td::shm_layout l{2, 4096, 4096};
  const std::string mine = td::shm_random_name(0);
  auto keep = td::shm_create(mine, l);
  // Every shm world's rank 0 sweeps too, so under ctest -j another test's process may take the
  // orphan first, before this sweep or during it (then this one removed nothing and found it
  // gone): such a round proves nothing about this sweep and is drawn again.
  orphan_round round{};
  for (int i = 0; i < 20 && !round.decisive(); ++i) round = sweep_an_orphan(l);
  REQUIRE(round.decisive());
  CHECK(round.child_dead_while_unreaped);
  CHECK(round.removed >= 1);
  CHECK(round.gone_after_sweep);
  CHECK(round.child_dead_after_reaping);
  CHECK(td::shm_process_alive(::getpid()));
  CHECK(::access(("/dev/shm" + mine).c_str(), F_OK) == 0);  // its creator (this process) lives
  ::shm_unlink(mine.c_str());
}

TEST_CASE("shm sweep: a process killed but still dying counts as dead") {
  // A killed rank with much memory takes a while to die; a survivor sweeping at once (its
  // bootstrap failed on the store that rank served) must not take it for alive and leave its
  // segment behind (faults.store once failed so under ASan).
  int pipe_fd[2];
  REQUIRE(::pipe(pipe_fd) == 0);
  const std::size_t bytes = std::size_t{256} << 20;
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(pipe_fd[0]);
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) ::_exit(1);
    std::memset(p, 1, bytes);  // pages to free as it dies
    (void)!::write(pipe_fd[1], "r", 1);
    for (;;) ::pause();
  }
  ::close(pipe_fd[1]);
  char c = 0;
  REQUIRE(::read(pipe_fd[0], &c, 1) == 1);
  ::close(pipe_fd[0]);
  CHECK(td::shm_process_alive(child));
  REQUIRE(::kill(child, SIGSTOP) == 0);
  siginfo_t info{};
  REQUIRE(::waitid(P_PID, static_cast<id_t>(child), &info, WSTOPPED) == 0);
  CHECK(td::shm_process_alive(child));  // stopped is not dying
  REQUIRE(::kill(child, SIGKILL) == 0);
  CHECK_FALSE(td::shm_process_alive(child));  // at once, while its memory is still freed
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK_FALSE(td::shm_process_alive(child));
}

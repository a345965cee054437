#pragma once
/// \file
/// The wire format of tutti::bootstrap::tcp_store and the socket helpers both its client and
/// its server use: framing, resolving, connecting with backoff, the listening socket.
///
/// Wire protocol, all integers little-endian. Every message is one frame
///   [u32 payload length, 1 .. store_max_frame][payload]
/// Requests [u8 op][fields]:                  Replies [u8 status][fields]:
///   1 set  [key][value]                        0 ok       set, wait, auth: -; get: [value];
///   2 get  [u64 timeout ms][key]                          add: [u64 new value, two's complement]
///   3 add  [key][u64 delta, two's complement]  1 timeout  [u32 n][key] x n: the missing keys
///   4 wait [u64 timeout ms][u32 n][key] x n    2 failed   [u8 tutti::errc][message]
///   5 hello [32 client nonce]                  3 challenge [32 server nonce][32 server proof]
///   6 auth  [32 client proof]
/// where [key], [value], [message] are [u32 length][bytes]. The server blocks get and wait
/// until the keys exist or the request's timeout passes (then it replies "timeout"). It closes
/// any connection that breaks the protocol: frame length 0 or over the limit (checked before
/// anything is allocated), unknown op, a field longer than the rest of its frame, an empty or
/// oversized key, bytes left after the last field. Other connections are unaffected.
///
/// Authentication (TUTTI_STORE_TOKEN set): a client's first requests are hello, answered by
/// challenge, then auth, answered by ok. The proofs are HMAC-SHA-256 under the token of a
/// label, the client nonce and the server nonce (store_auth_proof), so each side shows it knows
/// the token without sending it, and neither a recorded exchange nor a reflected proof passes.
/// The client checks the server's proof before it sends its own. Until a connection has
/// authenticated, the server takes frames of at most store_auth_max_frame bytes and only hello
/// and auth; anything else, a wrong proof, or a hello to a server without a token, is answered
/// "failed" with the reason, and the connection is closed.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "tutti/bootstrap/store.hpp"
#include "tutti/core/error.hpp"
#include "tutti/detail/sha256.hpp"
#include "tutti/detail/unique_fd.hpp"

namespace tutti::inline v0::detail {

enum class store_op : std::uint8_t { set = 1, get = 2, add = 3, wait = 4, hello = 5, auth = 6 };
enum class store_status : std::uint8_t { ok = 0, timeout = 1, failed = 2, challenge = 3 };

/// The largest frame payload either side accepts: a set of the largest key and value fits.
inline constexpr std::size_t store_max_frame = bootstrap::max_value_bytes + (std::size_t{64} << 10);
/// The largest frame payload a server accepts before the connection has authenticated.
inline constexpr std::size_t store_auth_max_frame = 128;
/// Bytes in each side's nonce and in each proof.
inline constexpr std::size_t store_nonce_bytes = 32;
using store_nonce = std::array<std::byte, store_nonce_bytes>;
/// How long past a get/wait deadline a client waits for the server's "timeout" reply before it
/// gives up on the connection.
inline constexpr std::chrono::milliseconds store_reply_grace{1000};

[[nodiscard]] inline std::uint64_t store_load_le(const std::byte* p, int n) noexcept {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint64_t>(p[i]);
  return v;
}

/// The variable holding the shared secret of a job's tcp_store; unset or empty: no token.
inline constexpr const char* store_token_variable = "TUTTI_STORE_TOKEN";

/// One side's proof that it knows `token`: HMAC-SHA-256(token, label || client || server), with
/// label "tutti-store-server-v1" for the server and "tutti-store-client-v1" for the client.
[[nodiscard]] inline sha256_digest store_auth_proof(std::string_view token, bool server,
                                                    std::span<const std::byte> client_nonce,
                                                    std::span<const std::byte> server_nonce) {
  const std::string_view label = server ? "tutti-store-server-v1" : "tutti-store-client-v1";
  const std::span<const std::byte> parts[] = {std::as_bytes(std::span(label.data(), label.size())),
                                              client_nonce, server_nonce};
  return hmac_sha256(std::as_bytes(std::span(token.data(), token.size())), parts);
}

/// Builds one frame: [u32 payload length][payload].
class store_frame {
 public:
  // Room reserved up front: most frames are small, and GCC 12 (-O2, as nvcc's host pass runs
  // it) wrongly reports -Warray-bounds on the first growth of a 4-byte vector.
  store_frame() : buf_(4) { buf_.reserve(64); }
  store_frame& u8(std::uint8_t v) { return le(v, 1); }
  store_frame& u32(std::uint32_t v) { return le(v, 4); }
  store_frame& u64(std::uint64_t v) { return le(v, 8); }
  store_frame& field(std::span<const std::byte> b) {
    u32(static_cast<std::uint32_t>(b.size()));
    return raw(b);
  }
  /// Bytes with no length in front (a nonce, a proof).
  store_frame& raw(std::span<const std::byte> b) {
    buf_.insert(buf_.end(), b.begin(), b.end());
    return *this;
  }
  [[nodiscard]] std::size_t payload_size() const noexcept { return buf_.size() - 4; }
  /// The finished frame (the builder is spent).
  [[nodiscard]] std::vector<std::byte> finish() {
    const auto n = payload_size();
    for (int i = 0; i < 4; ++i)
      buf_[static_cast<std::size_t>(i)] = std::byte((n >> (8 * i)) & 0xff);
    return std::move(buf_);
  }

 private:
  store_frame& le(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) buf_.push_back(std::byte((v >> (8 * i)) & 0xff));
    return *this;
  }
  std::vector<std::byte> buf_;
};

/// Reads the fields of one payload; every read checks what is left of the frame first.
class store_parser {
 public:
  explicit store_parser(std::span<const std::byte> payload) noexcept : rest_(payload) {}
  [[nodiscard]] bool u8(std::uint8_t& v) noexcept { return fixed(v, 1); }
  [[nodiscard]] bool u32(std::uint32_t& v) noexcept { return fixed(v, 4); }
  [[nodiscard]] bool u64(std::uint64_t& v) noexcept { return fixed(v, 8); }
  /// A [u32 length][bytes] field of at most `limit` bytes.
  [[nodiscard]] bool field(std::span<const std::byte>& out, std::size_t limit) noexcept {
    std::uint32_t n = 0;
    if (!u32(n) || n > limit || n > rest_.size()) return false;
    out = rest_.first(n);
    rest_ = rest_.subspan(n);
    return true;
  }
  /// A key: 1 .. max_key_bytes bytes.
  [[nodiscard]] bool key(std::span<const std::byte>& out) noexcept {
    return field(out, bootstrap::max_key_bytes) && !out.empty();
  }
  [[nodiscard]] std::size_t remaining() const noexcept { return rest_.size(); }
  [[nodiscard]] bool done() const noexcept { return rest_.empty(); }

 private:
  template <class T>
  bool fixed(T& v, int n) noexcept {
    if (rest_.size() < static_cast<std::size_t>(n)) return false;
    v = static_cast<T>(store_load_le(rest_.data(), n));
    rest_ = rest_.subspan(static_cast<std::size_t>(n));
    return true;
  }
  std::span<const std::byte> rest_;
};

/// Resolves host to an IPv4 address; returns "" or why it failed.
[[nodiscard]] inline std::string store_resolve(const std::string& host, int port,
                                               sockaddr_in& out) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    const int e = errno;
    return "cannot resolve '" + host +
           "': " + (rc == EAI_SYSTEM ? store_errno(e) : ::gai_strerror(rc));
  }
  std::memcpy(&out, res->ai_addr, sizeof out);
  ::freeaddrinfo(res);
  out.sin_port = htons(static_cast<std::uint16_t>(port));
  return {};
}

[[nodiscard]] inline sockaddr_in store_local_address(int fd) noexcept {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) a.sin_family = AF_UNSPEC;
  return a;
}

inline void store_nodelay(int fd) noexcept {
  const int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/// Polls one fd for `events` until the deadline: 0 when ready, else ETIMEDOUT or an errno.
[[nodiscard]] inline int store_wait_fd(int fd, short events, store_clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, store_poll_ms(deadline));
    if (rc > 0) return 0;  // errors and hang-ups surface in the following send/recv
    if (rc == 0) return ETIMEDOUT;
    if (errno != EINTR) return errno;
  }
}

/// store_recv_all's code for "the peer closed the connection".
inline constexpr int store_eof = -1;

/// A store client's lost connection (tcp_store, torch_tcp_store): its kind and reason, kept so
/// that every later call raises the same at once.
struct store_loss {
  bool lost = false;
  errc code = errc::peer_lost;
  std::string what;

  /// Records the loss and raises it.
  [[noreturn]] void raise(errc c, const std::string& msg) {
    lost = true;
    code = c;
    what = msg;
    store_fail(c, msg);
  }
  /// For a later call ("<store>: <call>: "): raises the recorded loss, if there is one.
  void check(const std::string& head) const {
    if (lost) store_fail(code, head + "the connection was lost earlier: " + what);
  }
  /// Records and raises what the I/O error `e` of store_send_all / store_recv_all means:
  /// the server closed the connection, did not answer (`silence` says how long it was given:
  /// "before the deadline", "within 500 ms"), or a system error.
  [[noreturn]] void io_failed(int e, const std::string& head, const std::string& silence) {
    if (e == store_eof) raise(errc::peer_lost, head + "the store server closed the connection");
    if (e == ECONNRESET || e == EPIPE)
      raise(errc::peer_lost,
            head + "the store server closed the connection (" + store_errno(e) + ")");
    if (e == ETIMEDOUT) raise(errc::timeout, head + "the store server did not answer " + silence);
    raise(errc::transport_failure, head + store_errno(e));
  }
};

/// Sends all of `data` on a non-blocking socket: 0, ETIMEDOUT or an errno. Never SIGPIPE.
[[nodiscard]] inline int store_send_all(int fd, std::span<const std::byte> data,
                                        store_clock::time_point deadline) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n >= 0) {
      data = data.subspan(static_cast<std::size_t>(n));
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (const int e = store_wait_fd(fd, POLLOUT, deadline); e != 0) return e;
    } else if (errno != EINTR) {
      return errno;
    }
  }
  return 0;
}

/// Fills `buf` from a non-blocking socket: 0, store_eof, ETIMEDOUT or an errno.
[[nodiscard]] inline int store_recv_all(int fd, std::span<std::byte> buf,
                                        store_clock::time_point deadline) {
  while (!buf.empty()) {
    const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n > 0) {
      buf = buf.subspan(static_cast<std::size_t>(n));
    } else if (n == 0) {
      return store_eof;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (const int e = store_wait_fd(fd, POLLIN, deadline); e != 0) return e;
    } else if (errno != EINTR) {
      return errno;
    }
  }
  return 0;
}

/// One non-blocking connect attempt, bounded by the deadline: 0 (and `out` set) or an errno.
[[nodiscard]] inline int store_try_connect(const sockaddr_in& addr,
                                           store_clock::time_point deadline, unique_fd& out) {
  unique_fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return errno;
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno != EINPROGRESS && errno != EINTR) return errno;
    if (const int e = store_wait_fd(fd.get(), POLLOUT, deadline); e != 0) return e;
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
    if (err != 0) return err;
  }
  // Connecting to a free local port in the ephemeral range can "succeed" by connecting the
  // socket to itself (TCP simultaneous open); that is no server.
  sockaddr_in peer{};
  socklen_t len = sizeof peer;
  const sockaddr_in self = store_local_address(fd.get());
  if (::getpeername(fd.get(), reinterpret_cast<sockaddr*>(&peer), &len) != 0) return errno;
  if (self.sin_port == peer.sin_port && self.sin_addr.s_addr == peer.sin_addr.s_addr)
    return ECONNREFUSED;
  store_nodelay(fd.get());
  out = std::move(fd);
  return 0;
}

/// Connects to host:port, retrying with exponential backoff (10 ms doubling to 1 s) until the
/// server is up or the deadline passes (errc::timeout naming the address and the last error).
[[nodiscard]] inline unique_fd store_connect(const std::string& host, int port,
                                             store_clock::time_point deadline,
                                             std::chrono::milliseconds timeout) {
  std::chrono::milliseconds pause{10};
  std::string last;
  for (;;) {
    sockaddr_in addr{};
    last = store_resolve(host, port, addr);
    if (last.empty()) {
      unique_fd fd;
      const int e = store_try_connect(addr, deadline, fd);
      if (e == 0) return fd;
      last = store_errno(e);
    }
    const auto now = store_clock::now();
    if (now >= deadline) {
      std::string msg = "tcp_store: could not connect to the store server at " + host + ":" +
                        std::to_string(port) + " within " + store_ms(timeout);
      msg.append(" (last error: ").append(last).append("); is rank 0 up and serving it?");
      store_fail(errc::timeout, msg);
    }
    std::this_thread::sleep_for(std::min<store_clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds{1000});
  }
}

/// The listening socket named by TUTTI_STORE_FD (set by tutti::spawn), if it is a listening
/// IPv4 TCP socket bound to `port`; the variable is then unset so it is adopted only once.
[[nodiscard]] inline unique_fd adopt_store_listener(int port) {
  const char* s = std::getenv("TUTTI_STORE_FD");
  if (s == nullptr || *s == '\0' || port == 0) return {};
  int fd = -1;
  const char* end = s + std::strlen(s);
  if (const auto r = std::from_chars(s, end, fd); r.ec != std::errc{} || r.ptr != end || fd < 0)
    return {};
  int listening = 0;
  socklen_t len = sizeof listening;
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || listening == 0)
    return {};
  const sockaddr_in a = store_local_address(fd);
  if (a.sin_family != AF_INET || ntohs(a.sin_port) != port) return {};
  ::unsetenv("TUTTI_STORE_FD");
  const int flags = ::fcntl(fd, F_GETFD);
  if (flags >= 0) (void)::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  return unique_fd(fd);
}

/// Whether a server given `host` listens on every interface: only when asked explicitly, with
/// "0.0.0.0" (or an empty host).
[[nodiscard]] inline bool store_wildcard_host(const std::string& host) noexcept {
  return host.empty() || host == "0.0.0.0";
}

/// A new listening socket on `port` and the address `host` names, nothing else: every interface
/// (INADDR_ANY) only for store_wildcard_host(host); 127.0.0.1 for "localhost"; otherwise the
/// first IPv4 address `host` resolves to, the one clients on this machine connect to. A name
/// that resolves to a loopback address here (Debian maps the machine's own name to 127.0.1.1)
/// therefore serves this machine only; other hosts need rank 0's routable address, or
/// "0.0.0.0". An address that is not this machine's raises errc::transport_failure saying so.
[[nodiscard]] inline unique_fd bind_store_listener(const std::string& given, int port) {
  // TUTTI_STORE_BIND overrides the address the server listens on (not the one clients dial):
  // for a MASTER_ADDR that resolves to loopback on rank 0's own host (a hostname Debian maps to
  // 127.0.1.1) while other hosts reach it by its network address; 0.0.0.0: every interface.
  const char* bind_env = std::getenv("TUTTI_STORE_BIND");
  const std::string host = bind_env != nullptr && *bind_env != '\0' ? bind_env : given;
  const std::string where = "tcp_store: cannot serve on " + host + ":" + std::to_string(port) +
                            (host != given ? " (TUTTI_STORE_BIND)" : "");
  sockaddr_in addr{};
  if (store_wildcard_host(host)) {
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
  } else if (host == "localhost") {
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  } else if (const std::string why = store_resolve(host, port, addr); !why.empty()) {
    store_fail(errc::transport_failure, where + ": " + why);
  }
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  unique_fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) store_fail(errc::transport_failure, where + ": socket: " + store_errno(errno));
  const int one = 1;
  (void)::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(fd.get(), SOMAXCONN) != 0) {
    const int e = errno;
    if (e == EADDRINUSE)
      store_fail(errc::transport_failure,
                 where + ": port " + std::to_string(port) +
                     " is already taken (EADDRINUSE) by another listener. Under torchrun the "
                     "elastic agent may already serve a store on MASTER_PORT: connect to it as a "
                     "client, or pick a free port");
    if (e == EADDRNOTAVAIL) {
      char text[INET_ADDRSTRLEN] = "?";
      (void)::inet_ntop(AF_INET, &addr.sin_addr, text, sizeof text);
      store_fail(errc::transport_failure,
                 where + ": " + host + " is " + text +
                     ", not an address of this machine (EADDRNOTAVAIL); give rank 0's own "
                     "address, or 0.0.0.0 to listen on every interface");
    }
    store_fail(errc::transport_failure, where + ": " + store_errno(e));
  }
  return fd;
}

}  // namespace tutti::inline v0::detail

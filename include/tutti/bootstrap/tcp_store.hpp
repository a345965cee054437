#pragma once
/// \file
/// tutti::bootstrap::tcp_store: a store served over TCP by one process (rank 0) and used by
/// every rank, rank 0 included. The wire protocol is described in detail/store/wire.hpp, the
/// server in detail/store/server.hpp.

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <tutti/bootstrap/store.hpp>
#include <tutti/core/error.hpp>
#include <tutti/core/options.hpp>
#include <tutti/detail/store/server.hpp>
#include <tutti/detail/store/wire.hpp>
#include <tutti/detail/unique_fd.hpp>

namespace tutti::inline v0::bootstrap {

/// The token a tcp_store uses when none is given: TUTTI_STORE_TOKEN, or "" (none); the same
/// default as tutti::options::store_token.
[[nodiscard]] inline std::string default_store_token() {
  return detail::env_string(detail::store_token_variable);
}

/// A store served over TCP by one process and reached by every rank through its own
/// connection. Thread-safe: calls on one object share its connection and take turns, so a
/// blocked get() delays other threads' calls on the same object (use one object per thread to
/// avoid that). The serving object must outlive every other rank's use of the store:
/// destroying it stops the server and the other ranks' next calls raise errc::peer_lost.
class tcp_store final : public store {
 public:
  /// Connects to the store at host:port, retrying (10 ms backoff doubling to 1 s) until it
  /// answers or `timeout` passes (errc::timeout naming host:port and the last error).
  ///
  /// With `is_server` (rank 0) the object first serves the store from a background thread,
  /// then connects to it like any client. It adopts the listening socket named by
  /// TUTTI_STORE_FD when that is an IPv4 TCP socket listening on `port` (tutti::spawn opens
  /// it; the variable is unset once adopted); otherwise it binds `port` with SO_REUSEADDR on
  /// the address `host` names and no other: "localhost" is 127.0.0.1, a name its first IPv4
  /// address here (a name that resolves to a loopback address, like Debian's 127.0.1.1 for the
  /// machine's own name, serves this machine only), and only "0.0.0.0" or "" listen on every
  /// interface. Port 0 serves on a free port: see port(). A port already in use, or an address
  /// that is not this machine's, raises errc::transport_failure. `timeout` also bounds each
  /// later set() and add().
  ///
  /// `token` (default: TUTTI_STORE_TOKEN; empty: none) is a secret shared by every rank. The
  /// server then serves only clients that prove they know it, and each client checks the
  /// server knows it too (challenge-response with HMAC-SHA-256; the token never travels). A
  /// token the server does not share raises errc::transport_failure saying the token was
  /// rejected; a client without a token gets that error from its first call.
  tcp_store(std::string host, int port, bool is_server,
            std::chrono::milliseconds timeout = default_timeout(),
            const std::string& token = default_store_token())
      : host_(std::move(host)), port_(port), timeout_(timeout) {
    if (!is_server && host_.empty())
      detail::store_fail(errc::invalid_argument, name() + ": empty host");
    if (port_ < (is_server ? 0 : 1) || port_ > 65535)
      detail::store_fail(errc::invalid_argument, name() + ": port out of range [1, 65535]");
    const auto deadline = detail::store_deadline(timeout_);
    std::string target = host_;
    if (is_server) {
      detail::unique_fd listener = detail::adopt_store_listener(port_);
      if (!listener) listener = detail::bind_store_listener(host_, port_);
      const sockaddr_in bound = detail::store_local_address(listener.get());
      port_ = ntohs(bound.sin_port);
      char text[INET_ADDRSTRLEN] = "127.0.0.1";  // reach a wildcard listener through loopback
      if (bound.sin_addr.s_addr != htonl(INADDR_ANY))
        (void)::inet_ntop(AF_INET, &bound.sin_addr, text, sizeof text);
      target = text;
      server_ = std::make_unique<detail::store_server>(std::move(listener), token);
    }
    conn_ = detail::store_connect(target, port_, deadline, timeout_);
    if (!token.empty()) authenticate(token, deadline);
  }

  /// The host given to the constructor.
  [[nodiscard]] const std::string& host() const noexcept { return host_; }
  /// The port served or connected to (the one chosen, when a server was given port 0).
  [[nodiscard]] int port() const noexcept { return port_; }
  /// Whether this object runs the server.
  [[nodiscard]] bool is_server() const noexcept { return server_ != nullptr; }
  /// The constructor's timeout: bounds connecting, set() and add().
  [[nodiscard]] std::chrono::milliseconds timeout() const noexcept { return timeout_; }

  void set(std::string_view key, std::span<const std::byte> value) override {
    detail::check_store_key(name(), key);
    detail::check_store_value(name(), key, value.size());
    const auto frame =
        detail::store_frame().u8(op(detail::store_op::set)).field(bytes(key)).field(value).finish();
    std::lock_guard lock(mu_);
    const std::string what = "set of key " + detail::store_quote(key);
    expect_empty(roundtrip(frame, detail::store_deadline(timeout_), what, timeout_), what);
  }

  [[nodiscard]] std::vector<std::byte> get(std::string_view key,
                                           std::chrono::milliseconds timeout) override {
    detail::check_store_key(name(), key);
    const auto deadline = detail::store_deadline(timeout);
    std::lock_guard lock(mu_);
    const std::string what = "get of key " + detail::store_quote(key);
    const auto frame = detail::store_frame()
                           .u8(op(detail::store_op::get))
                           .u64(ms_left(deadline))
                           .field(bytes(key))
                           .finish();
    std::vector<std::byte> reply =
        roundtrip(frame, deadline + detail::store_reply_grace, what, timeout);
    detail::store_parser p(reply);
    std::uint8_t status = 0;
    std::span<const std::byte> value;
    if (!p.u8(status) || !p.field(value, max_value_bytes) || !p.done())
      malformed(what, "bad value");
    reply.erase(reply.begin(), reply.begin() + 5);  // status and length: the rest is the value
    return reply;
  }

  std::int64_t add(std::string_view key, std::int64_t delta) override {
    detail::check_store_key(name(), key);
    const auto frame = detail::store_frame()
                           .u8(op(detail::store_op::add))
                           .field(bytes(key))
                           .u64(static_cast<std::uint64_t>(delta))
                           .finish();
    std::lock_guard lock(mu_);
    const std::string what = "add to key " + detail::store_quote(key);
    const std::vector<std::byte> reply =
        roundtrip(frame, detail::store_deadline(timeout_), what, timeout_);
    detail::store_parser p(reply);
    std::uint8_t status = 0;
    std::uint64_t v = 0;
    if (!p.u8(status) || !p.u64(v) || !p.done()) malformed(what, "bad counter");
    return static_cast<std::int64_t>(v);
  }

  void wait(std::span<const std::string> keys, std::chrono::milliseconds timeout) override {
    for (const auto& k : keys) detail::check_store_key(name(), k);
    if (keys.empty()) return;
    const auto deadline = detail::store_deadline(timeout);
    const std::string what = "wait for " + detail::store_quote_keys(keys);
    std::lock_guard lock(mu_);
    detail::store_frame b;
    b.u8(op(detail::store_op::wait))
        .u64(ms_left(deadline))
        .u32(static_cast<std::uint32_t>(keys.size()));
    for (const auto& k : keys) b.field(bytes(k));
    if (b.payload_size() > detail::store_max_frame)
      detail::store_fail(errc::invalid_argument, name() + ": " + what + ": " +
                                                     std::to_string(keys.size()) +
                                                     " keys are too many for one request");
    expect_empty(roundtrip(b.finish(), deadline + detail::store_reply_grace, what, timeout), what);
  }

 private:
  static std::uint8_t op(detail::store_op o) noexcept { return static_cast<std::uint8_t>(o); }
  static std::span<const std::byte> bytes(std::string_view s) noexcept {
    return detail::store_bytes(s);
  }
  static std::uint64_t ms_left(detail::store_clock::time_point deadline) {
    return static_cast<std::uint64_t>(detail::store_poll_ms(deadline));
  }
  [[nodiscard]] std::string name() const {
    return "tcp_store " + host_ + ":" + std::to_string(port_);
  }

  /// The client's half of the handshake (detail/store/wire.hpp): hello, check the server's proof,
  /// send ours, expect ok. Every failure raises naming the token; the connection is then dropped.
  void authenticate(const std::string& token, detail::store_clock::time_point deadline) {
    const std::string what = "authentication";
    const auto rejected = [&](const std::string& why) {
      lose(errc::transport_failure, name() + ": " + what + ": " + why);
    };
    detail::store_nonce mine{};
    if (!detail::random_bytes(mine))
      rejected("cannot draw a nonce (getrandom): " + detail::store_errno(errno));
    std::vector<std::byte> reply = exchange(
        detail::store_frame().u8(op(detail::store_op::hello)).raw(mine).finish(), deadline, what);
    detail::store_parser p(reply);
    std::uint8_t status = 0;
    if (!p.u8(status) || status != static_cast<std::uint8_t>(detail::store_status::challenge)) {
      if (status == static_cast<std::uint8_t>(detail::store_status::failed))
        rejected(failure_text(p, what) + " (this process has " + detail::store_token_variable +
                 " set)");
      malformed(what, "status " + std::to_string(status) + " where a challenge was expected");
    }
    if (reply.size() != 1 + 2 * detail::store_nonce_bytes) malformed(what, "bad challenge");
    const auto theirs = std::span<const std::byte>(reply).subspan(1, detail::store_nonce_bytes);
    const auto proof = std::span<const std::byte>(reply).subspan(1 + detail::store_nonce_bytes);
    if (!detail::equal_constant_time(detail::store_auth_proof(token, true, mine, theirs), proof))
      rejected(std::string("the token was rejected: the store server proved a different ") +
               detail::store_token_variable + " from this process's");
    reply = exchange(detail::store_frame()
                         .u8(op(detail::store_op::auth))
                         .raw(detail::store_auth_proof(token, false, mine, theirs))
                         .finish(),
                     deadline, what);
    detail::store_parser q(reply);
    if (!q.u8(status) || status == static_cast<std::uint8_t>(detail::store_status::failed))
      rejected(failure_text(q, what));
    if (status != static_cast<std::uint8_t>(detail::store_status::ok) || !q.done())
      malformed(what, "status " + std::to_string(status) + " where ok was expected");
  }

  /// The message of a "failed" reply whose status `p` has read.
  std::string failure_text(detail::store_parser& p, const std::string& what) {
    std::uint8_t code = 0;
    std::span<const std::byte> msg;
    if (!p.u8(code) || !p.field(msg, detail::store_max_frame) || !p.done())
      malformed(what, "bad failure reply");
    return detail::store_string(msg);
  }

  /// Drops the connection and raises; every later call raises the same kind at once.
  [[noreturn]] void lose(errc code, const std::string& msg) {
    conn_.reset();
    loss_.raise(code, msg);
  }
  [[noreturn]] void malformed(const std::string& what, const std::string& why) {
    lose(errc::transport_failure,
         name() + ": " + what + ": malformed reply from the store server (" + why + ")");
  }
  [[noreturn]] void io_failed(int e, const std::string& what) {
    conn_.reset();
    loss_.io_failed(e, name() + ": " + what + ": ", "before the deadline");
  }
  void expect_empty(const std::vector<std::byte>& reply, const std::string& what) {
    if (reply.size() != 1) malformed(what, "unexpected fields");
  }

  /// Sends one request frame and returns the reply payload once its status is "ok"; raises
  /// the error a "timeout" or "failed" reply carries. Caller holds mu_.
  std::vector<std::byte> roundtrip(const std::vector<std::byte>& frame,
                                   detail::store_clock::time_point reply_deadline,
                                   const std::string& what, std::chrono::milliseconds waited) {
    std::vector<std::byte> reply = exchange(frame, reply_deadline, what);
    detail::store_parser p(reply);
    std::uint8_t status = 0;
    (void)p.u8(status);
    if (status == static_cast<std::uint8_t>(detail::store_status::ok)) return reply;
    if (status == static_cast<std::uint8_t>(detail::store_status::timeout)) {
      std::uint32_t n = 0;
      std::vector<std::string> missing;
      std::span<const std::byte> k;
      if (!p.u32(n) || n > p.remaining() / 5) malformed(what, "bad timeout reply");
      for (std::uint32_t i = 0; i < n; ++i) {
        if (!p.key(k)) malformed(what, "bad timeout reply");
        missing.push_back(detail::store_string(k));
      }
      if (!p.done()) malformed(what, "bad timeout reply");
      detail::store_fail(errc::timeout,
                         name() + ": " + what + " timed out after " + detail::store_ms(waited) +
                             " (still missing: " + detail::store_quote_keys(missing) + ")");
    }
    std::uint8_t code = 0;
    std::span<const std::byte> msg;
    if (status != static_cast<std::uint8_t>(detail::store_status::failed) || !p.u8(code) ||
        code < 1 || code > static_cast<std::uint8_t>(errc::transport_failure) ||
        !p.field(msg, detail::store_max_frame) || !p.done())
      malformed(what, "status " + std::to_string(status) + " or its fields");
    detail::store_fail(static_cast<errc>(code), name() + ": " + detail::store_string(msg));
  }

  /// Sends one request frame and returns the reply's payload. Caller holds mu_ (or is the
  /// constructor).
  std::vector<std::byte> exchange(const std::vector<std::byte>& frame,
                                  detail::store_clock::time_point reply_deadline,
                                  const std::string& what) {
    if (!conn_) loss_.check(name() + ": " + what + ": ");
    if (const int e = detail::store_send_all(conn_.get(), frame, detail::store_deadline(timeout_));
        e != 0)
      io_failed(e, what);
    std::byte head[4];
    if (const int e = detail::store_recv_all(conn_.get(), head, reply_deadline); e != 0)
      io_failed(e, what);
    const std::uint64_t len = detail::store_load_le(head, 4);
    if (len == 0 || len > detail::store_max_frame)
      malformed(what, "frame length " + std::to_string(len) + ", limit " +
                          std::to_string(detail::store_max_frame));
    std::vector<std::byte> reply(len);
    const auto body_deadline = std::max(reply_deadline, detail::store_deadline(timeout_));
    if (const int e = detail::store_recv_all(conn_.get(), reply, body_deadline); e != 0)
      io_failed(e, what);
    return reply;
  }

  std::string host_;
  int port_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<detail::store_server> server_;  // destroyed after conn_
  std::mutex mu_;
  detail::unique_fd conn_;
  detail::store_loss loss_;
};

}  // namespace tutti::inline v0::bootstrap

#pragma once
/// \file
/// tutti::bootstrap::torch_tcp_store: a client of torch.distributed's TCPStore server (c10d's
/// TCPStore: the store torchrun's elastic agent serves at MASTER_ADDR:MASTER_PORT), so that
/// tutti ranks under torchrun meet through the agent's store.
///
/// The wire protocol, as torch's client and both its servers (libuv, the default, and the
/// legacy one) speak it (torch/csrc/distributed/c10d/TCPStore.cpp and store/TCPStoreBackend.hpp,
/// TCPStoreBackend.cpp, TCPStoreLibUvBackend.cpp). There is no framing: a request is
/// [u8 query][fields], integers in the host's byte order (little-endian on every platform torch
/// ships for), and a key or value is [u64 length][bytes].
///   VALIDATE 0    [u32 0x3C85F7CE]     no reply. It must be a connection's first request: the
///                                      server drops a client that starts with anything else
///   PING 13       [u32 nonce]          -> [u32 nonce]
///   SET 1         [key][value]         no reply (this client follows it with a PING)
///   GET 3         [key]                -> [value]. For a missing key the libuv server answers
///                                      empty and the legacy one drops the client: GET follows
///                                      a WAIT
///   ADD 4         [key][i64 delta]     -> [i64 new value]; the value is stored as decimal text.
///                                      A value std::stoll cannot parse drops the client
///   CHECK 5       [u64 n][key] x n     -> [u8 0: all exist, 1: not all]
///   WAIT 6        [u64 n][key] x n     -> [u8 0 STOP_WAITING], once all exist
///   CANCEL_WAIT 12                     -> [u8 1 WAIT_CANCELED], after a STOP_WAITING that
///                                      crossed it, if one did
/// The libuv server drops a client that sends a key over 8 KiB, a value over 8 MiB or over
/// 128 Ki keys in one request; this client refuses those itself (errc::invalid_argument).

#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <tutti/bootstrap/store.hpp>
#include <tutti/core/error.hpp>
#include <tutti/detail/store/wire.hpp>
#include <tutti/detail/unique_fd.hpp>

namespace tutti::inline v0::detail {

/// torch's c10d::detail::QueryType values this client sends.
enum class torch_query : std::uint8_t {
  validate = 0,
  set = 1,
  get = 3,
  add = 4,
  check = 5,
  wait = 6,
  cancel_wait = 12,
  ping = 13,
};
inline constexpr std::uint32_t torch_validation_magic = 0x3C85F7CE;
inline constexpr std::uint8_t torch_ready = 0;          // CheckResponseType::READY
inline constexpr std::uint8_t torch_stop_waiting = 0;   // WaitResponseType::STOP_WAITING
inline constexpr std::uint8_t torch_wait_canceled = 1;  // WaitResponseType::WAIT_CANCELED
/// The libuv server's limits (MAX_STRING_LEN, MAX_PAYLOAD_LEN, MAX_KEY_COUNT).
inline constexpr std::size_t torch_max_key_bytes = 8 << 10;
inline constexpr std::size_t torch_max_value_bytes = 8 << 20;
inline constexpr std::size_t torch_max_keys = 128 << 10;

/// One request, or several sent in one write.
class torch_request {
 public:
  explicit torch_request(torch_query q) { add(q); }
  torch_request& add(torch_query q) {
    bytes_.push_back(static_cast<std::byte>(q));
    return *this;
  }
  torch_request& u32(std::uint32_t v) { return le(v, 4); }
  torch_request& u64(std::uint64_t v) { return le(v, 8); }
  torch_request& field(std::span<const std::byte> s) {
    u64(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  torch_request& field(std::string_view s) { return field(store_bytes(s)); }
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return bytes_; }

 private:
  torch_request& le(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) bytes_.push_back(static_cast<std::byte>(v >> (8 * i)));
    return *this;
  }
  std::vector<std::byte> bytes_;
};

/// Whether the bytes are a decimal int64, as store::add requires.
[[nodiscard]] inline bool torch_is_counter(std::span<const std::byte> v) noexcept {
  std::int64_t n = 0;
  const char* first = reinterpret_cast<const char*>(v.data());
  const auto [end, ec] = std::from_chars(first, first + v.size(), n);
  return !v.empty() && ec == std::errc{} && end == first + v.size();
}

}  // namespace tutti::inline v0::detail

namespace tutti::inline v0::bootstrap {

/// A client of a torch.distributed TCPStore server, libuv or legacy. Every key goes to the
/// server as `prefix` + key, so clients that share a prefix share keys (torch's own client
/// prefixes "/": a torch_tcp_store with prefix "/" sees the keys of torch.distributed.TCPStore).
/// Connects on first use, retrying (10 ms backoff doubling to 1 s) until the constructor's
/// timeout passes, since the server may not be listening yet. Thread-safe: calls take turns
/// on one connection. A broken connection (the server went away, a malformed reply, a reply
/// past its deadline) raises, and so does every later call. Nothing is ever deleted: keys live
/// as long as the server.
class torch_tcp_store final : public store {
 public:
  /// A client of the server at host:port. `timeout` bounds connecting, and each reply the
  /// server owes at once (set, add, the value of a get).
  torch_tcp_store(std::string host, int port, std::string prefix = "",
                  std::chrono::milliseconds timeout = default_timeout())
      : host_(std::move(host)), port_(port), prefix_(std::move(prefix)), timeout_(timeout) {
    if (host_.empty()) detail::store_fail(errc::invalid_argument, name() + ": empty host");
    if (port_ < 1 || port_ > 65535)
      detail::store_fail(errc::invalid_argument, name() + ": port out of range [1, 65535]");
    if (prefix_.size() >= detail::torch_max_key_bytes)
      detail::store_fail(errc::invalid_argument, name() + ": key prefix too long");
  }

  [[nodiscard]] const std::string& host() const noexcept { return host_; }
  [[nodiscard]] int port() const noexcept { return port_; }
  /// What every key is prefixed with on the server.
  [[nodiscard]] const std::string& prefix() const noexcept { return prefix_; }
  [[nodiscard]] std::chrono::milliseconds timeout() const noexcept { return timeout_; }

  void set(std::string_view key, std::span<const std::byte> value) override {
    const std::string k = wire_key(key);
    detail::check_store_value(name(), key, value.size());
    if (value.size() > detail::torch_max_value_bytes)
      detail::store_fail(errc::invalid_argument,
                         name() + ": value for key " + detail::store_quote(key) + " is " +
                             std::to_string(value.size()) + " bytes; torch's server takes " +
                             std::to_string(detail::torch_max_value_bytes) + " at most");
    const std::string what = "set of key " + detail::store_quote(key);
    std::lock_guard lock(mu_);
    connected(what);
    // SET has no reply: the PING's answer says the server has taken it.
    const std::uint32_t nonce = ++nonce_;
    send(detail::torch_request(detail::torch_query::set)
             .field(k)
             .field(value)
             .add(detail::torch_query::ping)
             .u32(nonce),
         what);
    if (read_uint(4, op_deadline(), what) != nonce) malformed(what, "a PING answered wrongly");
  }

  [[nodiscard]] std::vector<std::byte> get(std::string_view key,
                                           std::chrono::milliseconds timeout) override {
    const std::vector<std::string> keys{wire_key(key)};
    const std::string what = "get of key " + detail::store_quote(key);
    std::lock_guard lock(mu_);
    connected(what);
    await(keys, timeout, what);
    return fetch(keys[0], what);
  }

  std::int64_t add(std::string_view key, std::int64_t delta) override {
    const std::string k = wire_key(key);
    const std::string what = "add to key " + detail::store_quote(key);
    std::lock_guard lock(mu_);
    connected(what);
    send(detail::torch_request(detail::torch_query::add)
             .field(k)
             .u64(static_cast<std::uint64_t>(delta)),
         what);
    std::byte b[8];
    const int e = detail::store_recv_all(conn_.get(), b, op_deadline());
    if (e == detail::store_eof || e == ECONNRESET) explain_dropped_add(k, key, what);
    if (e != 0) io_failed(e, what);
    return static_cast<std::int64_t>(detail::store_load_le(b, 8));
  }

  void wait(std::span<const std::string> keys, std::chrono::milliseconds timeout) override {
    if (keys.size() > detail::torch_max_keys)
      detail::store_fail(errc::invalid_argument, name() + ": " + std::to_string(keys.size()) +
                                                     " keys; torch's server waits for " +
                                                     std::to_string(detail::torch_max_keys) +
                                                     " at most");
    std::vector<std::string> wire;
    wire.reserve(keys.size());
    for (const auto& k : keys) wire.push_back(wire_key(k));
    if (keys.empty()) return;
    const std::string what = "wait for " + detail::store_quote_keys(keys);
    std::lock_guard lock(mu_);
    connected(what);
    await(wire, timeout, what);
  }

 private:
  [[nodiscard]] std::string name() const {
    return "torch_tcp_store " + host_ + ":" + std::to_string(port_);
  }
  [[nodiscard]] std::string wire_key(std::string_view key) const {
    detail::check_store_key(name(), key);
    if (prefix_.size() + key.size() > detail::torch_max_key_bytes)
      detail::store_fail(errc::invalid_argument,
                         name() + ": key " + detail::store_quote(key) + " with its prefix is " +
                             std::to_string(prefix_.size() + key.size()) +
                             " bytes; torch's server takes " +
                             std::to_string(detail::torch_max_key_bytes) + " at most");
    return prefix_ + std::string(key);
  }
  [[nodiscard]] detail::store_clock::time_point op_deadline() const {
    return detail::store_deadline(timeout_);
  }

  /// Waits until every key (with prefix) exists, or raises errc::timeout naming those still
  /// missing. Caller holds mu_, connected.
  void await(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
             const std::string& what) {
    if (timeout <= std::chrono::milliseconds::zero()) {
      if (!exist(keys, what)) timed_out(keys, timeout, what);
      return;
    }
    detail::torch_request req(detail::torch_query::wait);
    req.u64(keys.size());
    for (const auto& k : keys) req.field(k);
    send(req, what);
    std::byte r{};
    const int e = detail::store_recv_all(conn_.get(), {&r, 1}, detail::store_deadline(timeout));
    if (e == 0) {
      if (std::to_integer<std::uint8_t>(r) != detail::torch_stop_waiting)
        malformed(what, "WAIT answered " + std::to_string(std::to_integer<int>(r)));
      return;
    }
    if (e != ETIMEDOUT) io_failed(e, what);
    send(detail::torch_request(detail::torch_query::cancel_wait), what);
    std::uint64_t reply = read_uint(1, op_deadline(), what);
    const bool ready = reply == detail::torch_stop_waiting;  // crossed our cancel
    if (ready) reply = read_uint(1, op_deadline(), what);
    if (reply != detail::torch_wait_canceled)
      malformed(what, "CANCEL_WAIT answered " + std::to_string(reply));
    if (!ready) timed_out(keys, timeout, what);
  }

  /// GET of a key (with prefix) that exists. Caller holds mu_, connected.
  std::vector<std::byte> fetch(const std::string& k, const std::string& what) {
    send(detail::torch_request(detail::torch_query::get).field(k), what);
    const auto deadline = op_deadline();
    const std::uint64_t n = read_uint(8, deadline, what);
    if (n > max_value_bytes)
      malformed(what, "a value of " + std::to_string(n) + " bytes, over the limit of " +
                          std::to_string(max_value_bytes));
    std::vector<std::byte> v(n);
    read(v, deadline, what);
    return v;
  }

  /// CHECK: whether every key exists. Caller holds mu_, connected.
  bool exist(const std::vector<std::string>& keys, const std::string& what) {
    detail::torch_request req(detail::torch_query::check);
    req.u64(keys.size());
    for (const auto& k : keys) req.field(k);
    send(req, what);
    const std::uint64_t r = read_uint(1, op_deadline(), what);
    if (r > 1) malformed(what, "CHECK answered " + std::to_string(r));
    return r == detail::torch_ready;
  }

  [[noreturn]] void timed_out(const std::vector<std::string>& keys,
                              std::chrono::milliseconds timeout, const std::string& what) {
    std::vector<std::string> missing;
    // One CHECK per key, for the first few: enough to name what a rendezvous lacks.
    for (std::size_t i = 0; i < std::min<std::size_t>(keys.size(), 64) && missing.size() < 8; ++i)
      if (!exist({keys[i]}, what)) missing.push_back(keys[i].substr(prefix_.size()));
    detail::store_fail(errc::timeout,
                       name() + ": " + what + " timed out after " + detail::store_ms(timeout) +
                           " (still missing: " + detail::store_quote_keys(missing) + ")");
  }

  /// The server dropped us during an ADD: torch's server does that when the stored value is
  /// not a number. Reconnects briefly to look; raises errc::invalid_argument (keeping the new
  /// connection) if so, else errc::peer_lost. Caller holds mu_.
  [[noreturn]] void explain_dropped_add(const std::string& k, std::string_view key,
                                        const std::string& what) {
    conn_.reset();
    const auto grace = std::min(timeout_, std::chrono::milliseconds{1000});
    std::string why;
    try {
      conn_ = open(detail::store_deadline(grace), grace);
      if (exist({k}, what) && !detail::torch_is_counter(fetch(k, what)))
        why = "its value is not a decimal 64-bit integer";
    } catch (const error&) {
      conn_.reset();
    }
    if (!why.empty() && conn_)
      detail::store_fail(errc::invalid_argument,
                         name() + ": add to key " + detail::store_quote(key) + ": " + why);
    lose(errc::peer_lost, name() + ": " + what + ": the store server closed the connection");
  }

  /// Connects on first use. Caller holds mu_.
  void connected(const std::string& what) {
    if (conn_) return;
    loss_.check(name() + ": " + what + ": ");
    conn_ = open(op_deadline(), timeout_);
  }

  /// A connection that passed torch's handshake (VALIDATE, then a PING), retrying until the
  /// deadline.
  detail::unique_fd open(detail::store_clock::time_point deadline,
                         std::chrono::milliseconds timeout) {
    std::chrono::milliseconds pause{10};
    std::string last;
    for (;;) {
      sockaddr_in addr{};
      std::string why = detail::store_resolve(host_, port_, addr);
      detail::unique_fd fd;
      if (why.empty()) {
        int e = detail::store_try_connect(addr, deadline, fd);
        const bool connected = e == 0;
        if (connected) e = handshake(fd.get(), deadline);
        if (e == 0) return fd;
        const bool dropped = connected && (e == detail::store_eof || e == ECONNRESET || e == EPIPE);
        why = dropped ? "the server closed the connection during the handshake"
              : e == ETIMEDOUT && connected ? "no answer to the handshake"
                                            : detail::store_errno(e);
        // The attempt the deadline cut short says less than the one before it.
        if (e == ETIMEDOUT && !last.empty()) why = last;
      }
      last = why;
      const auto now = detail::store_clock::now();
      if (now >= deadline)
        detail::store_fail(errc::timeout, name() + ": could not connect within " +
                                              detail::store_ms(timeout) + " (last error: " + last +
                                              "); is torchrun's agent (or the torch TCPStore "
                                              "server) up at that address?");
      std::this_thread::sleep_for(std::min<detail::store_clock::duration>(pause, deadline - now));
      pause = std::min(pause * 2, std::chrono::milliseconds{1000});
    }
  }

  /// VALIDATE and PING on a new connection: 0, or an error for a retry. A wrong answer is no
  /// torch store: that raises at once.
  int handshake(int fd, detail::store_clock::time_point deadline) {
    const std::uint32_t nonce = ++nonce_;
    const auto req = detail::torch_request(detail::torch_query::validate)
                         .u32(detail::torch_validation_magic)
                         .add(detail::torch_query::ping)
                         .u32(nonce);
    if (const int e = detail::store_send_all(fd, req.bytes(), deadline); e != 0) return e;
    std::byte b[4];
    if (const int e = detail::store_recv_all(fd, b, deadline); e != 0) return e;
    if (detail::store_load_le(b, 4) != nonce)
      detail::store_fail(errc::transport_failure,
                         name() +
                             ": the server answered torch's handshake wrongly: is it a "
                             "torch.distributed TCPStore?");
    return 0;
  }

  void send(const detail::torch_request& req, const std::string& what) {
    if (const int e = detail::store_send_all(conn_.get(), req.bytes(), op_deadline()); e != 0)
      io_failed(e, what);
  }
  void read(std::span<std::byte> buf, detail::store_clock::time_point deadline,
            const std::string& what) {
    if (const int e = detail::store_recv_all(conn_.get(), buf, deadline); e != 0)
      io_failed(e, what);
  }
  /// An unsigned integer of `n` (1, 4 or 8) bytes.
  std::uint64_t read_uint(int n, detail::store_clock::time_point deadline,
                          const std::string& what) {
    std::byte b[8];
    read({b, static_cast<std::size_t>(n)}, deadline, what);
    return detail::store_load_le(b, n);
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
    loss_.io_failed(e, name() + ": " + what + ": ", "within " + detail::store_ms(timeout_));
  }

  std::string host_;
  int port_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  detail::unique_fd conn_;
  std::uint32_t nonce_ = static_cast<std::uint32_t>(::getpid()) << 16;
  detail::store_loss loss_;
};

}  // namespace tutti::inline v0::bootstrap

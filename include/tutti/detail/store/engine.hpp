#pragma once
/// \file
/// The protocol side of tutti::bootstrap::tcp_store's server, without sockets: the key-value
/// map, every connection's buffers, and what each buffered request does to them (protocol in
/// wire.hpp). server.hpp moves the bytes; tests and fuzzers drive this directly.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tutti/bootstrap/store.hpp"
#include "tutti/core/error.hpp"
#include "tutti/detail/store/wire.hpp"
#include "tutti/detail/unique_fd.hpp"

namespace tutti::inline v0::detail {

/// One client of the server: its socket (none when driven without one) and its buffers.
struct store_connection {
  unique_fd fd;
  std::vector<std::byte> in;   // received, not yet handled
  std::vector<std::byte> out;  // reply bytes not yet sent
  std::size_t sent = 0;        // of out
  bool dead = false;           // close now
  bool closing = false;        // send `out`, then close; read nothing more
  // Authentication: `authenticated` is set at once when the server has no token.
  bool authenticated = false;
  bool challenged = false;  // hello answered; auth expected next
  store_nonce client_nonce{};
  store_nonce server_nonce{};
  // A get or wait blocked until its keys exist or its deadline passes.
  bool parked = false;
  store_op parked_op = store_op::get;
  std::vector<std::string> parked_keys;
  store_clock::time_point parked_deadline;
};

/// The server's state and request handling. Not thread-safe: one thread drives it.
class store_engine {
 public:
  /// Largest reply backlog a connection may have before the engine stops reading its requests.
  static constexpr std::size_t out_soft_limit = std::size_t{1} << 20;

  /// `token` empty: every client is served at once; else each must authenticate first.
  explicit store_engine(std::string token = {}) : token_(std::move(token)) {}

  /// Adds a client; the engine owns it until it is dead and swept.
  store_connection& add(unique_fd fd) {
    auto c = std::make_unique<store_connection>();
    c->fd = std::move(fd);
    c->authenticated = token_.empty();
    conns_.push_back(std::move(c));
    return *conns_.back();
  }
  [[nodiscard]] const std::vector<std::unique_ptr<store_connection>>& connections() const noexcept {
    return conns_;
  }

  /// How many bytes `c` may have buffered: one frame of the largest size it may send. Memory
  /// grows with the bytes a client actually sends, never with a length it announces.
  [[nodiscard]] static std::size_t in_cap(const store_connection& c) noexcept {
    return 4 + (c.authenticated ? store_max_frame : store_auth_max_frame);
  }

  /// Handles every complete frame buffered on every connection, repeating while a request
  /// (a set) may have unblocked another; then answers parked requests whose deadline passed.
  void step(store_clock::time_point now) {
    for (bool progress = true; progress;) {
      progress = false;
      for (const auto& c : conns_) progress = handle_frames(*c) || progress;
    }
    for (const auto& c : conns_)
      if (c->parked && !c->dead && c->parked_deadline <= now) expire_one(*c);
  }

  /// The earliest deadline of a parked request, or time_point::max().
  [[nodiscard]] store_clock::time_point next_deadline() const noexcept {
    auto next = store_clock::time_point::max();
    for (const auto& c : conns_)
      if (c->parked) next = std::min(next, c->parked_deadline);
    return next;
  }

  /// The connections that got a reply since the last call, in the order of their first reply:
  /// a set's own reply comes before those of the requests it unblocked, so the writer hears
  /// back first even if a reader acts on its value at once (say, by exiting with the server).
  /// Valid until sweep().
  [[nodiscard]] std::vector<store_connection*> take_replied() {
    return std::exchange(replied_, {});
  }

  /// Drops dead connections (their sockets close).
  void sweep() {
    replied_.clear();
    std::erase_if(conns_, [](const auto& c) { return c->dead; });
  }

  /// Number of keys held.
  [[nodiscard]] std::size_t size() const noexcept { return data_.size(); }

 private:
  /// Handles every complete frame buffered on `c`; false when there was none to handle.
  bool handle_frames(store_connection& c) {
    std::size_t pos = 0;
    const std::size_t limit = in_cap(c) - 4;
    while (!c.dead && !c.closing && !c.parked && c.out.size() - c.sent < out_soft_limit &&
           c.in.size() - pos >= 4) {
      const std::uint64_t len = store_load_le(c.in.data() + pos, 4);
      if (len == 0 || len > limit) {
        if (c.authenticated) {
          c.dead = true;
        } else {
          refuse(c, errc::transport_failure, unauthenticated_message());
        }
      } else if (c.in.size() - pos - 4 < len) {
        break;
      } else {
        const auto payload = std::span(c.in).subspan(pos + 4, len);
        c.dead = !(c.authenticated ? handle_request(c, payload) : handle_auth(c, payload));
        pos += 4 + len;
      }
    }
    c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(pos));
    if (c.closing) c.in.clear();
    if (c.in.empty() && c.in.capacity() > out_soft_limit) c.in.shrink_to_fit();
    return pos > 0;
  }

  [[nodiscard]] static std::string unauthenticated_message() {
    return std::string("this store server requires a token: set the same ") + store_token_variable +
           " on every rank";
  }

  /// Answers "failed" with `why` and closes the connection once that is sent.
  void refuse(store_connection& c, errc code, const std::string& why) {
    reply(c, store_frame()
                 .u8(static_cast<std::uint8_t>(store_status::failed))
                 .u8(static_cast<std::uint8_t>(code))
                 .field(store_bytes(why))
                 .finish());
    c.closing = true;
  }

  /// Handles a request of a connection that has not authenticated (the server has a token).
  bool handle_auth(store_connection& c, std::span<const std::byte> payload) {
    store_parser p(payload);
    std::uint8_t op = 0;
    if (!p.u8(op)) return false;
    if (op == static_cast<std::uint8_t>(store_op::hello) && !c.challenged) {
      if (payload.size() != 1 + store_nonce_bytes) return false;
      std::copy_n(payload.begin() + 1, store_nonce_bytes, c.client_nonce.begin());
      if (!random_bytes(c.server_nonce)) {
        refuse(c, errc::transport_failure, "the store server cannot draw a nonce (getrandom)");
        return true;
      }
      c.challenged = true;
      const auto proof = store_auth_proof(token_, true, c.client_nonce, c.server_nonce);
      reply(c, store_frame()
                   .u8(static_cast<std::uint8_t>(store_status::challenge))
                   .raw(c.server_nonce)
                   .raw(proof)
                   .finish());
      return true;
    }
    if (op == static_cast<std::uint8_t>(store_op::auth) && c.challenged) {
      if (payload.size() != 1 + store_nonce_bytes) return false;
      const auto expected = store_auth_proof(token_, false, c.client_nonce, c.server_nonce);
      if (!equal_constant_time(expected, payload.subspan(1))) {
        refuse(c, errc::transport_failure,
               std::string("the token was rejected: this client's ") + store_token_variable +
                   " differs from the store server's");
        return true;
      }
      c.authenticated = true;
      reply(c, store_frame().u8(static_cast<std::uint8_t>(store_status::ok)).finish());
      return true;
    }
    refuse(c, errc::transport_failure, unauthenticated_message());
    return true;
  }

  /// add: the key's counter (0 when absent) plus the request's amount; false when malformed.
  bool handle_add(store_connection& c, store_parser& p) {
    std::span<const std::byte> key;
    std::uint64_t n = 0;
    if (!p.key(key) || !p.u64(n) || !p.done()) return false;
    auto it = data_.find(store_string(key));
    std::int64_t sum = 0;
    std::string why;
    if (!store_add_counter(it == data_.end() ? nullptr : &it->second, static_cast<std::int64_t>(n),
                           sum, why)) {
      const std::string msg = "add to key " + store_quote(store_string(key)) + ": " + why;
      reply(c, store_frame()
                   .u8(2)
                   .u8(static_cast<std::uint8_t>(errc::invalid_argument))
                   .field(store_bytes(msg))
                   .finish());
      return true;
    }
    data_.insert_or_assign(store_string(key), store_counter_bytes(sum));
    reply(c, store_frame().u8(0).u64(static_cast<std::uint64_t>(sum)).finish());
    wake_waiters();
    return true;
  }

  /// wait: parks the connection until every key it names is set; false when malformed.
  bool handle_wait(store_connection& c, store_parser& p) {
    std::uint64_t n = 0;
    std::uint32_t count = 0;
    // Each key takes at least 5 bytes: check the count against the frame before reserving.
    if (!p.u64(n) || !p.u32(count) || count > p.remaining() / 5) return false;
    std::vector<std::string> keys;
    keys.reserve(count);
    for (std::uint32_t i = 0; i < count; ++i) {
      std::span<const std::byte> key;
      if (!p.key(key)) return false;
      keys.push_back(store_string(key));
    }
    if (!p.done()) return false;
    park(c, store_op::wait, std::move(keys), n);
    return true;
  }

  /// Handles one request; false when it is malformed (the connection is then closed).
  bool handle_request(store_connection& c, std::span<const std::byte> payload) {
    store_parser p(payload);
    std::uint8_t op = 0;
    std::span<const std::byte> key;
    std::span<const std::byte> value;
    std::uint64_t n = 0;
    if (!p.u8(op)) return false;
    switch (static_cast<store_op>(op)) {
      case store_op::set:
        if (!p.key(key) || !p.field(value, bootstrap::max_value_bytes) || !p.done()) return false;
        data_.insert_or_assign(store_string(key),
                               std::vector<std::byte>(value.begin(), value.end()));
        reply(c, store_frame().u8(0).finish());
        wake_waiters();
        return true;
      case store_op::get:
        if (!p.u64(n) || !p.key(key) || !p.done()) return false;
        park(c, store_op::get, {store_string(key)}, n);
        return true;
      case store_op::add:
        return handle_add(c, p);
      case store_op::wait:
        return handle_wait(c, p);
      case store_op::hello:
        if (payload.size() != 1 + store_nonce_bytes) return false;
        refuse(c, errc::invalid_argument,
               std::string("this store server has no token, but the client sent one: set the "
                           "same ") +
                   store_token_variable + " on every rank, rank 0 included");
        return true;
      case store_op::auth:
        return false;  // only after hello, which an authenticated connection never sends
    }
    return false;  // unknown op
  }

  void reply(store_connection& c, std::vector<std::byte> frame) {
    if (c.out.empty()) {
      c.out = std::move(frame);
      replied_.push_back(&c);
    } else {
      c.out.insert(c.out.end(), frame.begin(), frame.end());
    }
  }

  void park(store_connection& c, store_op op, std::vector<std::string> keys,
            std::uint64_t timeout_ms) {
    constexpr std::uint64_t cap = 1ULL << 40;  // ~35 years; keeps the deadline from overflowing
    c.parked = true;
    c.parked_op = op;
    c.parked_keys = std::move(keys);
    c.parked_deadline = store_deadline(
        std::chrono::milliseconds{static_cast<std::int64_t>(std::min(timeout_ms, cap))});
    (void)try_complete(c);  // else step() or a later set answers it
  }

  /// Answers c's parked request if all its keys exist.
  bool try_complete(store_connection& c) {
    for (const auto& k : c.parked_keys)
      if (!data_.contains(k)) return false;
    if (c.parked_op == store_op::get)
      reply(c, store_frame().u8(0).field(data_.find(c.parked_keys.front())->second).finish());
    else
      reply(c, store_frame().u8(0).finish());
    unpark(c);
    return true;
  }

  void wake_waiters() {
    for (const auto& c : conns_)
      if (c->parked && !c->dead) (void)try_complete(*c);
  }

  void expire_one(store_connection& c) {
    std::vector<const std::string*> missing;
    for (const auto& k : c.parked_keys)
      if (!data_.contains(k)) missing.push_back(&k);
    store_frame b;
    b.u8(1).u32(static_cast<std::uint32_t>(missing.size()));
    for (const auto* k : missing) b.field(store_bytes(*k));
    reply(c, b.finish());
    unpark(c);
  }

  static void unpark(store_connection& c) {
    c.parked = false;
    c.parked_keys.clear();
  }

  std::string token_;
  std::map<std::string, std::vector<std::byte>, std::less<>> data_;
  std::vector<std::unique_ptr<store_connection>> conns_;
  std::vector<store_connection*> replied_;
};

}  // namespace tutti::inline v0::detail

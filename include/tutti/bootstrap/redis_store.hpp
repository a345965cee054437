#pragma once
/// \file
/// tutti::bootstrap::redis_store: the store on a Redis server (`redis://host:port`), connected
/// through Gloo's RedisStore (hiredis). Part of the tutti::gloo CMake component.

#if !__has_include(<gloo/rendezvous/redis_store.h>)
#error \
    "tutti/bootstrap/redis_store.hpp needs Gloo with Redis (Debian: libgloo-dev): link the tutti::gloo CMake component"
#else

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gloo/rendezvous/redis_store.h>

#include "tutti/bootstrap/store.hpp"
#include "tutti/core/error.hpp"
#include "tutti/detail/unique_fd.hpp"

namespace tutti::inline v0::bootstrap {

/// A store kept by a Redis server every rank can reach. Gloo's RedisStore makes the
/// connection; tutti speaks to it with plain SET/GET/INCRBY/EXISTS so a later set replaces the
/// value (Gloo's own set refuses to), and every wait has a deadline. Connecting retries until
/// the server answers or the timeout passes. Thread-safe (one connection behind a mutex).
class redis_store final : public store {
 public:
  redis_store(std::string host, int port, std::chrono::milliseconds timeout = default_timeout())
      : host_(std::move(host)), port_(port), timeout_(timeout) {
    if (port_ < 1 || port_ > 65535)
      detail::store_fail(errc::invalid_argument, name() + ": port out of range");
    const auto deadline = detail::store_deadline(timeout_);
    auto pause = std::chrono::milliseconds(10);
    std::string why;
    for (;;) {
      // Gloo's RedisStore leaks its hiredis context when the connection fails: let it connect
      // only once something accepts connections there.
      why = accepts(deadline);
      if (why.empty()) {
        try {
          r_ = std::make_unique<connection>(host_, port_);
          break;
        } catch (const std::exception& e) {
          why = e.what();
        }
      }
      if (detail::store_clock::now() >= deadline)
        detail::store_fail(errc::timeout, name() + ": no Redis server answered within " +
                                              detail::store_ms(timeout_) + ": " + why);
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(500));
    }
  }

  void set(std::string_view key, std::span<const std::byte> value) override {
    detail::check_store_key(name(), key);
    detail::check_store_value(name(), key, value.size());
    std::lock_guard lock(mu_);
    reply r = command("SET %b %b", key, value);
    if (r->type == REDIS_REPLY_ERROR) fail_reply("SET", key, r.get());
  }

  [[nodiscard]] std::vector<std::byte> get(std::string_view key,
                                           std::chrono::milliseconds timeout) override {
    detail::check_store_key(name(), key);
    const auto deadline = detail::store_deadline(timeout);
    auto pause = std::chrono::milliseconds(1);
    for (;;) {
      {
        std::lock_guard lock(mu_);
        reply r = command("GET %b", key);
        if (r->type == REDIS_REPLY_STRING) {
          const auto* p = reinterpret_cast<const std::byte*>(r->str);
          return {p, p + r->len};
        }
        if (r->type != REDIS_REPLY_NIL) fail_reply("GET", key, r.get());
      }
      if (detail::store_clock::now() >= deadline)
        detail::store_fail(errc::timeout, name() + ": key " + detail::store_quote(key) +
                                              " not set within " + detail::store_ms(timeout));
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
  }

  std::int64_t add(std::string_view key, std::int64_t delta) override {
    detail::check_store_key(name(), key);
    const std::string d = std::to_string(delta);
    std::lock_guard lock(mu_);
    reply r = command("INCRBY %b %b", key, detail::store_bytes(d));
    if (r->type == REDIS_REPLY_ERROR)
      detail::store_fail(
          errc::invalid_argument,
          name() + ": add on key " + detail::store_quote(key) + ": " + std::string(r->str, r->len));
    if (r->type != REDIS_REPLY_INTEGER) fail_reply("INCRBY", key, r.get());
    return static_cast<std::int64_t>(r->integer);
  }

  void wait(std::span<const std::string> keys, std::chrono::milliseconds timeout) override {
    for (const auto& k : keys) detail::check_store_key(name(), k);
    const auto deadline = detail::store_deadline(timeout);
    auto pause = std::chrono::milliseconds(1);
    std::size_t next = 0;  // keys before it exist
    for (;;) {
      {
        std::lock_guard lock(mu_);
        for (; next < keys.size(); ++next) {
          reply r = command("EXISTS %b", keys[next]);
          if (r->type != REDIS_REPLY_INTEGER) fail_reply("EXISTS", keys[next], r.get());
          if (r->integer == 0) break;
        }
      }
      if (next == keys.size()) return;
      if (detail::store_clock::now() >= deadline)
        detail::store_fail(errc::timeout, name() + ": key " + detail::store_quote(keys[next]) +
                                              " not set within " + detail::store_ms(timeout));
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
  }

 private:
  /// Gloo's RedisStore, for its connection.
  struct connection : ::gloo::rendezvous::RedisStore {
    using RedisStore::RedisStore;
    [[nodiscard]] redisContext* raw() const noexcept { return redis_; }
  };
  struct reply_free {
    void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
  };
  using reply = std::unique_ptr<redisReply, reply_free>;

  /// "" once a TCP connection to host:port succeeds (closed at once), else why not; gives up
  /// at `deadline`.
  [[nodiscard]] std::string accepts(detail::store_clock::time_point deadline) const {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const std::string port = std::to_string(port_);
    if (const int rc = ::getaddrinfo(host_.c_str(), port.c_str(), &hints, &res); rc != 0)
      return std::string("cannot resolve the host: ") + ::gai_strerror(rc);
    std::string why = "no address";
    for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
      detail::unique_fd fd(
          ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
      if (!fd) continue;
      if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0) {
        why.clear();
        break;
      }
      if (errno != EINPROGRESS) {
        why = detail::store_errno(errno);
        continue;
      }
      pollfd p{fd.get(), POLLOUT, 0};
      if (::poll(&p, 1, std::max(1, detail::store_poll_ms(deadline))) == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        if (err == 0) {
          why.clear();
          break;
        }
        why = detail::store_errno(err);
      } else {
        why = "connect timed out";
      }
    }
    ::freeaddrinfo(res);
    return why;
  }

  [[nodiscard]] std::string name() const {
    return "redis_store(" + host_ + ":" + std::to_string(port_) + ")";
  }

  /// Runs `fmt` with one or two binary-safe (%b) arguments.
  reply command(const char* fmt, std::string_view key) {
    return checked(redisCommand(r_->raw(), fmt, key.data(), key.size()));
  }
  reply command(const char* fmt, std::string_view key, std::span<const std::byte> value) {
    return checked(
        redisCommand(r_->raw(), fmt, key.data(), key.size(), value.data(), value.size()));
  }
  reply checked(void* raw) {
    if (raw == nullptr)
      detail::store_fail(errc::peer_lost,
                         name() + ": connection lost: " + std::string(r_->raw()->errstr));
    return reply(static_cast<redisReply*>(raw));
  }

  [[noreturn]] void fail_reply(const char* what, std::string_view key, const redisReply* r) const {
    detail::store_fail(
        errc::transport_failure,
        name() + ": " + what + " " + detail::store_quote(key) + ": unexpected reply" +
            (r->type == REDIS_REPLY_ERROR ? ": " + std::string(r->str, r->len) : ""));
  }

  std::string host_;
  int port_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::unique_ptr<connection> r_;
};

}  // namespace tutti::inline v0::bootstrap

#endif

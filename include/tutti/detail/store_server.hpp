#pragma once
/// \file
/// The server behind tutti::bootstrap::tcp_store: one background thread polling the listening
/// socket and every client, holding the key-value map (protocol in store_wire.hpp).

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "tutti/bootstrap/store.hpp"
#include "tutti/core/error.hpp"
#include "tutti/detail/store_wire.hpp"
#include "tutti/detail/unique_fd.hpp"

namespace tutti::detail {

/// Serves the key-value map on a background thread: poll() over the listening socket, an
/// eventfd that stops it, and every client. Only that thread touches the map and connections.
class store_server {
 public:
  explicit store_server(unique_fd listener) : listener_(std::move(listener)) {
    wake_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake_) store_fail(errc::transport_failure, "tcp_store: eventfd: " + store_errno(errno));
    const int flags = ::fcntl(listener_.get(), F_GETFL);
    if (flags >= 0) (void)::fcntl(listener_.get(), F_SETFL, flags | O_NONBLOCK);
    try {
      thread_ = std::thread([this] { run(); });
    } catch (const std::system_error& e) {
      store_fail(errc::transport_failure, std::string("tcp_store: server thread: ") + e.what());
    }
  }
  store_server(const store_server&) = delete;
  store_server& operator=(const store_server&) = delete;
  /// Stops serving: closes every client connection and joins the thread.
  ~store_server() {
    const std::uint64_t one = 1;
    while (::write(wake_.get(), &one, sizeof one) < 0 && errno == EINTR) {
    }
    thread_.join();
  }

 private:
  struct connection {
    unique_fd fd;
    std::vector<std::byte> in;   // received, not yet handled
    std::vector<std::byte> out;  // reply bytes not yet sent
    std::size_t sent = 0;        // of out
    bool dead = false;
    // A get or wait blocked until its keys exist or its deadline passes.
    bool parked = false;
    store_op parked_op = store_op::get;
    std::vector<std::string> parked_keys;
    store_clock::time_point parked_deadline;
  };
  static constexpr std::size_t in_limit = 4 + store_max_frame;
  static constexpr std::size_t out_soft_limit = std::size_t{1} << 20;

  void run() noexcept {
    try {
      loop();
    } catch (...) {  // out of memory or poll failing: stop; clients then see the connection close
    }
    conns_.clear();
    listener_.reset();  // new clients are refused rather than left waiting in the backlog
  }

  void loop() {
    std::vector<pollfd> fds;
    for (;;) {
      const auto now = store_clock::now();
      fds.clear();
      fds.push_back({wake_.get(), POLLIN, 0});
      fds.push_back({now >= accept_paused_until_ ? listener_.get() : -1, POLLIN, 0});
      for (const auto& c : conns_) {
        short ev = c->in.size() < in_limit ? POLLIN : 0;
        if (c->sent < c->out.size()) ev = static_cast<short>(ev | POLLOUT);
        fds.push_back({c->fd.get(), ev, 0});
      }
      if (::poll(fds.data(), fds.size(), next_timeout_ms(now)) < 0) {
        if (errno == EINTR) continue;
        throw std::system_error(errno, std::system_category(), "poll");
      }
      if (fds[0].revents != 0) return;
      for (std::size_t i = 0; i + 2 < fds.size(); ++i) {
        connection& c = *conns_[i];
        const short re = fds[i + 2].revents;
        if ((re & (POLLERR | POLLNVAL)) != 0) {
          c.dead = true;
          continue;
        }
        if ((re & (POLLIN | POLLHUP)) != 0) receive(c);
        // A hang-up with a full buffer cannot be read to EOF: do not spin on it.
        if ((re & POLLHUP) != 0 && c.in.size() >= in_limit) c.dead = true;
        if (!c.dead && (re & POLLOUT) != 0) flush(c);
      }
      if ((fds[1].revents & POLLIN) != 0) accept_all();
      // A set may unblock a connection handled earlier in the pass: repeat until quiet.
      for (bool progress = true; progress;) {
        progress = false;
        for (const auto& c : conns_) progress = handle_frames(*c) || progress;
      }
      expire(store_clock::now());
      for (const auto& c : conns_)
        if (!c->dead && c->sent < c->out.size()) flush(*c);
      std::erase_if(conns_, [](const auto& c) { return c->dead; });
    }
  }

  [[nodiscard]] int next_timeout_ms(store_clock::time_point now) const {
    auto next = store_clock::time_point::max();
    if (now < accept_paused_until_) next = accept_paused_until_;
    for (const auto& c : conns_)
      if (c->parked) next = std::min(next, c->parked_deadline);
    return next == store_clock::time_point::max() ? -1 : store_poll_ms(next);
  }

  void accept_all() {
    for (;;) {
      unique_fd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!fd) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        // Out of descriptors or memory: stop accepting for a moment instead of spinning.
        if (errno != EAGAIN && errno != EWOULDBLOCK)
          accept_paused_until_ = store_clock::now() + std::chrono::milliseconds{100};
        return;
      }
      store_nodelay(fd.get());
      auto c = std::make_unique<connection>();
      c->fd = std::move(fd);
      conns_.push_back(std::move(c));
    }
  }

  static void receive(connection& c) {
    // Reads what has arrived (at most 1 MiB per pass, for fairness); memory grows with the
    // bytes actually received, never with a length a client announces.
    constexpr std::size_t chunk = std::size_t{256} << 10;
    for (std::size_t total = 0; total < (std::size_t{1} << 20) && c.in.size() < in_limit;) {
      const std::size_t old = c.in.size();
      const std::size_t want = std::min(chunk, in_limit - old);
      c.in.resize(old + want);
      const ssize_t n = ::recv(c.fd.get(), c.in.data() + old, want, 0);
      c.in.resize(old + (n > 0 ? static_cast<std::size_t>(n) : 0));
      if (n > 0) {
        total += static_cast<std::size_t>(n);
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
        c.dead = true;  // the client left (or failed); drop anything it still waits for
        return;
      } else if (errno != EINTR) {
        return;
      }
    }
  }

  static void flush(connection& c) {
    while (c.sent < c.out.size()) {
      const ssize_t n = ::send(c.fd.get(), c.out.data() + c.sent, c.out.size() - c.sent,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n >= 0) {
        c.sent += static_cast<std::size_t>(n);
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return;
      } else if (errno != EINTR) {
        c.dead = true;
        return;
      }
    }
    c.out.clear();
    c.sent = 0;
    if (c.out.capacity() > out_soft_limit) c.out.shrink_to_fit();
  }

  /// Handles every complete frame buffered on `c`; false when there was none to handle.
  bool handle_frames(connection& c) {
    std::size_t pos = 0;
    while (!c.dead && !c.parked && c.out.size() - c.sent < out_soft_limit &&
           c.in.size() - pos >= 4) {
      const std::uint64_t len = store_load_le(c.in.data() + pos, 4);
      if (len == 0 || len > store_max_frame) {
        c.dead = true;
      } else if (c.in.size() - pos - 4 < len) {
        break;
      } else {
        c.dead = !handle_request(c, std::span(c.in).subspan(pos + 4, len));
        pos += 4 + len;
      }
    }
    c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(pos));
    if (c.in.empty() && c.in.capacity() > out_soft_limit) c.in.shrink_to_fit();
    return pos > 0;
  }

  /// Handles one request; false when it is malformed (the connection is then closed).
  bool handle_request(connection& c, std::span<const std::byte> payload) {
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
      case store_op::add: {
        if (!p.key(key) || !p.u64(n) || !p.done()) return false;
        auto it = data_.find(store_string(key));
        std::int64_t sum = 0;
        std::string why;
        if (!store_add_counter(it == data_.end() ? nullptr : &it->second,
                               static_cast<std::int64_t>(n), sum, why)) {
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
      case store_op::wait: {
        std::uint32_t count = 0;
        // Each key takes at least 5 bytes: check the count against the frame before reserving.
        if (!p.u64(n) || !p.u32(count) || count > p.remaining() / 5) return false;
        std::vector<std::string> keys;
        keys.reserve(count);
        for (std::uint32_t i = 0; i < count; ++i) {
          if (!p.key(key)) return false;
          keys.push_back(store_string(key));
        }
        if (!p.done()) return false;
        park(c, store_op::wait, std::move(keys), n);
        return true;
      }
    }
    return false;  // unknown op
  }

  static void reply(connection& c, std::vector<std::byte> frame) {
    if (c.out.empty())
      c.out = std::move(frame);
    else
      c.out.insert(c.out.end(), frame.begin(), frame.end());
  }

  void park(connection& c, store_op op, std::vector<std::string> keys, std::uint64_t timeout_ms) {
    constexpr std::uint64_t cap = 1ULL << 40;  // ~35 years; keeps the deadline from overflowing
    c.parked = true;
    c.parked_op = op;
    c.parked_keys = std::move(keys);
    c.parked_deadline = store_deadline(
        std::chrono::milliseconds{static_cast<std::int64_t>(std::min(timeout_ms, cap))});
    (void)try_complete(c);  // else expire() or a later set answers it
  }

  /// Answers c's parked request if all its keys exist.
  bool try_complete(connection& c) {
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

  void expire(store_clock::time_point now) {
    for (const auto& c : conns_)
      if (c->parked && !c->dead && c->parked_deadline <= now) expire_one(*c);
  }

  void expire_one(connection& c) {
    std::vector<const std::string*> missing;
    for (const auto& k : c.parked_keys)
      if (!data_.contains(k)) missing.push_back(&k);
    store_frame b;
    b.u8(1).u32(static_cast<std::uint32_t>(missing.size()));
    for (const auto* k : missing) b.field(store_bytes(*k));
    reply(c, b.finish());
    unpark(c);
  }

  static void unpark(connection& c) {
    c.parked = false;
    c.parked_keys.clear();
  }

  unique_fd listener_;
  unique_fd wake_;
  std::map<std::string, std::vector<std::byte>, std::less<>> data_;
  std::vector<std::unique_ptr<connection>> conns_;
  store_clock::time_point accept_paused_until_{};
  std::thread thread_;
};

}  // namespace tutti::detail

#pragma once
/// \file
/// The server behind tutti::bootstrap::tcp_store: one background thread polling the listening
/// socket and every client, feeding their bytes to a store_engine (engine.hpp), which
/// holds the key-value map (protocol in wire.hpp).

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
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "tutti/core/error.hpp"
#include "tutti/detail/store/engine.hpp"
#include "tutti/detail/store/wire.hpp"
#include "tutti/detail/unique_fd.hpp"

namespace tutti::inline v0::detail {

/// Serves the key-value map on a background thread: poll() over the listening socket, an
/// eventfd that stops it, and every client. Only that thread touches the engine.
class store_server {
 public:
  /// Serves on `listener`; with a non-empty `token`, every client must authenticate first.
  explicit store_server(unique_fd listener, std::string token = {})
      : listener_(std::move(listener)), engine_(std::move(token)) {
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
  void run() noexcept {
    try {
      loop();
    } catch (...) {  // out of memory or poll failing: stop; clients then see the connection close
    }
    engine_ = store_engine();
    listener_.reset();  // new clients are refused rather than left waiting in the backlog
  }

  void loop() {
    std::vector<pollfd> fds;
    for (;;) {
      const auto now = store_clock::now();
      const auto& conns = engine_.connections();
      fds.clear();
      fds.push_back({wake_.get(), POLLIN, 0});
      fds.push_back({now >= accept_paused_until_ ? listener_.get() : -1, POLLIN, 0});
      for (const auto& c : conns) {
        short ev = !c->closing && c->in.size() < store_engine::in_cap(*c) ? POLLIN : 0;
        if (c->sent < c->out.size()) ev = static_cast<short>(ev | POLLOUT);
        fds.push_back({c->fd.get(), ev, 0});
      }
      if (::poll(fds.data(), fds.size(), next_timeout_ms(now)) < 0) {
        if (errno == EINTR) continue;
        throw std::system_error(errno, std::system_category(), "poll");
      }
      if (fds[0].revents != 0) return;
      for (std::size_t i = 0; i + 2 < fds.size(); ++i) {
        store_connection& c = *conns[i];
        const short re = fds[i + 2].revents;
        if ((re & (POLLERR | POLLNVAL)) != 0) {
          c.dead = true;
          continue;
        }
        if ((re & (POLLIN | POLLHUP)) != 0 && !c.closing) receive(c);
        // A hang-up with a full buffer (or one no longer read) cannot be read to EOF: do not
        // spin on it.
        if ((re & POLLHUP) != 0 && (c.closing || c.in.size() >= store_engine::in_cap(c)))
          c.dead = true;
        if (!c.dead && (re & POLLOUT) != 0) flush(c);
      }
      if ((fds[1].revents & POLLIN) != 0) accept_all();
      engine_.step(store_clock::now());
      for (store_connection* c : engine_.take_replied())
        if (!c->dead) flush(*c);
      for (const auto& c : engine_.connections())
        if (!c->dead && c->sent < c->out.size()) flush(*c);
      engine_.sweep();
    }
  }

  [[nodiscard]] int next_timeout_ms(store_clock::time_point now) const {
    auto next = engine_.next_deadline();
    if (now < accept_paused_until_) next = std::min(next, accept_paused_until_);
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
      (void)engine_.add(std::move(fd));
    }
  }

  static void receive(store_connection& c) {
    // Reads what has arrived (at most 1 MiB per pass, for fairness), never past what the
    // connection may buffer (store_engine::in_cap: small until it has authenticated).
    constexpr std::size_t chunk = std::size_t{256} << 10;
    const std::size_t cap = store_engine::in_cap(c);
    for (std::size_t total = 0; total < (std::size_t{1} << 20) && c.in.size() < cap;) {
      const std::size_t old = c.in.size();
      const std::size_t want = std::min(chunk, cap - old);
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

  /// Sends what `c` has pending; a closing connection is closed once all of it is sent.
  static void flush(store_connection& c) {
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
    if (c.out.capacity() > store_engine::out_soft_limit) c.out.shrink_to_fit();
    if (c.closing) {
      // Closing with unread input would reset the connection, and a reset may destroy the
      // reply the client has not read yet: end the stream, discard what has arrived, close.
      (void)::shutdown(c.fd.get(), SHUT_WR);
      std::byte scratch[4096];
      for (int i = 0; i < 256; ++i) {
        const ssize_t n = ::recv(c.fd.get(), scratch, sizeof scratch, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EINTR)) break;
      }
      c.dead = true;
    }
  }

  unique_fd listener_;
  unique_fd wake_;
  store_engine engine_;
  store_clock::time_point accept_paused_until_{};
  std::thread thread_;
};

}  // namespace tutti::inline v0::detail

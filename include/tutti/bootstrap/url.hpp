#pragma once
/// \file
/// Init URLs (torch.distributed's init_method): parse_init_url, make_store and env_store.

#include <unistd.h>

#include <cctype>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <tutti/bootstrap/file_store.hpp>
#include <tutti/bootstrap/store.hpp>
#include <tutti/bootstrap/tcp_store.hpp>
#if defined(TUTTI_HAVE_GLOO)
#include <tutti/bootstrap/redis_store.hpp>
#endif
#include <tutti/core/error.hpp>
#include <tutti/core/options.hpp>

namespace tutti::inline v0::bootstrap {

/// A parsed init URL. `scheme` is lower case; `port` is -1 where the scheme has none;
/// `path` (file://) and the query values are percent-decoded.
struct init_url {
  std::string scheme;
  std::string host;
  int port = -1;
  std::string path;
  std::map<std::string, std::string> query;
};

}  // namespace tutti::inline v0::bootstrap

namespace tutti::inline v0::detail {

[[noreturn]] inline void url_fail(std::string_view url, const std::string& why) {
  store_fail(errc::invalid_argument, "invalid init URL '" + std::string(url) + "': " + why);
}

/// A TCP port, 1 .. 65535, or -1 when `s` is not one.
[[nodiscard]] inline int url_port(std::string_view s) noexcept {
  int port = -1;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), port);
  if (s.empty() || s.front() == '-' || ec != std::errc{} || end != s.data() + s.size() ||
      port < 1 || port > 65535)
    return -1;
  return port;
}

[[nodiscard]] inline std::string url_decode(std::string_view url, std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    unsigned v = 0;
    const char* first = s.data() + i + 1;
    if (s.size() - i < 3 || std::from_chars(first, first + 2, v, 16).ptr != first + 2)
      url_fail(url, "bad percent escape");
    out += static_cast<char>(v);
    i += 2;
  }
  return out;
}

/// host:port of a tcp:// or redis:// URL (the part after "scheme://", query removed).
inline void url_host_port(std::string_view url, std::string_view scheme, std::string_view rest,
                          bootstrap::init_url& out) {
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  const std::string form = " (expected " + std::string(scheme) + "://host:port)";
  std::string_view host;
  std::string_view port;
  if (!rest.empty() && rest.front() == '[') {  // [IPv6]:port
    const auto close = rest.find(']');
    if (close == std::string_view::npos) url_fail(url, "unterminated '[' in host" + form);
    host = rest.substr(1, close - 1);
    rest.remove_prefix(close + 1);
    if (rest.empty()) url_fail(url, "port missing" + form);
    if (rest.front() != ':') url_fail(url, "unexpected text after the host" + form);
    port = rest.substr(1);
  } else {
    const auto colon = rest.rfind(':');
    if (colon == std::string_view::npos) url_fail(url, "port missing" + form);
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
    if (host.find(':') != std::string_view::npos)
      url_fail(url, "write an IPv6 host in brackets" + form);
  }
  if (host.empty()) url_fail(url, "empty host" + form);
  if (host.find_first_of("/@") != std::string_view::npos)
    url_fail(url, "unexpected '/' or '@' in the host" + form);
  if (port.empty()) url_fail(url, "port missing" + form);
  out.host = std::string(host);
  out.port = url_port(port);
  if (out.port < 0)
    url_fail(url, "port '" + std::string(port) + "' is not a number in [1, 65535]" + form);
}

/// MASTER_ADDR and MASTER_PORT, checked.
[[nodiscard]] inline std::pair<std::string, int> url_master_address() {
  std::string addr = env_string("MASTER_ADDR");
  if (addr.empty())
    store_fail(errc::invalid_argument,
               "env:// needs MASTER_ADDR (the host of rank 0) in the environment; it is unset");
  const std::string port_text = env_string("MASTER_PORT");
  if (port_text.empty())
    store_fail(errc::invalid_argument,
               "env:// needs MASTER_PORT (the store's port on rank 0) in the environment; it is "
               "unset");
  const int port = url_port(port_text);
  if (port < 0)
    store_fail(errc::invalid_argument,
               "MASTER_PORT='" + port_text + "' is not a port number in [1, 65535]");
  return {std::move(addr), port};
}

}  // namespace tutti::inline v0::detail

namespace tutti::inline v0::bootstrap {

/// Parses an init URL:
///   env://                      MASTER_ADDR / MASTER_PORT from the environment
///   tcp://host:port[?k=v&...]   a tcp_store (host may be [IPv6] literal; parse only)
///   file:///abs/path[?k=v&...]  a file_store on that path
///   redis://host:port[?k=v&...] (make_store: with the tutti::gloo component)
/// Raises errc::invalid_argument, with the URL in the message, for no scheme, an unknown
/// scheme, a missing, non-numeric or out-of-range port, an empty host, a relative file path,
/// a host or path given to env://, a bad percent escape or an empty query key.
[[nodiscard]] inline init_url parse_init_url(std::string_view url) {
  init_url out;
  const auto sep = url.find("://");
  if (sep == std::string_view::npos || sep == 0)
    detail::url_fail(url, "no scheme (expected env://, tcp://, file:// or redis://)");
  for (const char ch : url.substr(0, sep))
    out.scheme += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  std::string_view rest = url.substr(sep + 3);
  if (const auto q = rest.find('?'); q != std::string_view::npos) {
    std::string_view query = rest.substr(q + 1);
    rest = rest.substr(0, q);
    while (!query.empty()) {
      const auto amp = query.find('&');
      const std::string_view item = query.substr(0, amp);
      query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
      if (item.empty()) continue;
      const auto eq = item.find('=');
      std::string key = detail::url_decode(url, item.substr(0, eq));
      if (key.empty()) detail::url_fail(url, "empty query key");
      out.query[std::move(key)] = eq == std::string_view::npos
                                      ? std::string{}
                                      : detail::url_decode(url, item.substr(eq + 1));
    }
  }
  if (out.scheme == "env") {
    if (!rest.empty() && rest != "/") detail::url_fail(url, "env:// takes no host or path");
  } else if (out.scheme == "tcp" || out.scheme == "redis") {
    detail::url_host_port(url, out.scheme, rest, out);
  } else if (out.scheme == "file") {
    if (rest.starts_with("localhost/")) rest.remove_prefix(9);
    if (rest.empty() || rest.front() != '/')
      detail::url_fail(url, "the file path must be absolute (expected file:///abs/path)");
    out.path = detail::url_decode(url, rest);
  } else {
    detail::url_fail(
        url, "unknown scheme '" + out.scheme + "' (expected env://, tcp://, file:// or redis://)");
  }
  return out;
}

/// The process-wide store for MASTER_ADDR:MASTER_PORT (raises errc::invalid_argument naming a
/// missing or bad variable). Created by the first call and returned again by later ones, so
/// every communicator of a process shares one connection, and rank 0 one server that lives
/// until the process exits. In the process of rank 0, every caller gets rank 0's serving
/// object (ranks may be threads). `timeout` applies when the store is created (see
/// tcp_store), and so does `token` (TUTTI_STORE_TOKEN by default; see tcp_store); later calls
/// reuse the store unchanged. Thread-safe. A forked child gets its own
/// connection on its first call (it never uses the parent's).
[[nodiscard]] inline std::shared_ptr<store> env_store(
    int rank, std::chrono::milliseconds timeout = default_timeout(),
    const std::string& token = default_store_token()) {
  struct registry {
    std::mutex mu;
    pid_t pid = ::getpid();
    std::map<std::string, std::shared_ptr<tcp_store>> servers;
    std::map<std::string, std::shared_ptr<tcp_store>> clients;
    std::vector<std::shared_ptr<tcp_store>> inherited;
  };
  // Never destroyed: rank 0 serves until the process exits, whatever static destructors or
  // still-running threads do at exit; the system closes the sockets.
  static registry& reg = *new registry;
  auto [addr, port] = detail::url_master_address();
  const std::string key = addr + ":" + std::to_string(port);
  std::unique_lock lock(reg.mu);
  if (reg.pid != ::getpid()) {
    // A forked child: the parent's stores share the parent's sockets (and its server thread
    // does not exist here). Set them aside, unused and never destroyed; start afresh.
    for (auto* m : {&reg.servers, &reg.clients})
      for (auto& entry : *m) reg.inherited.push_back(std::move(entry.second));
    reg.servers.clear();
    reg.clients.clear();
    reg.pid = ::getpid();
  }
  if (const auto it = reg.servers.find(key); it != reg.servers.end()) return it->second;
  if (rank == 0) {  // binding does not wait for anyone: fine to hold the lock
    auto s = std::make_shared<tcp_store>(addr, port, true, timeout, token);
    reg.servers.emplace(key, s);
    return s;
  }
  if (const auto it = reg.clients.find(key); it != reg.clients.end()) return it->second;
  lock.unlock();  // connecting may wait for rank 0, possibly a thread of this process
  auto c = std::make_shared<tcp_store>(addr, port, false, timeout, token);
  lock.lock();
  return reg.clients.try_emplace(key, std::move(c)).first->second;
}

/// A store for `url` as rank `rank` (0 serves a tcp:// store):
///   tcp://host:port  -> tcp_store(host, port, rank == 0, timeout, token)
///   file:///path     -> file_store(path, timeout)
///   env://           -> env_store(rank, timeout, token): the process-wide MASTER_ADDR:MASTER_PORT
///                       store
///   redis://         -> redis_store (with the tutti::gloo component; else errc::invalid_argument)
[[nodiscard]] inline std::shared_ptr<store> make_store(
    const init_url& url, int rank, std::chrono::milliseconds timeout = default_timeout(),
    const std::string& token = default_store_token()) {
  if (rank < 0)
    detail::store_fail(errc::invalid_argument, "make_store: rank " + std::to_string(rank) + " < 0");
  if (url.scheme == "tcp")
    return std::make_shared<tcp_store>(url.host, url.port, rank == 0, timeout, token);
  if (url.scheme == "file") return std::make_shared<file_store>(url.path, timeout);
  if (url.scheme == "env") return env_store(rank, timeout, token);
  if (url.scheme == "redis") {
#if defined(TUTTI_HAVE_GLOO)
    return std::make_shared<redis_store>(url.host, url.port, timeout);
#else
    detail::store_fail(errc::invalid_argument,
                       "make_store: redis:// needs the tutti::gloo component (CMake: "
                       "TUTTI_WITH_GLOO=ON, link tutti::gloo)");
#endif
  }
  detail::store_fail(errc::invalid_argument, "make_store: unknown scheme '" + url.scheme + "'");
}

}  // namespace tutti::inline v0::bootstrap

#pragma once
/// \file
/// How the ranks of one transport world find each other: the one rendezvous behind every
/// transport's `from_env` and `from_url` (shm, gloo, nccl). It picks the store, names the key the
/// world meets under ("tutti/<transport>/<n>": the n-th world of that transport this process
/// joins, so every rank joins in one order), and says what to clean up once every rank joined.
///
/// from the launcher's environment (rendezvous_from_env):
///   - MASTER_ADDR and MASTER_PORT set and served by torchrun's agent
///     (TORCHELASTIC_USE_AGENT_STORE=True): a torch_tcp_store client of the agent's store, keys
///     under agent_store_prefix(w) (the restart count in it, so a restarted group never reads an
///     earlier attempt's keys);
///   - MASTER_ADDR and MASTER_PORT set otherwise: the process-wide tcp store there (rank 0
///     serves it);
///   - else, when every rank is on this host: a file store private to this user,
///     `<private_dir()>/<local_job_key()>.<transport>.<n>`, which rank 0 removes once every
///     rank has joined;
///   - else errc::invalid_argument with the transport's own message.
/// from an init URL (rendezvous_from_url): the store the URL names (bootstrap/url.hpp).

#include <unistd.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "tutti/bootstrap/env.hpp"
#include "tutti/bootstrap/file_store.hpp"
#include "tutti/bootstrap/store.hpp"
#include "tutti/bootstrap/torch_store.hpp"
#include "tutti/bootstrap/url.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/options.hpp"

namespace tutti::inline v0::bootstrap {

/// Where one rank of a new world meets the others, and what it leaves behind.
struct rendezvous {
  std::shared_ptr<store> st;  ///< where the ranks exchange what they need to connect
  std::string key;            ///< "tutti/<transport>/<n>": the prefix of every key they use
  int rank = 0;
  int size = 1;
  int local_rank = 0;  ///< the launcher's local rank (0 without a launcher): picks a GPU
  /// The host and port the store lives at (MASTER_ADDR:MASTER_PORT, the URL's host:port), which
  /// a transport may use to pick the local address that reaches the other ranks; "" and -1
  /// where the ranks meet through a file.
  std::string route_host;
  int route_port = -1;
  /// The private file store's path when from_env chose one (on every rank), else "".
  std::string file;

  /// What this rank removes once every rank has joined: `file` on rank 0, "" elsewhere (the
  /// file is private to the job on this host and nobody reads it again).
  [[nodiscard]] std::string file_to_remove() const { return rank == 0 ? file : std::string{}; }
  /// Removes file_to_remove(), if any. Call once every rank has read the store for the last
  /// time (their join completed).
  void remove_file() const noexcept {
    if (const std::string f = file_to_remove(); !f.empty()) (void)::unlink(f.c_str());
  }
};

/// "tutti/<transport>/<n>": the n-th world of `transport` this process joins, n from 0.
/// Thread-safe; each transport name counts on its own.
[[nodiscard]] inline std::string rendezvous_key(std::string_view transport) {
  static std::mutex mu;
  static std::map<std::string, unsigned, std::less<>> generations;
  std::lock_guard lock(mu);
  auto it = generations.find(transport);
  if (it == generations.end()) it = generations.emplace(std::string(transport), 0u).first;
  return "tutti/" + it->first + "/" + std::to_string(it->second++);
}

/// The launcher's local rank (as world_from_env reads it), 0 where there is no launcher or its
/// variables cannot be read: from_url names the world itself and needs no launcher.
[[nodiscard]] inline int launcher_local_rank() {
  try {
    return world_from_env().local_rank;
  } catch (const error&) {
    return 0;
  }
}

/// "tutti/attempt_<w.restart_count>/": where tutti's keys live in torchrun's agent store.
/// torch's own workers use "/worker/attempt_<n>/" (a PrefixStore; its client adds a leading
/// "/"), so the two never meet; tutti's ranks only need to agree among themselves.
[[nodiscard]] inline std::string agent_store_prefix(const world_info& w) {
  return "tutti/attempt_" + std::to_string(w.restart_count) + "/";
}

/// The rendezvous of `transport` for the world `w` (from world_from_env()): see the file
/// comment. `across_hosts` is the message of the errc::invalid_argument raised when the ranks
/// span hosts and no store at MASTER_ADDR:MASTER_PORT can be used.
[[nodiscard]] inline rendezvous rendezvous_from_env(const world_info& w, std::string_view transport,
                                                    const options& opts,
                                                    const std::string& across_hosts) {
  rendezvous r;
  r.key = rendezvous_key(transport);
  r.rank = w.rank;
  r.size = w.size;
  r.local_rank = w.local_rank;
  if (!w.master_addr.empty() && w.master_port > 0) {
    // The agent's store dies with the agent, at the end of the job: the keys left in it need
    // no cleanup, and a restart's new prefix keeps them out of the next attempt's way.
    if (w.agent_store)
      r.st = std::make_shared<torch_tcp_store>(w.master_addr, w.master_port, agent_store_prefix(w),
                                               opts.timeout);
    else
      r.st = env_store(w.rank, opts.timeout, opts.store_token);
    r.route_host = w.master_addr;
    r.route_port = w.master_port;
    return r;
  }
  if (w.local_size != w.size) throw error(errc::invalid_argument, "", 0, w.rank, -1, across_hosts);
  const std::string prefix = "tutti/" + std::string(transport) + "/";
  r.file = private_dir() + "/" + local_job_key() + "." + std::string(transport) + "." +
           r.key.substr(prefix.size());
  r.st = std::make_shared<file_store>(r.file, opts.timeout);
  return r;
}

/// The rendezvous of `transport` through the store `url` names, as rank `rank` of `size`
/// (rank 0 serves a tcp:// store). Route: the URL's host and port; for env://, MASTER_ADDR and
/// MASTER_PORT. local_rank: launcher_local_rank().
[[nodiscard]] inline rendezvous rendezvous_from_url(const init_url& url, int rank, int size,
                                                    std::string_view transport,
                                                    const options& opts) {
  rendezvous r;
  r.st = make_store(url, rank, opts.timeout, opts.store_token);
  r.key = rendezvous_key(transport);
  r.rank = rank;
  r.size = size;
  r.local_rank = launcher_local_rank();
  if (url.scheme == "env") {
    std::tie(r.route_host, r.route_port) = detail::url_master_address();
  } else {
    r.route_host = url.host;
    r.route_port = url.port;
  }
  return r;
}

/// As above, parsing `url` first (errc::invalid_argument where it is malformed).
[[nodiscard]] inline rendezvous rendezvous_from_url(std::string_view url, int rank, int size,
                                                    std::string_view transport,
                                                    const options& opts) {
  return rendezvous_from_url(parse_init_url(url), rank, size, transport, opts);
}

}  // namespace tutti::inline v0::bootstrap

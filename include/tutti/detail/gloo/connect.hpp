#pragma once
/// \file
/// Joining a tutti::gloo world, step by step: choose the address the TCP device binds, connect
/// every pair within one deadline (Gloo alone waits up to a timeout per pair), post the
/// sentinels that tell a closed connection, count the ranks per machine, probe single copies,
/// and set the watch the waker runs while Gloo runs a collective of its own.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/attr.h>
#include <gloo/transport/tcp/device.h>

#include "tutti/bootstrap/store.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/options.hpp"
#include "tutti/detail/cma.hpp"
#include "tutti/detail/gloo/failure.hpp"
#include "tutti/detail/gloo/link_probe.hpp"
#include "tutti/detail/gloo/liveness.hpp"
#include "tutti/detail/gloo/objects.hpp"
#include "tutti/detail/gloo/single_copy.hpp"
#include "tutti/detail/gloo/state.hpp"
#include "tutti/detail/gloo/waker.hpp"
#include "tutti/detail/gloo_support.hpp"
#include "tutti/detail/host.hpp"
#include "tutti/detail/proc_state.hpp"
#include "tutti/detail/text_fields.hpp"
#include "tutti/detail/wait.hpp"

namespace tutti::inline v0::detail {

/// The TCP device's attributes, and why (for TUTTI_DEBUG=INFO): TUTTI_SOCKET_IFNAME's
/// interface, else the local address that reaches `route_host`, else loopback (every rank is
/// on this host).
struct gloo_device_choice {
  ::gloo::transport::tcp::attr attr;
  std::string why;
};
[[nodiscard]] inline gloo_device_choice gloo_choose_device(int rank, const std::string& route_host,
                                                           int route_port) {
  gloo_device_choice d;
  const std::string iface = env_string("TUTTI_SOCKET_IFNAME");
  if (!iface.empty()) {
    if (!interface_exists(iface))
      throw error(errc::invalid_argument, "", 0, rank, -1,
                  "TUTTI_SOCKET_IFNAME=" + iface + ": no such network interface here");
    d.attr.iface = iface;
    d.why = "TUTTI_SOCKET_IFNAME=" + iface;
  } else if (!route_host.empty()) {
    d.attr.hostname = local_address_towards(route_host, route_port);
    if (d.attr.hostname.empty())
      throw error(errc::invalid_argument, "", 0, rank, -1,
                  "tutti::gloo: no local address reaches " + route_host +
                      " (set TUTTI_SOCKET_IFNAME to the interface to use)");
    d.why = "the address that reaches " + route_host;
  } else {
    d.attr.hostname = "127.0.0.1";
    d.why = "loopback: every rank is on this host";
  }
  return d;
}

/// Gloo's connectFullMesh within one deadline: at the deadline the waker closes the pairs
/// (a connect waiting on one returns) and the store's waits have ended, so a rank whose peers
/// died or never came raises errc::timeout then. Every failure names the rank this one was
/// connecting to, and says so when the store does not answer either.
inline void gloo_connect_full_mesh(gloo_state& st, gloo_device& device, clock::time_point deadline,
                                   std::chrono::milliseconds timeout) {
  gloo_store_adapter adapter(*st.store, st.prefix, deadline);
  std::atomic<bool> closed{false};
  st.waker.set_watch([&] {
    if (!closed.load() && adapter.published() && clock::now() >= deadline) {
      closed.store(true);
      device.close_pairs();
    }
  });
  auto failed = [&](errc code, const std::string& what) {
    const int peer = adapter.connecting();
    std::string text = "tutti::gloo: rank " + std::to_string(st.rank) +
                       (code == errc::timeout ? " could not connect to every rank within " +
                                                    std::to_string(timeout.count()) + " ms"
                                              : std::string(" could not connect the world"));
    if (peer >= 0) text += " (it was connecting to rank " + std::to_string(peer) + ")";
    if (!what.empty()) text += ": " + what;
    return error(code, "", 0, st.rank, peer, text + gloo_store_silence(st));
  };
  {
    const gloo_waker::scope watching(st.waker);
    try {
      st.ctx->connectFullMesh(adapter, st.device);
    } catch (const error& e) {
      if (e.kind() == errc::timeout) throw failed(errc::timeout, e.what());
      throw;  // the store's own error (it names the store)
    } catch (const std::exception& e) {
      const bool late = closed.load() || clock::now() >= deadline;
      throw failed(late ? errc::timeout : errc::transport_failure, e.what());
    }
  }
  st.waker.set_watch({});
  if (closed.load()) throw failed(errc::timeout, "");
}

/// Posts each peer's sentinel receive (gloo_state::sentinels), exempt from the world's abort.
inline void gloo_post_sentinels(gloo_state& st) {
  st.sentinels.resize(static_cast<std::size_t>(st.size));
  for (int q = 0; q < st.size; ++q) {
    if (q == st.rank) continue;
    auto& b = st.sentinels[static_cast<std::size_t>(q)];
    b = st.ctx->createUnboundBuffer(&st.dummy, 0);
    static_cast<gloo_guarded_buffer&>(*b).exempt();
    try {
      b->recv(q, gloo_sentinel_slot, 0, 0);
    } catch (const std::exception& e) {
      throw error(errc::peer_lost, "", 0, st.rank, q,
                  "tutti::gloo: rank " + std::to_string(q) +
                      " closed its connection while the world was forming: " + e.what() +
                      gloo_store_silence(st));
    }
  }
}

/// Every rank publishes its machine's boot id and CPU count, its process ("<pid>@<PID
/// namespace>") and its host identity ("<boot id> <cpus> <process> <host>", detail/host.hpp);
/// every rank reads them all, so all find the same ranks per CPU on the most crowded machine
/// (the machine's online CPUs, which every process on it sees alike: a process's own affinity
/// may differ between ranks) and the same host of every rank (gloo_state::host_ids). Counts
/// the ranks on this machine, and notes the pid of every peer on it in this PID namespace
/// (gloo_state::peer_pid: whether a peer's process has ended, without CMA).
inline void gloo_count_host_ranks(gloo_state& st, clock::time_point deadline) {
  st.host_ids.assign(static_cast<std::size_t>(st.size), host_identity());
  if (st.size == 1) {
    st.hosts = map_identities(st.host_ids, st.rank);
    return;
  }
  const std::string boot = boot_id();
  const unsigned hw = std::thread::hardware_concurrency();
  const auto key = [&](int q) { return st.prefix + "host/" + std::to_string(q); };
  const unsigned long long pidns = pid_namespace();
  const std::string ns = pidns != 0 ? std::to_string(pidns) : "?";
  const std::string me = std::to_string(::getpid()) + "@" + ns;
  st.store->set_string(
      key(st.rank), (boot.empty() || hw == 0 ? "? 0" : boot + " " + std::to_string(hw)) + " " + me +
                        " " + host_identity());
  st.peer_pid.assign(static_cast<std::size_t>(st.size), 0);
  std::map<std::string, std::pair<int, unsigned>, std::less<>> hosts;  // ranks, CPUs
  for (int q = 0; q < st.size; ++q) {
    const std::string v = gloo_peer_value(*st.store, key(q), st.rank, q, deadline, "host");
    std::string_view rest = v;
    const auto id = next_field(rest, false);
    const auto cpus = next_integer<unsigned>(rest, false);
    if (const auto proc = next_field(rest, false);
        q != st.rank && proc && ns != "?" && id && *id == boot && !boot.empty()) {
      const auto at = proc->find('@');
      if (at != std::string_view::npos && proc->substr(at + 1) == ns)
        if (const auto pid = parse_integer<int>(proc->substr(0, at)); pid && *pid > 0)
          st.peer_pid[static_cast<std::size_t>(q)] = static_cast<pid_t>(*pid);
    }
    // The rest is the host, whatever it holds (TUTTI_HOST may have spaces); unreadable: a host
    // of its own.
    std::string& host = st.host_ids[static_cast<std::size_t>(q)];
    if (cpus && !rest.empty()) {
      host = rest;
    } else {
      host = "?";
      host += std::to_string(q);
    }
    if (!id || id->empty() || *id == "?" || !cpus || *cpus == 0) continue;  // unknown: not counted
    auto& h = hosts[std::string(*id)];
    ++h.first;
    h.second = std::max(h.second, *cpus);
  }
  for (const auto& [id, h] : hosts) {
    st.ranks_per_cpu = std::max(st.ranks_per_cpu, double(h.first) / h.second);
    if (id == boot) st.host_ranks = h.first;
  }
  st.hosts = map_identities(st.host_ids, st.rank);
  st.oversubscribed = oversubscribed(st.host_ranks);
  if (debug_info())
    std::fprintf(stderr,
                 "tutti[gloo] rank %d/%d: %d ranks on this machine (%u CPUs here); %.2f ranks "
                 "per CPU on the most crowded one\n",
                 st.rank, st.size, st.host_ranks, usable_cpus(), st.ranks_per_cpu);
}

/// Joins the world of `size` ranks whose rendezvous runs through `store` under `key`, on a TCP
/// device with attributes `attr` (`why` says how they were chosen, for TUTTI_DEBUG=INFO). The
/// link between hosts is `inherited` (a split's child: its parent's) or else read from the
/// environment and measured where unset (gloo_probe_link).
[[nodiscard]] inline std::shared_ptr<gloo_state> gloo_connect(
    std::shared_ptr<bootstrap::store> store, const std::string& key, int rank, int size,
    const gloo_device_choice& choice, const options& opts,
    const link_settings* inherited = nullptr) {
  if (size < 1 || rank < 0 || rank >= size)
    throw error(errc::invalid_argument, "", 0, rank, -1,
                "tutti::gloo: rank " + std::to_string(rank) + " is not in a world of " +
                    std::to_string(size));
  auto s = std::make_shared<gloo_state>();
  s->store = std::move(store);
  s->prefix = key + "/";
  s->rank = rank;
  s->size = size;
  s->attr = choice.attr;
  s->link = inherited != nullptr ? *inherited : link_settings::from_env(rank);
  try {
    const sigpipe_guard no_sigpipe;  // also for Gloo's loop thread, started here
    const auto deadline = clock::now() + opts.timeout;
    auto device = [&] {
      const batch_scheduling_guard batch;  // Gloo's loop thread under SCHED_BATCH
      return std::make_shared<gloo_device>(::gloo::transport::tcp::CreateDevice(choice.attr),
                                           s->buffers, opts.timeout);
    }();
    s->device = device;
    s->address = s->device->str();
    if (debug_info())
      std::fprintf(stderr, "tutti[gloo] rank %d/%d: TCP device %s (%s)\n", rank, size,
                   s->address.c_str(), choice.why.c_str());
    s->ctx = std::make_shared<::gloo::rendezvous::Context>(rank, size);
    s->ctx->setTimeout(opts.timeout);
    gloo_connect_full_mesh(*s, *device, deadline, opts.timeout);
    gloo_post_sentinels(*s);
    gloo_count_host_ranks(*s, deadline);
    gloo_setup_single_copy(*s, deadline);
    if (inherited == nullptr) gloo_probe_link(*s, deadline);
    s->waker.set_watch([st = s.get()] { gloo_native_watch(*st); });
  } catch (const error&) {
    throw;
  } catch (const std::exception& e) {
    throw error(errc::transport_failure, "", 0, rank, -1,
                std::string("tutti::gloo: could not connect the world: ") + e.what());
  }
  return s;
}

/// Joins the world of `size` ranks whose rendezvous runs through `store` under `key`.
/// `route_host` (may be empty) picks the local address when TUTTI_SOCKET_IFNAME is unset.
[[nodiscard]] inline std::shared_ptr<gloo_state> gloo_connect(
    std::shared_ptr<bootstrap::store> store, const std::string& key, int rank, int size,
    const std::string& route_host, int route_port, const options& opts) {
  return gloo_connect(std::move(store), key, rank, size,
                      gloo_choose_device(rank, route_host, route_port), opts);
}

}  // namespace tutti::inline v0::detail

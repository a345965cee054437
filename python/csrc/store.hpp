#pragma once
/// \file
/// The store torch hands a backend (a c10d::Store: TCPStore, FileStore or HashStore behind the
/// group's PrefixStore) as the tutti::bootstrap::store the transports meet through, and what the
/// ranks of a group tell each other through it before any transport exists: which host each
/// runs on.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <tutti/bootstrap/store.hpp>
#include <tutti/core/error.hpp>
#include <tutti/detail/host.hpp>

namespace tutti_torch {

/// tutti's store interface over torch's. torch's stores are safe to call from several threads
/// (the transports' liveness threads use the store beside the ranks' own calls).
class c10d_store final : public tutti::bootstrap::store {
 public:
  explicit c10d_store(c10::intrusive_ptr<c10d::Store> s) : s_(std::move(s)) {}

  void set(std::string_view key, std::span<const std::byte> value) override {
    const auto* p = reinterpret_cast<const std::uint8_t*>(value.data());
    guarded("set", key,
            [&] { s_->set(std::string(key), std::vector<std::uint8_t>(p, p + value.size())); });
  }

  [[nodiscard]] std::vector<std::byte> get(std::string_view key,
                                           std::chrono::milliseconds timeout) override {
    std::vector<std::byte> out;
    guarded("get", key, [&] {
      const std::string k(key);
      await({k}, timeout);
      const std::vector<std::uint8_t> v = s_->get(k);
      const auto* b = reinterpret_cast<const std::byte*>(v.data());
      out.assign(b, b + v.size());
    });
    return out;
  }

  std::int64_t add(std::string_view key, std::int64_t delta) override {
    std::int64_t v = 0;
    guarded("add", key, [&] { v = s_->add(std::string(key), delta); });
    return v;
  }

  void wait(std::span<const std::string> keys, std::chrono::milliseconds timeout) override {
    guarded("wait", keys.empty() ? std::string_view{} : std::string_view(keys.front()),
            [&] { await(std::vector<std::string>(keys.begin(), keys.end()), timeout); });
  }

 private:
  // Returns once every key exists, within `timeout`. A timeout of 0 or less checks once, with
  // check(): torch reads a wait's 0 as "no timeout", and FileStore's wait takes a second to
  // give up even on a 1 ms timeout, which would make tutti::gloo name a dead rank late.
  void await(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
    if (timeout > std::chrono::milliseconds::zero())
      s_->wait(keys, timeout);
    else if (!s_->check(keys))
      C10_THROW_ERROR(DistStoreError, "Wait timeout (checked once)");
  }

  // torch's store errors become tutti::error, so the transports read them as they read their
  // own store's: a passed deadline (FileStore's "Wait timeout", TCPStore's "Socket Timeout" and
  // "timed out") as errc::timeout — for a wait of 0 that means "not there yet" —, anything else
  // as errc::transport_failure.
  template <class F>
  static void guarded(const char* what, std::string_view key, F&& f) {
    try {
      f();
    } catch (const c10::Error& e) {
      const std::string msg = e.what_without_backtrace();
      const bool timed_out =
          msg.find("imeout") != std::string::npos || msg.find("timed out") != std::string::npos;
      throw tutti::error(
          timed_out ? tutti::errc::timeout : tutti::errc::transport_failure, "", 0, -1, -1,
          std::string("torch store ") + what + " " + tutti::detail::store_quote(key) + ": " + msg);
    }
  }

  c10::intrusive_ptr<c10d::Store> s_;
};

/// What tells two processes' hosts apart (host name, boot id, network namespace): processes
/// in different network namespaces count as different hosts, so `tutti::gloo` serves them; on
/// one host they share /dev/shm and `tutti::shm` serves them.
using tutti::detail::host_identity;

}  // namespace tutti_torch

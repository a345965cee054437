#pragma once
/// \file
/// tutti::gloo's wrappers around Gloo's objects: tutti's store as Gloo's rendezvous store, and
/// Gloo's TCP device, transport context and unbound buffers wrapped so that an abort of the
/// world fails every buffer (and the bootstrap can close the pairs at its deadline).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gloo/common/error.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/unbound_buffer.h>

#include "tutti/bootstrap/store.hpp"
#include "tutti/core/error.hpp"
#include "tutti/detail/wait.hpp"

namespace tutti::inline v0::detail {

/// The time left until `deadline` as Gloo takes a timeout: whole milliseconds, at least 1.
[[nodiscard]] inline std::chrono::milliseconds gloo_left(clock::time_point deadline) {
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now());
  return std::max(ms, std::chrono::milliseconds(1));
}

/// `peer`'s value under `key`, waited for until `deadline`, while the world forms. A wait that
/// times out raises errc::timeout naming `peer`, the rank that never published it (it hangs,
/// or died): the store's own error names only the key.
[[nodiscard]] inline std::string gloo_peer_value(bootstrap::store& store, const std::string& key,
                                                 int rank, int peer, clock::time_point deadline,
                                                 std::string_view what) {
  try {
    return store.get_string(key, gloo_left(deadline));
  } catch (const error& e) {
    if (e.kind() != errc::timeout) throw;
    throw error(errc::timeout, "", 0, rank, peer,
                "tutti::gloo: rank " + std::to_string(rank) + " waited in vain for rank " +
                    std::to_string(peer) + "'s " + std::string(what) +
                    " while the world was forming: " + e.what());
  }
}

/// tutti's store as Gloo's rendezvous::Store, every key under `prefix`, every wait ending by
/// the bootstrap's deadline. Notes what Gloo's connectFullMesh has reached: its addresses
/// published (every pair exists), and the rank whose address it fetched last (the pair it
/// connects next).
class gloo_store_adapter final : public ::gloo::rendezvous::Store {
 public:
  gloo_store_adapter(bootstrap::store& s, std::string prefix, clock::time_point deadline)
      : s_(s), prefix_(std::move(prefix)), deadline_(deadline) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    s_.set(prefix_ + key, std::as_bytes(std::span<const char>(data.data(), data.size())));
    if (rank_of(key) >= 0) published_.store(true, std::memory_order_release);
  }
  std::vector<char> get(const std::string& key) override {
    note(key);
    const std::vector<std::byte> v = s_.get(prefix_ + key, left());
    const auto* p = reinterpret_cast<const char*>(v.data());
    return {p, p + v.size()};
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, left()); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& k : keys) {
      note(k);
      full.push_back(prefix_ + k);
    }
    s_.wait(full, std::min(timeout, left()));
  }

  /// Whether this rank has published its addresses (Gloo has created every pair by then).
  [[nodiscard]] bool published() const noexcept {
    return published_.load(std::memory_order_acquire);
  }
  /// The rank whose address Gloo waited for or fetched last, -1 before any.
  [[nodiscard]] int connecting() const noexcept {
    return connecting_.load(std::memory_order_relaxed);
  }

 private:
  /// q for Gloo's key of rank q's addresses ("q"), else -1 (e.g. its hostname key "rank_q").
  [[nodiscard]] static int rank_of(const std::string& key) noexcept {
    if (key.empty() || key.size() > 6 || key.find_first_not_of("0123456789") != std::string::npos)
      return -1;
    return std::stoi(key);
  }
  void note(const std::string& key) noexcept {
    if (const int q = rank_of(key); q >= 0) connecting_.store(q, std::memory_order_relaxed);
  }
  [[nodiscard]] std::chrono::milliseconds left() const {
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(deadline_ - clock::now());
    return std::max(ms, std::chrono::milliseconds(1));
  }

  bootstrap::store& s_;
  std::string prefix_;
  clock::time_point deadline_;
  std::atomic<bool> published_{false};
  std::atomic<int> connecting_{-1};
};

/// Every live Gloo buffer of one world, so that an abort can fail them all. When a connection
/// fails, Gloo's pair wakes the waits of its pending receives and of sends the peer has not
/// asked for yet, but not of a send already queued on the socket (Pair::signalException walks
/// its write queue for bound buffers only): a rank inside one of Gloo's own collectives whose
/// peer died mid-transfer waited in waitSend until the deadline (tests/faults finding 11).
/// So every buffer Gloo creates in a tutti world is a gloo_guarded_buffer around Gloo's own
/// (gloo_guarded_context hands them out), listed here; an abort wakes each one's waits, which
/// then throw. A buffer created afterwards starts failed. Sentinels are exempt: they tell
/// which peer's connection closed.
class gloo_guarded_buffer;

/// Destroys one of Gloo's own buffers. Gloo's destructor waits until its loop thread lets go of
/// the buffer (ShareableNonOwningPtr spins on a shared_ptr count inside uninstrumented libgloo),
/// which ThreadSanitizer cannot see; tests/tsan.supp names this function so that only that
/// pair is suppressed. Out of line so that it appears in every stack that frees such a buffer.
[[gnu::noinline]] inline void gloo_destroy_buffer(
    std::unique_ptr<::gloo::transport::UnboundBuffer>& b) noexcept {
  b.reset();
}

struct gloo_buffers {
  std::mutex mu;
  std::vector<gloo_guarded_buffer*> live;  // each knows its index
  std::exception_ptr failed;               // set once, under mu, before any buffer sees it
  void add(gloo_guarded_buffer* b) noexcept;
  void remove(gloo_guarded_buffer* b) noexcept;
  /// Fails every live buffer (and every later one) with an IoException saying `why` the world
  /// was aborted; their waits return and throw it.
  void fail(std::string_view why) noexcept;
};

class gloo_guarded_buffer final : public ::gloo::transport::UnboundBuffer {
 public:
  gloo_guarded_buffer(std::unique_ptr<::gloo::transport::UnboundBuffer> inner,
                      std::shared_ptr<gloo_buffers> list)
      : UnboundBuffer(inner->ptr, inner->size), inner_(std::move(inner)), list_(std::move(list)) {
    list_->add(this);
  }
  gloo_guarded_buffer(const gloo_guarded_buffer&) = delete;
  gloo_guarded_buffer& operator=(const gloo_guarded_buffer&) = delete;
  ~gloo_guarded_buffer() override {
    list_->remove(this);
    gloo_destroy_buffer(inner_);
  }

  /// Leaves the list: an abort does not fail this buffer.
  void exempt() noexcept { list_->remove(this); }

  bool waitRecv(int* rank, std::chrono::milliseconds timeout) override {
    const bool done = inner_->waitRecv(rank, timeout);
    throw_if_failed();
    return done;
  }
  bool waitSend(int* rank, std::chrono::milliseconds timeout) override {
    const bool done = inner_->waitSend(rank, timeout);
    throw_if_failed();
    return done;
  }
  void abortWaitRecv() override { inner_->abortWaitRecv(); }
  void abortWaitSend() override { inner_->abortWaitSend(); }
  void send(int dst, std::uint64_t slot, std::size_t offset, std::size_t n) override {
    throw_if_failed();
    inner_->send(dst, slot, offset, n);
  }
  void recv(int src, std::uint64_t slot, std::size_t offset, std::size_t n) override {
    throw_if_failed();
    inner_->recv(src, slot, offset, n);
  }
  void recv(std::vector<int> srcs, std::uint64_t slot, std::size_t offset, std::size_t n) override {
    throw_if_failed();
    inner_->recv(std::move(srcs), slot, offset, n);
  }

 private:
  friend struct gloo_buffers;
  void fail() noexcept {  // under the list's mutex
    failed_.store(true, std::memory_order_release);
    inner_->abortWaitSend();
    inner_->abortWaitRecv();
  }
  void throw_if_failed() const {
    if (failed_.load(std::memory_order_acquire)) std::rethrow_exception(list_->failed);
  }

  std::unique_ptr<::gloo::transport::UnboundBuffer> inner_;
  std::shared_ptr<gloo_buffers> list_;
  std::size_t index_ = static_cast<std::size_t>(-1);
  std::atomic<bool> failed_{false};
};

inline void gloo_buffers::add(gloo_guarded_buffer* b) noexcept {
  std::lock_guard lock(mu);
  if (failed) {
    b->fail();
    return;
  }
  try {
    live.push_back(b);
    b->index_ = live.size() - 1;
  } catch (...) {
    b->fail();  // no memory to list it: fail it now rather than miss it later
  }
}

inline void gloo_buffers::remove(gloo_guarded_buffer* b) noexcept {
  std::lock_guard lock(mu);
  if (b->index_ >= live.size() || live[b->index_] != b) return;
  live[b->index_] = live.back();
  live[b->index_]->index_ = b->index_;
  live.pop_back();
  b->index_ = static_cast<std::size_t>(-1);
}

inline void gloo_buffers::fail(std::string_view why) noexcept {
  std::lock_guard lock(mu);
  if (failed) return;
  try {
    failed = std::make_exception_ptr(
        ::gloo::IoException("tutti::gloo: the world was aborted: " + std::string(why)));
  } catch (...) {
    failed = std::current_exception();  // bad_alloc: still an error for every wait
  }
  for (gloo_guarded_buffer* b : live) b->fail();
}

/// Gloo's transport context of a connected world, handing out guarded buffers.
class gloo_guarded_context final : public ::gloo::transport::Context {
 public:
  gloo_guarded_context(std::shared_ptr<::gloo::transport::Context> inner,
                       std::shared_ptr<gloo_buffers> list)
      : Context(inner->rank, inner->size), inner_(std::move(inner)), list_(std::move(list)) {
    setTimeout(inner_->getTimeout());
  }
  std::unique_ptr<::gloo::transport::Pair>& getPair(int peer) override {
    return inner_->getPair(peer);
  }
  std::unique_ptr<::gloo::transport::Pair>& createPair(int peer) override {
    return inner_->createPair(peer);
  }
  std::unique_ptr<::gloo::transport::UnboundBuffer> createUnboundBuffer(void* p,
                                                                        std::size_t n) override {
    return std::make_unique<gloo_guarded_buffer>(inner_->createUnboundBuffer(p, n), list_);
  }

 private:
  std::shared_ptr<::gloo::transport::Context> inner_;
  std::shared_ptr<gloo_buffers> list_;
};

/// Gloo's TCP device, handing out guarded transport contexts (with the world's timeout, which
/// the pairs take when they are created) and keeping the last one, so that the bootstrap can
/// close its pairs at its deadline: Gloo's connectFullMesh connects the pairs one after
/// another, each waiting up to the whole timeout, so a rank whose peers had died waited for
/// up to (size - 1) timeouts (tests/faults finding 7).
class gloo_device final : public ::gloo::transport::Device {
 public:
  gloo_device(std::shared_ptr<::gloo::transport::Device> inner, std::shared_ptr<gloo_buffers> list,
              std::chrono::milliseconds timeout)
      : inner_(std::move(inner)), list_(std::move(list)), timeout_(timeout) {}
  std::string str() const override { return inner_->str(); }
  const std::string& getPCIBusID() const override { return inner_->getPCIBusID(); }
  int getInterfaceSpeed() const override { return inner_->getInterfaceSpeed(); }
  bool hasGPUDirect() const override { return inner_->hasGPUDirect(); }
  std::shared_ptr<::gloo::transport::Context> createContext(int rank, int size) override {
    auto inner = inner_->createContext(rank, size);
    inner->setTimeout(timeout_);
    auto c = std::make_shared<gloo_guarded_context>(std::move(inner), list_);
    std::lock_guard lock(mu_);
    last_ = c;
    return c;
  }

  /// Closes every pair of the last context (each has been created): a connect waiting on one
  /// returns at once. Gloo's own Pair::close, as for a context that closes its connections.
  void close_pairs() noexcept {
    std::shared_ptr<gloo_guarded_context> c;
    {
      std::lock_guard lock(mu_);
      c = last_.lock();
    }
    if (!c) return;
    for (int q = 0; q < c->size; ++q) {
      if (q == c->rank) continue;
      try {
        if (auto& pair = c->getPair(q)) pair->close();
      } catch (...) {
        // a pair that failed already
      }
    }
  }

 private:
  std::shared_ptr<::gloo::transport::Device> inner_;
  std::shared_ptr<gloo_buffers> list_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::weak_ptr<gloo_guarded_context> last_;
};

}  // namespace tutti::inline v0::detail

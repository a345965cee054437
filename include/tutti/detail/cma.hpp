#pragma once
/// \file
/// Cross-memory attach (Linux process_vm_readv(2) and process_vm_writev(2)): one process reads
/// another's memory in a single copy, with no shared segment. tutti::gloo uses it between ranks
/// on one host, where a message through loopback TCP would be copied twice (into the kernel and
/// out again): the sender writes the message's descriptor into the receiver's mailbox
/// (cma_inbox), the receiver reads the message and then writes its acknowledgement into a word
/// of the sender's. No TCP message is involved.
///
/// Reading or writing a process's memory needs the permission ptrace(2) would
/// (PTRACE_MODE_ATTACH: the same user and, under Yama's ptrace_scope >= 1, more), so it is
/// probed at bootstrap: each rank publishes the address of a random word, and a peer uses single
/// copies only after it read that word back and wrote it again (unchanged) — and only when both
/// directions work.

#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tutti/detail/text_fields.hpp"

namespace tutti::inline v0::detail {

/// This kernel's boot id: processes that share it share one machine's CPUs (whatever their
/// namespaces). "" where it cannot be read.
[[nodiscard]] inline std::string boot_id() {
  char boot[64] = {};
  std::FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "re");
  if (f == nullptr) return {};
  const bool ok = std::fgets(boot, sizeof boot, f) != nullptr;
  std::fclose(f);
  return ok ? std::string(boot, ::strcspn(boot, "\n")) : std::string();
}

/// What makes two processes able to read each other's memory by pid: one kernel boot, one PID
/// namespace (a pid means the same process to both) and one network namespace (ranks in
/// different network namespaces stand for different hosts, as tests/netns makes them). ""
/// where any of it cannot be read.
[[nodiscard]] inline std::string cma_host_identity() {
  std::string id = boot_id();
  if (id.empty()) return {};
  for (const char* ns : {"/proc/self/ns/pid", "/proc/self/ns/net"}) {
    struct stat st {};
    if (::stat(ns, &st) != 0) return {};
    id += ':' + std::to_string(static_cast<unsigned long long>(st.st_ino));
  }
  return id;
}

/// Moves `n` bytes between `local` and `remote` in process `pid`: reads them from there
/// (process_vm_readv) or, with `write`, writes them there (process_vm_writev); 0, or the errno
/// of the failure (ESRCH: the process is gone; EFAULT: the range is not mapped there; EPERM:
/// not allowed).
[[nodiscard]] inline int cma_transfer(pid_t pid, void* local, std::uint64_t remote, std::size_t n,
                                      bool write) noexcept {
  auto* at = static_cast<std::byte*>(local);
  while (n > 0) {
    iovec l{at, n};
    // An address in the other process: the kernel reads it there, this one never dereferences it.
    iovec r{reinterpret_cast<void*>(  // NOLINT(performance-no-int-to-ptr)
                static_cast<std::uintptr_t>(remote)),
            n};
    const ssize_t done = write ? ::process_vm_writev(pid, &l, 1, &r, 1, 0)
                               : ::process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (done < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (done == 0) return EFAULT;
    at += done;
    remote += static_cast<std::uint64_t>(done);
    n -= static_cast<std::size_t>(done);
  }
  return 0;
}

/// Reads `n` bytes at `remote` in process `pid` into `local` (cma_transfer).
[[nodiscard]] inline int cma_read(pid_t pid, void* local, std::uint64_t remote,
                                  std::size_t n) noexcept {
  return cma_transfer(pid, local, remote, n, false);
}

/// Writes `n` bytes from `local` to `remote` in process `pid` (cma_transfer).
[[nodiscard]] inline int cma_write(pid_t pid, const void* local, std::uint64_t remote,
                                   std::size_t n) noexcept {
  // process_vm_writev only reads the local side.
  return cma_transfer(pid,
                      const_cast<void*>(local),  // NOLINT(cppcoreguidelines-pro-type-const-cast)
                      remote, n, true);
}

/// Writes the word `value` at `remote` in process `pid` (cma_transfer).
[[nodiscard]] inline int cma_write_word(pid_t pid, std::uint64_t value,
                                        std::uint64_t remote) noexcept {
  return cma_transfer(pid, &value, remote, sizeof value, true);
}

/// What a rank publishes for the probe: "<host identity> <pid> <address> <value>", or "off"
/// when it does not take part (disabled, or its identity is unknown).
struct cma_offer {
  std::string host;
  pid_t pid = 0;
  std::uint64_t address = 0;
  std::uint64_t value = 0;

  [[nodiscard]] std::string encode() const {
    if (host.empty()) return "off";
    char tail[64];
    std::snprintf(tail, sizeof tail, " %d %" PRIx64 " %" PRIx64, static_cast<int>(pid), address,
                  value);
    return host + tail;
  }
  /// The offer `v` encodes, exactly as encode() writes it (detail/text_fields.hpp: single
  /// spaces, pid in decimal > 0, address and value in lower-case hexadecimal); nothing for
  /// "off" or anything else.
  [[nodiscard]] static std::optional<cma_offer> decode(std::string_view v) {
    std::string_view rest = v;
    const auto host = next_field(rest, false);
    const auto pid = next_integer<int>(rest, false);
    const auto address = next_integer<std::uint64_t>(rest, false, 16);
    const auto value = next_integer<std::uint64_t>(rest, true, 16);
    if (!host || host->empty() || !pid || *pid <= 0 || !address || !value) return std::nullopt;
    return cma_offer{std::string(*host), *pid, *address, *value};
  }
};

/// A single-copy message's descriptor, sent in place of its bytes: where they are in the
/// sender, how many, and where the receiver acknowledges once it has read them: it writes
/// `ack_value` into the sender's word at `ack_address` (cma_ack_words).
struct cma_descriptor {
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
  std::uint64_t ack_address = 0;
  std::uint64_t ack_value = 0;
};

/// Where one rank's single-copy descriptors to another wait to be taken: a ring of entries in
/// the receiver's memory that the sender writes (process_vm_writev) and the receiver reads, so
/// that a descriptor reaches its receiver in two system calls, not in a round trip through TCP.
/// The sender writes an entry's slot and descriptor, then (after a fence) its stamp, the
/// entry's index + 1, which tells the receiver that the entry is whole; the receiver copies the
/// entry out and counts it in `taken`, which the sender reads back (process_vm_readv) before it
/// writes over an entry (at most `capacity` entries are written and not yet taken).
struct cma_inbox {
  static constexpr std::size_t capacity = 64;
  struct entry {
    std::uint64_t slot = 0;  // the message's slot (detail::gloo_slot): receives match on it
    cma_descriptor d;
    std::atomic<std::uint64_t> stamp{0};
  };
  /// What the sender writes first, at the entry's address; the stamp follows it.
  struct body {
    std::uint64_t slot = 0;
    cma_descriptor d;
  };
  alignas(64) std::atomic<std::uint64_t> taken{0};
  alignas(64) entry entries[capacity];

  static_assert(std::atomic<std::uint64_t>::is_always_lock_free &&
                sizeof(std::atomic<std::uint64_t>) == sizeof(std::uint64_t));
  [[nodiscard]] static constexpr std::size_t entry_offset(std::uint64_t index) noexcept {
    return offsetof(cma_inbox, entries) + (index % capacity) * sizeof(entry);
  }
  static constexpr std::size_t stamp_offset = offsetof(entry, stamp);
  static_assert(offsetof(entry, slot) == offsetof(body, slot) &&
                offsetof(entry, d) == offsetof(body, d) && sizeof(body) <= stamp_offset);
};

/// A rank's mailbox: `ranks + 1` inboxes in one block, inbox s + 1 for what rank s sends. The
/// first inbox receives nothing: its `taken` word is the probe word (setup of single copies:
/// peers read it back and write it again), and its address is what the rank publishes. A
/// mailbox is never freed (nor reused): a peer may still write into it after this rank's world
/// is gone, and it must land in memory that nothing else uses. A few KiB per peer and world.
class cma_mailbox {
 public:
  /// A new mailbox for a world of `ranks`, its probe word set to `probe`.
  [[nodiscard]] static cma_inbox* make(int ranks, std::uint64_t probe) {
    auto boxes = std::make_unique<cma_inbox[]>(static_cast<std::size_t>(ranks) + 1);
    boxes[0].taken.store(probe, std::memory_order_relaxed);
    static auto* const kept = new std::vector<std::unique_ptr<cma_inbox[]>>;  // never destroyed
    static std::mutex mu;
    const std::lock_guard lock(mu);
    kept->push_back(std::move(boxes));
    return kept->back().get();
  }
  /// The address, in the process whose mailbox starts at `base`, of the inbox for `sender`.
  [[nodiscard]] static constexpr std::uint64_t inbox_address(std::uint64_t base,
                                                             int sender) noexcept {
    return base + (static_cast<std::uint64_t>(sender) + 1) * sizeof(cma_inbox);
  }
};

/// The words receivers write their acknowledgements into (process_vm_writev), shared by every
/// world in this process. A word is never freed: a receiver may still write into the word of a
/// message its sender gave up on (an abort), so such a word is never used again, and the word
/// of an acknowledged message is reused only under a new value (values never repeat), so no
/// late write can acknowledge a later message.
class cma_ack_words {
 public:
  using word = std::atomic<std::uint64_t>;
  static_assert(sizeof(word) == sizeof(std::uint64_t) && word::is_always_lock_free);
  /// What a sender leaves in the word of a message it gave up on, before its buffer can go
  /// away: a receiver reads the word after the bytes and, finding this, knows that what it read
  /// may not have been the message.
  static constexpr std::uint64_t abandoned = ~std::uint64_t{0};

  [[nodiscard]] static cma_ack_words& instance() {
    static cma_ack_words* const words = new cma_ack_words;  // never destroyed (see above)
    return *words;
  }

  /// A word set to 0 and the value its receiver is to write into it.
  [[nodiscard]] std::pair<word*, std::uint64_t> take() {
    const std::lock_guard lock(mu_);
    if (free_.empty()) {
      chunks_.push_back(std::make_unique<word[]>(chunk));
      for (std::size_t i = 0; i < chunk; ++i) free_.push_back(&chunks_.back()[i]);
    }
    word* w = free_.back();
    free_.pop_back();
    w->store(0, std::memory_order_relaxed);
    return {w, ++last_value_};
  }
  /// Gives back the word of an acknowledged message (never that of one given up on).
  void give(word* w) {
    const std::lock_guard lock(mu_);
    free_.push_back(w);
  }

 private:
  static constexpr std::size_t chunk = 256;
  std::mutex mu_;
  std::vector<std::unique_ptr<word[]>> chunks_;
  std::vector<word*> free_;
  std::uint64_t last_value_ = 0;
};

}  // namespace tutti::inline v0::detail

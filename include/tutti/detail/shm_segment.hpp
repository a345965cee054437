#pragma once
/// \file
/// Creating, attaching and unlinking tutti::shm's POSIX shared-memory object, and watching
/// the processes that attached to it.
///
/// Rank 0 creates the object with mode 0600 under a name with 128 random bits (and its pid, so
/// that a segment whose creator died can be swept) and publishes the name
/// through a rendezvous (a store); the others open it, check its owner, mode and geometry,
/// and attach. The rank whose attach completes the world unlinks the name at once, so from
/// then on nothing is left in /dev/shm whatever happens to the processes.

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "tutti/core/error.hpp"
#include "tutti/detail/proc_state.hpp"
#include "tutti/detail/shm_layout.hpp"
#include "tutti/detail/unique_fd.hpp"

namespace tutti::inline v0::detail {

[[noreturn]] inline void shm_fail(errc code, int rank, const std::string& what) {
  throw error(code, "", 0, rank, -1, "tutti::shm: " + what);
}
[[noreturn]] inline void shm_fail_errno(int rank, const std::string& what, int err) {
  shm_fail(errc::transport_failure, rank, what + ": " + std::generic_category().message(err));
}

/// What a segment's name says of its creator.
struct shm_name_parts {
  unsigned long long pid_ns = 0;
  long long pid = 0;
};

/// Parses a segment name, "/tutti-<PID namespace, hex>-<creator pid>-<32 hex digits>" (the
/// leading "/" optional, as readdir gives it); nullopt for anything else.
[[nodiscard]] inline std::optional<shm_name_parts> shm_parse_name(std::string_view name) noexcept {
  if (!name.empty() && name.front() == '/') name.remove_prefix(1);
  constexpr std::string_view prefix = "tutti-";
  if (name.substr(0, prefix.size()) != prefix) return std::nullopt;
  name.remove_prefix(prefix.size());
  auto field = [&](int base, unsigned long long& out) {
    const auto dash = name.find('-');
    if (dash == std::string_view::npos || dash == 0 || dash > 16) return false;
    const auto [end, ec] = std::from_chars(name.data(), name.data() + dash, out, base);
    if (ec != std::errc{} || end != name.data() + dash) return false;
    name.remove_prefix(dash + 1);
    return true;
  };
  shm_name_parts parts;
  unsigned long long pid = 0;
  if (!field(16, parts.pid_ns) || !field(10, pid) || pid == 0 || pid > 0x7fffffff ||
      name.size() != 32 || name.find_first_not_of("0123456789abcdef") != std::string_view::npos)
    return std::nullopt;
  parts.pid = static_cast<long long>(pid);
  return parts;
}

/// A fresh name for rank 0's segment: "/tutti-<PID namespace>-<pid>-" and 32 hex digits from
/// getrandom(2). The 128 random bits keep it unguessable; namespace and pid let
/// shm_sweep_orphans tell a segment whose creator died.
[[nodiscard]] inline std::string shm_random_name(int rank) {
  unsigned char bytes[16];
  std::size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      shm_fail_errno(rank, "getrandom", errno);
    }
    got += static_cast<std::size_t>(n);
  }
  static constexpr char hex[] = "0123456789abcdef";
  char ns[17];
  std::snprintf(ns, sizeof ns, "%llx", pid_namespace());
  std::string name = "/tutti-" + std::string(ns) + "-" + std::to_string(::getpid()) + "-";
  for (unsigned char b : bytes) {
    name += hex[b >> 4];
    name += hex[b & 15];
  }
  return name;
}

/// Reads up to `size - 1` bytes of /proc/<pid>/<file> into `buf`, NUL-terminated; the count
/// read, or -1.
inline ssize_t shm_read_proc(pid_t pid, const char* file, char* buf, std::size_t size) noexcept {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/%s", static_cast<int>(pid), file);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  const ssize_t n = ::read(fd, buf, size - 1);
  ::close(fd);
  buf[n > 0 ? n : 0] = '\0';
  return n;
}

/// Whether process `pid` of this PID namespace still runs: it exists, is not a zombie (a
/// killed rank stays one until its launcher reaps it, and it will never come back) and is not
/// dying — exiting already, or with SIGKILL pending. A killed process with much memory can
/// take tens of milliseconds to die, and a survivor sweeping at once must not take it for
/// alive and leave its segment behind.
[[nodiscard]] inline bool shm_process_alive(pid_t pid) noexcept {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  char buf[4096];  // status: SigPnd sits some 650 bytes in, later with a long Groups line
  if (shm_read_proc(pid, "stat", buf, 256) <= 0) return true;  // cannot tell: leave it alone
  // "pid (comm) S ppid pgrp session tty_nr tpgid flags ...": the state follows the last ')'
  // (comm may itself hold ')'); PF_EXITING (0x4) in flags once the process is exiting.
  const char* close = std::strrchr(buf, ')');
  if (close == nullptr || close[1] != ' ') return true;
  if (close[2] == 'Z' || close[2] == 'X') return false;
  unsigned long long flags = 0;
  int skip = 0;
  if (std::sscanf(close + 3, " %*d %*d %*d %*d %*d %llu%n", &flags, &skip) == 1 && skip > 0 &&
      (flags & 0x4) != 0)
    return false;
  // A SIGKILL sent to the process is pending from the moment kill(2) returns.
  if (shm_read_proc(pid, "status", buf, sizeof buf) <= 0) return true;
  for (const char* field : {"\nSigPnd:", "\nShdPnd:"}) {
    const char* at = std::strstr(buf, field);
    if (at == nullptr) continue;
    const unsigned long long pending = std::strtoull(at + std::strlen(field), nullptr, 16);
    if ((pending >> (SIGKILL - 1)) & 1) return false;
  }
  return true;
}

/// Removes this user's segments in /dev/shm whose creator, a process of this PID namespace,
/// no longer exists; returns how many. A world whose rank 0 died after creating its segment
/// but before any peer learned the name leaves one that no survivor can name: the peers sweep
/// when their bootstrap fails, and rank 0 before it creates a segment. A creator in another
/// PID namespace (a container sharing /dev/shm) cannot be judged and is left alone.
inline int shm_sweep_orphans() noexcept {
  const unsigned long long ns = pid_namespace();
  if (ns == 0) return 0;
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return 0;
  int removed = 0;
  const uid_t me = ::geteuid();
  while (const dirent* e = ::readdir(dir)) {
    const auto parts = shm_parse_name(e->d_name);
    if (!parts || parts->pid_ns != ns) continue;
    struct stat st {};
    if (::fstatat(::dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
        st.st_uid != me)
      continue;
    if (shm_process_alive(static_cast<pid_t>(parts->pid))) continue;
    const std::string name = std::string("/") + e->d_name;
    if (::shm_unlink(name.c_str()) == 0) ++removed;
  }
  ::closedir(dir);
  return removed;
}

/// An mmap'ed segment; unmapped on destruction.
class shm_mapping {
 public:
  shm_mapping() = default;
  shm_mapping(std::byte* base, std::size_t bytes) noexcept : base_(base), bytes_(bytes) {}
  shm_mapping(shm_mapping&& o) noexcept
      : base_(std::exchange(o.base_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  shm_mapping& operator=(shm_mapping&& o) noexcept {
    if (this != &o) {
      reset();
      base_ = std::exchange(o.base_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  shm_mapping(const shm_mapping&) = delete;
  shm_mapping& operator=(const shm_mapping&) = delete;
  ~shm_mapping() { reset(); }

  [[nodiscard]] std::byte* base() const noexcept { return base_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }

 private:
  void reset() noexcept {
    if (base_ != nullptr) ::munmap(base_, bytes_);
    base_ = nullptr;
  }
  std::byte* base_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Creates the object `name` for `l` (rank 0), reserves its memory (so a full /dev/shm is an
/// error now rather than SIGBUS later) and initialises header and rank blocks.
[[nodiscard]] inline shm_mapping shm_create(const std::string& name, const shm_layout& l) {
  unique_fd fd(::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (fd.get() < 0) shm_fail_errno(0, "shm_open(" + name + ")", errno);
  const std::size_t total = l.total_bytes();
  auto undo = [&](const std::string& what, int err) {
    ::shm_unlink(name.c_str());
    shm_fail_errno(0, what, err);
  };
  // The umask may have narrowed the mode (peers then could not open it): set it exactly.
  if (::fchmod(fd.get(), 0600) != 0) undo("fchmod", errno);
  if (::ftruncate(fd.get(), static_cast<off_t>(total)) != 0) undo("ftruncate", errno);
  if (const int err = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(total)); err != 0) {
    ::shm_unlink(name.c_str());
    shm_fail(errc::transport_failure, 0,
             "cannot reserve " + std::to_string(total >> 20) + " MiB in /dev/shm (" +
                 std::generic_category().message(err) +
                 "): enlarge it (docker run --shm-size) or lower TUTTI_SHM_SLOT_BYTES");
  }
  void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) undo("mmap", errno);
  shm_mapping m(static_cast<std::byte*>(p), total);
  auto* h = new (m.base()) shm_header;
  h->version = shm_header::layout_version;
  h->ranks = static_cast<std::uint32_t>(l.ranks);
  h->slot_bytes = l.slot_bytes;
  h->channel_bytes = l.channel_bytes;
  h->total_bytes = total;
  {
    std::random_device rd;
    h->stamp_key = (std::uint64_t{rd()} << 32) ^ rd();
  }
  for (std::size_t r = 0; r < l.ranks; ++r)
    new (m.base() + l.blocks_offset() + r * shm_layout::block_bytes()) shm_rank_block;
  for (std::size_t r = 0; r < l.ranks; ++r)
    for (std::size_t i = 0; i < 2 * shm_lines_per_half; ++i) {
      std::byte* at = m.base() + l.lines_offset() + r * shm_layout::lines_bytes() + i * cache_line;
      if (i % shm_lines_per_half == 0)
        new (at) shm_first_line;
      else
        new (at) shm_line;
    }
  for (int s = 0; s < 2; ++s)
    for (std::size_t a = 0; a < l.ranks; ++a)
      for (std::size_t b = 0; b < l.ranks; ++b)
        new (m.base() + l.channel_offset(static_cast<space>(s), a, b)) shm_channel_ctl;
  h->magic.store(shm_header::magic_value, std::memory_order_release);
  return m;
}

/// Opens the object rank 0 created, checks it is ours and made for `ranks` ranks.
[[nodiscard]] inline std::pair<shm_mapping, shm_layout> shm_attach(const std::string& name,
                                                                   int rank, int ranks) {
  if (name.empty() || name.front() != '/' || !shm_parse_name(name))
    shm_fail(errc::transport_failure, rank, "rendezvous returned a malformed segment name");
  unique_fd fd(::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0));
  if (fd.get() < 0) shm_fail_errno(rank, "shm_open(" + name + ")", errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) shm_fail_errno(rank, "fstat", errno);
  if (st.st_uid != ::geteuid() || (st.st_mode & 0777) != 0600)
    shm_fail(errc::transport_failure, rank,
             "segment " + name + " is not owned by this user with mode 0600: refusing it");
  const auto bytes = static_cast<std::size_t>(st.st_size);
  if (bytes < shm_layout::header_bytes())
    shm_fail(errc::transport_failure, rank, "segment " + name + " is too small");
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) shm_fail_errno(rank, "mmap", errno);
  shm_mapping m(static_cast<std::byte*>(p), bytes);
  shm_layout l;
  if (const std::string why =
          shm_check_header(*reinterpret_cast<const shm_header*>(m.base()), bytes, ranks, l);
      !why.empty())
    shm_fail(errc::transport_failure, rank, "segment " + name + " " + why);
  return {std::move(m), l};
}

/// Watches peer processes: a pidfd per peer (readable once the process has exited), or
/// kill(pid, 0) where pidfds are unavailable.
class shm_watch {
 public:
  shm_watch() = default;
  explicit shm_watch(std::vector<std::int32_t> pids) : pids_(std::move(pids)) {
    for (auto pid : pids_) {
      int fd = -1;
#if defined(SYS_pidfd_open)
      if (pid > 0) fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#endif
      if (fd >= 0) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
      fds_.emplace_back(fd);
    }
  }

  /// Whether peer `r`'s process has exited (or was never there).
  [[nodiscard]] bool gone(int r) const noexcept {
    const auto i = static_cast<std::size_t>(r);
    if (i >= pids_.size() || pids_[i] <= 0) return false;
    if (fds_[i].get() >= 0) {
      pollfd p{fds_[i].get(), POLLIN, 0};
      return ::poll(&p, 1, 0) > 0;
    }
    return ::kill(pids_[i], 0) != 0 && errno == ESRCH;
  }

  /// Whether peer `r`'s process is stopped (SIGSTOP, a debugger): see process_stopped.
  [[nodiscard]] bool stopped(int r) const noexcept {
    const auto i = static_cast<std::size_t>(r);
    return i < pids_.size() && process_stopped(pids_[i]);
  }

 private:
  std::vector<std::int32_t> pids_;
  std::vector<unique_fd> fds_;
};

}  // namespace tutti::inline v0::detail

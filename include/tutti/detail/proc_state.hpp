#pragma once
/// \file
/// Whether a process on this host is stopped, from /proc: what tells a rank that was stopped
/// (SIGSTOP, SIGTSTP, a debugger) apart from one that is merely slow or busy outside tutti.

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string_view>

#include "tutti/detail/unique_fd.hpp"

namespace tutti::inline v0::detail {

/// The state letter in the contents of /proc/<pid>/stat ("pid (comm) S ..."; comm may hold
/// spaces and parentheses, so the state follows the last ')'), or '\0' if `stat` is malformed.
[[nodiscard]] constexpr char proc_stat_state(std::string_view stat) noexcept {
  const auto close = stat.rfind(')');
  if (close == std::string_view::npos || close + 2 >= stat.size() || stat[close + 1] != ' ')
    return '\0';
  return stat[close + 2];
}

/// Whether process `pid` is stopped by a signal ('T') or by a tracer ('t'). False where its
/// state cannot be read (it is gone, lives in another PID namespace, or /proc is missing): a
/// caller then knows no more than before and falls back on what it measured.
[[nodiscard]] inline bool process_stopped(pid_t pid) noexcept {
  if (pid <= 0) return false;
  char path[32];
  std::snprintf(path, sizeof path, "/proc/%ld/stat", static_cast<long>(pid));
  const unique_fd fd(::open(path, O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return false;
  char buf[512];
  const ssize_t n = ::read(fd.get(), buf, sizeof buf);
  if (n <= 0) return false;
  const char state = proc_stat_state(std::string_view(buf, static_cast<std::size_t>(n)));
  return state == 'T' || state == 't';
}

/// This process's PID namespace: the inode number of /proc/self/ns/pid, 0 where unknown.
[[nodiscard]] inline unsigned long long pid_namespace() noexcept {
  struct stat st {};
  return ::stat("/proc/self/ns/pid", &st) == 0 ? static_cast<unsigned long long>(st.st_ino) : 0;
}

/// Whether process `pid` has ended: no such process, or a zombie its parent has not reaped
/// yet. False where it runs, or where its state cannot be read for another reason.
[[nodiscard]] inline bool process_gone(pid_t pid) noexcept {
  if (pid <= 0) return false;
  char path[32];
  std::snprintf(path, sizeof path, "/proc/%ld/stat", static_cast<long>(pid));
  const unique_fd fd(::open(path, O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return errno == ENOENT;
  char buf[512];
  const ssize_t n = ::read(fd.get(), buf, sizeof buf);
  if (n <= 0) return false;
  const char state = proc_stat_state(std::string_view(buf, static_cast<std::size_t>(n)));
  return state == 'Z' || state == 'X';
}

}  // namespace tutti::inline v0::detail

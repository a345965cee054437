#pragma once
/// \file
/// What tells two processes' hosts apart, for finding the ranks that share one.

#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "tutti/detail/cma.hpp"

namespace tutti::inline v0::detail {

/// This process's host: the host name, the kernel's boot id and the network namespace.
/// Processes in different network namespaces count as different hosts (they may not share an
/// address to meet at, and tests/netns makes "hosts" so); processes with one identity share
/// /dev/shm and the machine's memory.
[[nodiscard]] inline std::string host_identity() {
  std::string id;
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) == 0) id += name;
  id += "/" + boot_id();
  struct stat st {};
  if (::stat("/proc/self/ns/net", &st) == 0)
    id += "/net:" + std::to_string(static_cast<unsigned long long>(st.st_ino));
  return id;
}

}  // namespace tutti::inline v0::detail

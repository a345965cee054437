#pragma once
/// \file
/// tutti::bootstrap::detect_world: this process's rank and world size, read from the variables
/// a launcher sets (torchrun, tutti::spawn, Open MPI's mpirun, MPICH's Hydra, Slurm's srun).

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>

#include <tutti/core/error.hpp>

namespace tutti::inline v0::bootstrap {

/// Which launcher's variables gave the rank and size.
enum class launcher {
  none,      ///< no launcher: a single process
  torchrun,  ///< RANK/WORLD_SIZE: torchrun, tutti::spawn or a user
  open_mpi,  ///< OMPI_COMM_WORLD_RANK/SIZE: Open MPI's mpirun (prterun)
  mpich,     ///< PMI_RANK/PMI_SIZE: MPICH's (or Intel MPI's) Hydra mpiexec
  slurm,     ///< SLURM_PROCID/SLURM_NTASKS: srun
};

/// Where this process sits in the job, as its launcher describes it.
struct world_info {
  int rank = 0;        ///< this process's rank, 0 <= rank < size
  int size = 1;        ///< number of processes in the job
  int local_rank = 0;  ///< rank among the job's processes on this host
  int local_size = 1;  ///< number of the job's processes on this host (<= size)
  launcher source = launcher::none;
  std::string master_addr;   ///< MASTER_ADDR, or "" when unset
  int master_port = -1;      ///< MASTER_PORT (1..65535), or -1 when unset
  bool agent_store = false;  ///< TORCHELASTIC_USE_AGENT_STORE == "True": torchrun's agent
                             ///< already serves a store on MASTER_PORT
  int restart_count = 0;     ///< TORCHELASTIC_RESTART_COUNT: how often torchrun restarted the
                             ///< group (0 when unset)
};

/// The launcher's name: "none", "torchrun", "open_mpi", "mpich" or "slurm".
[[nodiscard]] inline std::string_view name(launcher l) noexcept {
  switch (l) {
    case launcher::none:
      return "none";
    case launcher::torchrun:
      return "torchrun";
    case launcher::open_mpi:
      return "open_mpi";
    case launcher::mpich:
      return "mpich";
    case launcher::slurm:
      return "slurm";
  }
  return "unknown";
}

}  // namespace tutti::inline v0::bootstrap

namespace tutti::inline v0::detail {

/// Every variable detect_world reads, and TUTTI_STORE_FD (set by tutti::spawn in rank 0): what a
/// test clears to run outside any launcher.
inline constexpr std::array<const char*, 24> launcher_variables{
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
    "SLURM_NTASKS_PER_NODE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_RESTART_COUNT",
    "TUTTI_STORE_FD",
};

[[noreturn]] inline void env_invalid(const std::string& what) {
  throw tutti::error(errc::invalid_argument, "", 0, -1, -1, what);
}

[[noreturn]] inline void env_failure(const std::string& what) {
  throw tutti::error(errc::transport_failure, "", 0, -1, -1, what);
}

[[nodiscard]] inline std::string env_show(const char* var, const char* value) {
  return std::string(var) + "=\"" + value + "\"";
}

/// A base-10 integer filling all of `text`, or nullopt (no sign, blanks or overflow allowed).
[[nodiscard]] inline std::optional<int> parse_non_negative(std::string_view text) noexcept {
  int v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc{} || p != end || v < 0) return std::nullopt;
  return v;
}

/// The variable as a non-negative int, nullopt when unset; raises when set but malformed.
[[nodiscard]] inline std::optional<int> env_int(const char* var) {
  const char* value = std::getenv(var);
  if (value == nullptr) return std::nullopt;
  auto v = parse_non_negative(value);
  if (!v) env_invalid(env_show(var, value) + " is not a non-negative integer");
  return v;
}

/// The count a Slurm tasks-per-node list ("4(x2),3": 4, 4, 3) gives node `node`.
[[nodiscard]] inline int slurm_tasks_on_node(const char* var, int node) {
  const char* value = std::getenv(var);
  const std::string_view all(value);
  const std::string malformed =
      env_show(var, value) + " is not a Slurm tasks-per-node list like \"4(x2),3\"";
  int found = -1;
  long first_of_item = 0;  // index of the first node the current item covers
  std::string_view rest = all;
  while (true) {
    const auto comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    int repeat = 1;
    if (const auto paren = item.find('('); paren != std::string_view::npos) {
      if (item.size() < paren + 4 || item.substr(paren, 2) != "(x" || item.back() != ')') {
        env_invalid(malformed);
      }
      auto r = parse_non_negative(item.substr(paren + 2, item.size() - paren - 3));
      if (!r || *r < 1) env_invalid(malformed);
      repeat = *r;
      item = item.substr(0, paren);
    }
    auto count = parse_non_negative(item);
    if (!count) env_invalid(malformed);
    if (found < 0 && node < first_of_item + repeat) found = *count;
    first_of_item += repeat;
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  if (found < 0) {
    env_invalid(env_show(var, value) + " lists " + std::to_string(first_of_item) +
                " nodes but SLURM_NODEID=" + std::to_string(node));
  }
  return found;
}

/// Where a launcher's world came from, for messages: a value shows as name=value + note.
struct world_vars {
  const char* rank = "";
  const char* size = "";
  std::string local_rank;  // a variable name, or "local size" when derived
  std::string local_size;
  std::string local_rank_note;  // "" or " (unset, taken as RANK)" and the like
  std::string local_size_note;
};

inline void check_world(const bootstrap::world_info& w, const world_vars& v) {
  const auto show = [](const std::string& var, int value, const std::string& note = "") {
    return var + "=" + std::to_string(value) + note;
  };
  const std::string rank = show(v.rank, w.rank), size = show(v.size, w.size);
  const std::string local_rank = show(v.local_rank, w.local_rank, v.local_rank_note);
  const std::string local_size = show(v.local_size, w.local_size, v.local_size_note);
  if (w.size < 1) env_invalid(size + " must be at least 1");
  if (w.rank >= w.size) env_invalid(rank + " must be less than " + size);
  if (w.local_size < 1) env_invalid(local_size + " must be at least 1");
  if (w.local_size > w.size) env_invalid(local_size + " exceeds " + size);
  if (w.local_rank >= w.local_size) env_invalid(local_rank + " must be less than " + local_size);
}

/// Both variables of a launcher's (rank, size) pair, nullopt when neither is set.
[[nodiscard]] inline std::optional<std::pair<int, int>> env_pair(const char* rank_var,
                                                                 const char* size_var) {
  auto r = env_int(rank_var);
  auto s = env_int(size_var);
  if (!r && !s) return std::nullopt;
  if (!r) env_invalid(std::string(size_var) + " is set but " + rank_var + " is not");
  if (!s) env_invalid(std::string(rank_var) + " is set but " + size_var + " is not");
  return std::pair{*r, *s};
}

/// Fills local_rank/local_size from two optional variables; a missing one takes the global value.
inline world_vars local_or_global(bootstrap::world_info& w, const char* rank_var,
                                  const char* size_var, const char* local_rank_var,
                                  const char* local_size_var) {
  world_vars v{rank_var, size_var, local_rank_var, local_size_var, "", ""};
  if (auto lr = env_int(local_rank_var)) {
    w.local_rank = *lr;
  } else {
    w.local_rank = w.rank;
    v.local_rank_note = std::string(" (unset, taken as ") + rank_var + ")";
  }
  if (auto ls = env_int(local_size_var)) {
    w.local_size = *ls;
  } else {
    w.local_size = w.size;
    v.local_size_note = std::string(" (unset, taken as ") + size_var + ")";
  }
  return v;
}

/// Slurm's local rank is SLURM_LOCALID; its local size is this node's entry in a tasks-per-node
/// list, else SLURM_NTASKS_PER_NODE, else SLURM_NTASKS.
inline world_vars slurm_local(bootstrap::world_info& w) {
  world_vars v{"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "local size", "", ""};
  auto local_id = env_int("SLURM_LOCALID");
  if (!local_id) {  // no per-node information: assume one host
    w.local_rank = w.rank;
    w.local_size = w.size;
    v.local_rank_note = " (unset, taken as SLURM_PROCID)";
    v.local_size_note = " (taken as SLURM_NTASKS)";
    return v;
  }
  w.local_rank = *local_id;
  auto node = env_int("SLURM_NODEID");
  for (const char* var : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    if (node && std::getenv(var) != nullptr) {
      w.local_size = slurm_tasks_on_node(var, *node);
      v.local_size_note = " (from " + env_show(var, std::getenv(var)) +
                          " at SLURM_NODEID=" + std::to_string(*node) + ")";
      return v;
    }
  }
  if (auto per_node = env_int("SLURM_NTASKS_PER_NODE")) {
    w.local_size = *per_node;
    v.local_size = "SLURM_NTASKS_PER_NODE";
    return v;
  }
  w.local_size = w.size;
  v.local_size_note = " (no tasks-per-node variable, taken as SLURM_NTASKS)";
  return v;
}

}  // namespace tutti::inline v0::detail

namespace tutti::inline v0::bootstrap {

/// Reads the launcher variables of this process. Precedence, first match wins:
///  1. RANK + WORLD_SIZE (torchrun, tutti::spawn, a user); LOCAL_RANK and LOCAL_WORLD_SIZE,
///     each defaulting to the global value when unset.
///  2. OMPI_COMM_WORLD_RANK/SIZE (+ OMPI_COMM_WORLD_LOCAL_RANK/LOCAL_SIZE) from Open MPI.
///  3. PMI_RANK/PMI_SIZE from Hydra (+ MPI_LOCALRANKID/MPI_LOCALNRANKS, else one host).
///  4. SLURM_PROCID/SLURM_NTASKS from srun; the local rank is SLURM_LOCALID and the local size
///     this node's entry (SLURM_NODEID) of SLURM_STEP_TASKS_PER_NODE or SLURM_TASKS_PER_NODE
///     ("4(x2),3"), else SLURM_NTASKS_PER_NODE; without SLURM_LOCALID, one host is assumed.
///     SLURM_PROCID without SLURM_NTASKS (a batch script) is not a launch.
/// MASTER_ADDR, MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE and TORCHELASTIC_RESTART_COUNT are
/// read in every case.
/// \returns nullopt when none of the rank variables is set.
/// \throws tutti::error(errc::invalid_argument), naming the variable and its value, when a
///   variable is malformed or negative, only half of a rank/size pair is set, rank >= size,
///   local_rank >= local_size, local_size > size, size < 1, MASTER_PORT is not in 1..65535, or
///   TORCHELASTIC_RESTART_COUNT is not a non-negative integer.
[[nodiscard]] inline std::optional<world_info> detect_world() {
  using namespace tutti::detail;
  world_info w;
  world_vars vars;
  if (auto p = env_pair("RANK", "WORLD_SIZE")) {
    w.source = launcher::torchrun;
    std::tie(w.rank, w.size) = *p;
    vars = local_or_global(w, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
  } else if (auto o = env_pair("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")) {
    w.source = launcher::open_mpi;
    std::tie(w.rank, w.size) = *o;
    vars = local_or_global(w, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                           "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE");
  } else if (auto m = env_pair("PMI_RANK", "PMI_SIZE")) {
    w.source = launcher::mpich;
    std::tie(w.rank, w.size) = *m;
    vars = local_or_global(w, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS");
  } else if (std::getenv("SLURM_PROCID") != nullptr && std::getenv("SLURM_NTASKS") != nullptr) {
    w.source = launcher::slurm;
    w.rank = *env_int("SLURM_PROCID");
    w.size = *env_int("SLURM_NTASKS");
    vars = slurm_local(w);
  } else {
    return std::nullopt;
  }
  check_world(w, vars);

  if (const char* addr = std::getenv("MASTER_ADDR")) w.master_addr = addr;
  if (const char* port = std::getenv("MASTER_PORT")) {
    auto p = parse_non_negative(port);
    if (!p || *p < 1 || *p > 65535) {
      env_invalid(env_show("MASTER_PORT", port) + " is not a port number in 1..65535");
    }
    w.master_port = *p;
  }
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  w.agent_store = agent != nullptr && std::string_view(agent) == "True";
  if (auto restarts = env_int("TORCHELASTIC_RESTART_COUNT")) w.restart_count = *restarts;
  return w;
}

/// Like detect_world, but a process that no launcher started is an error.
/// \throws tutti::error(errc::invalid_argument) listing the variables looked for.
[[nodiscard]] inline world_info world_from_env() {
  if (auto w = detect_world()) return *std::move(w);
  tutti::detail::env_invalid(
      "no launcher variables found; looked for RANK and WORLD_SIZE (torchrun, tutti::spawn), "
      "OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE (Open MPI), PMI_RANK and PMI_SIZE "
      "(MPICH Hydra), SLURM_PROCID and SLURM_NTASKS (Slurm)");
}

/// A key naming this job on this host: "<ppid>-<start time of the parent>" (field 22 of
/// /proc/<ppid>/stat). Every rank one launcher started on this host shares its parent (torchrun's
/// agent, prted, hydra_pmi_proxy, slurmstepd, tutti::spawn), so they share the key; the start
/// time tells a reused pid apart. Linux only.
/// \throws tutti::error(errc::transport_failure) when /proc/<ppid>/stat cannot be read, or the
///   parent exited while it was read.
[[nodiscard]] inline std::string local_job_key() {
  const pid_t ppid = getppid();
  const std::string path = "/proc/" + std::to_string(ppid) + "/stat";
  const std::string fail = "local_job_key: " + path + ": ";
  // Plain read(): a stream would throw its own exception type if the parent vanished mid-read.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) tutti::detail::env_failure(fail + std::strerror(errno));
  std::string stat;
  char buf[512];
  ssize_t got = 0;
  while ((got = ::read(fd, buf, sizeof buf)) != 0) {
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) break;
    stat.append(buf, static_cast<std::size_t>(got));
  }
  const int read_errno = errno;
  ::close(fd);
  if (got < 0) tutti::detail::env_failure(fail + std::strerror(read_errno));
  // The command name (field 2) sits in parentheses and may hold spaces or ')': skip past the
  // last ')'. Field 3 follows it, so field 22 is the 20th after it.
  const auto name_end = stat.rfind(')');
  if (name_end == std::string::npos) tutti::detail::env_failure(fail + "cannot be read");
  std::istringstream fields(stat.substr(name_end + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i) {
    if (!(fields >> field)) tutti::detail::env_failure(fail + "has fewer than 22 fields");
  }
  // Reparented while we read: the file may describe a reused pid.
  if (getppid() != ppid) tutti::detail::env_failure(fail + "the parent process exited");
  return std::to_string(ppid) + "-" + field;
}

}  // namespace tutti::inline v0::bootstrap

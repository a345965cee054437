// tutti::bootstrap::detect_world / world_from_env / local_job_key: every launcher's variables,
// their precedence, strict parsing, Slurm's tasks-per-node lists; and bootstrap::rendezvous,
// the store, key and file every transport's from_env / from_url meets through.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <initializer_list>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <tutti/bootstrap/env.hpp>
#include <tutti/bootstrap/file_store.hpp>
#include <tutti/bootstrap/rendezvous.hpp>

#include "scoped_env.hpp"

namespace {

using tutti::bootstrap::detect_world;
using tutti::bootstrap::launcher;
using tutti::bootstrap::world_from_env;
using tutti::bootstrap::world_info;

/// detect_world must raise errc::invalid_argument whose message holds every `needles` string.
void check_invalid(std::initializer_list<std::pair<const char*, const char*>> vars,
                   std::initializer_list<const char*> needles) {
  scoped_env env;
  env.set(vars);
  std::string what;
  try {
    (void)detect_world();
    FAIL("detect_world accepted an invalid environment");
  } catch (const tutti::error& e) {
    CHECK(e.kind() == tutti::errc::invalid_argument);
    CHECK(e.code() == tutti::errc::invalid_argument);
    what = e.what();
  }
  for (const char* needle : needles) {
    INFO("message: ", what);
    CHECK(what.find(needle) != std::string::npos);
  }
}

world_info detect(std::initializer_list<std::pair<const char*, const char*>> vars) {
  scoped_env env;
  env.set(vars);
  auto w = detect_world();
  REQUIRE(w.has_value());
  return *w;
}

void check_world(const world_info& w, launcher source, int rank, int size, int local_rank,
                 int local_size) {
  CHECK(w.source == source);
  CHECK(w.rank == rank);
  CHECK(w.size == size);
  CHECK(w.local_rank == local_rank);
  CHECK(w.local_size == local_size);
}

}  // namespace

TEST_CASE("launcher names") {
  CHECK(tutti::bootstrap::name(launcher::none) == "none");
  CHECK(tutti::bootstrap::name(launcher::torchrun) == "torchrun");
  CHECK(tutti::bootstrap::name(launcher::open_mpi) == "open_mpi");
  CHECK(tutti::bootstrap::name(launcher::mpich) == "mpich");
  CHECK(tutti::bootstrap::name(launcher::slurm) == "slurm");
}

TEST_CASE("no launcher: nullopt, and world_from_env lists what it looked for") {
  scoped_env env;
  env.set({{"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "1234"}, {"LOCAL_RANK", "0"}});
  CHECK_FALSE(detect_world().has_value());
  try {
    (void)world_from_env();
    FAIL("world_from_env found a launcher");
  } catch (const tutti::error& e) {
    CHECK(e.kind() == tutti::errc::invalid_argument);
    const std::string what = e.what();
    for (const char* var : {"RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                            "PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS"}) {
      CHECK(what.find(var) != std::string::npos);
    }
  }
}

TEST_CASE("torchrun variables") {
  SUBCASE("all of them") {
    const auto w = detect({{"RANK", "5"},
                           {"WORLD_SIZE", "8"},
                           {"LOCAL_RANK", "1"},
                           {"LOCAL_WORLD_SIZE", "4"},
                           {"MASTER_ADDR", "node-0.cluster"},
                           {"MASTER_PORT", "29500"},
                           {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
    check_world(w, launcher::torchrun, 5, 8, 1, 4);
    CHECK(w.master_addr == "node-0.cluster");
    CHECK(w.master_port == 29500);
    CHECK(w.agent_store);
    CHECK(w.restart_count == 0);
  }
  SUBCASE("TORCHELASTIC_RESTART_COUNT") {
    CHECK(detect({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"TORCHELASTIC_RESTART_COUNT", "3"}})
              .restart_count == 3);
    check_invalid({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"TORCHELASTIC_RESTART_COUNT", "-1"}},
                  {"TORCHELASTIC_RESTART_COUNT=\"-1\""});
  }
  SUBCASE("local ones missing: local = global; MASTER_* unset") {
    const auto w = detect({{"RANK", "2"}, {"WORLD_SIZE", "3"}});
    check_world(w, launcher::torchrun, 2, 3, 2, 3);
    CHECK(w.master_addr.empty());
    CHECK(w.master_port == -1);
    CHECK_FALSE(w.agent_store);
  }
  SUBCASE("LOCAL_RANK alone (torch.distributed.launch)") {
    check_world(detect({{"RANK", "6"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "2"}}),
                launcher::torchrun, 6, 8, 2, 8);
  }
  SUBCASE("agent store only for exactly \"True\"") {
    CHECK_FALSE(
        detect({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"TORCHELASTIC_USE_AGENT_STORE", "False"}})
            .agent_store);
    CHECK_FALSE(
        detect({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"TORCHELASTIC_USE_AGENT_STORE", "true"}})
            .agent_store);
  }
  SUBCASE("port bounds") {
    CHECK(detect({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "1"}}).master_port == 1);
    CHECK(detect({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "65535"}}).master_port ==
          65535);
  }
  SUBCASE("world_from_env agrees") {
    scoped_env env;
    env.set({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
    check_world(world_from_env(), launcher::torchrun, 1, 2, 1, 2);
  }
}

TEST_CASE("Open MPI variables") {
  SUBCASE("all of them") {
    const auto w = detect({{"OMPI_COMM_WORLD_RANK", "7"},
                           {"OMPI_COMM_WORLD_SIZE", "12"},
                           {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "6"},
                           {"MASTER_ADDR", "h0"},
                           {"MASTER_PORT", "4000"}});
    check_world(w, launcher::open_mpi, 7, 12, 3, 6);
    CHECK(w.master_addr == "h0");
    CHECK(w.master_port == 4000);
  }
  SUBCASE("local ones missing") {
    check_world(detect({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "3"}}),
                launcher::open_mpi, 0, 3, 0, 3);
  }
}

TEST_CASE("MPICH Hydra variables") {
  SUBCASE("with MPI_LOCALRANKID/MPI_LOCALNRANKS") {
    check_world(detect({{"PMI_RANK", "4"},
                        {"PMI_SIZE", "6"},
                        {"MPI_LOCALRANKID", "1"},
                        {"MPI_LOCALNRANKS", "3"}}),
                launcher::mpich, 4, 6, 1, 3);
  }
  SUBCASE("without: one host") {
    const auto w = detect({{"PMI_RANK", "4"}, {"PMI_SIZE", "6"}, {"MASTER_PORT", "777"}});
    check_world(w, launcher::mpich, 4, 6, 4, 6);
    CHECK(w.master_port == 777);
  }
}

TEST_CASE("Slurm variables: tasks-per-node lists give each node's local size") {
  SUBCASE("4(x2),3 on each node") {
    // Block layout: node 0 has ranks 0-3, node 1 ranks 4-7, node 2 ranks 8-10.
    check_world(detect({{"SLURM_PROCID", "1"},
                        {"SLURM_NTASKS", "11"},
                        {"SLURM_LOCALID", "1"},
                        {"SLURM_NODEID", "0"},
                        {"SLURM_TASKS_PER_NODE", "4(x2),3"}}),
                launcher::slurm, 1, 11, 1, 4);
    check_world(detect({{"SLURM_PROCID", "7"},
                        {"SLURM_NTASKS", "11"},
                        {"SLURM_LOCALID", "3"},
                        {"SLURM_NODEID", "1"},
                        {"SLURM_TASKS_PER_NODE", "4(x2),3"}}),
                launcher::slurm, 7, 11, 3, 4);
    check_world(detect({{"SLURM_PROCID", "10"},
                        {"SLURM_NTASKS", "11"},
                        {"SLURM_LOCALID", "2"},
                        {"SLURM_NODEID", "2"},
                        {"SLURM_TASKS_PER_NODE", "4(x2),3"}}),
                launcher::slurm, 10, 11, 2, 3);
  }
  SUBCASE("other list shapes") {
    const std::pair<const char*, std::vector<int>> lists[] = {
        {"16", {16}},    {"1(x4)", {1, 1, 1, 1}},    {"3,2(x3),1", {3, 2, 2, 2, 1}},
        {"2,3", {2, 3}}, {"1(x1),5(x2)", {1, 5, 5}},
    };
    for (const auto& entry : lists) {
      const char* list = entry.first;
      const std::vector<int>& counts = entry.second;
      for (std::size_t node = 0; node < counts.size(); ++node) {
        const std::string node_id = std::to_string(node);
        INFO(list, " node ", node);
        const auto w = detect({{"SLURM_PROCID", "0"},
                               {"SLURM_NTASKS", "16"},
                               {"SLURM_LOCALID", "0"},
                               {"SLURM_NODEID", node_id.c_str()},
                               {"SLURM_STEP_TASKS_PER_NODE", list}});
        CHECK(w.local_size == counts[node]);
      }
    }
  }
}

TEST_CASE("Slurm variables: which one sets the local size; a batch script is no launch") {
  using v = std::initializer_list<std::pair<const char*, const char*>>;
  const v base = {{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}};
  SUBCASE("the step's list wins over the job's") {
    scoped_env env;
    env.set(base);
    env.set({{"SLURM_NODEID", "1"},
             {"SLURM_STEP_TASKS_PER_NODE", "4,2,2"},
             {"SLURM_TASKS_PER_NODE", "8(x3)"},
             {"SLURM_NTASKS_PER_NODE", "8"}});
    check_world(*detect_world(), launcher::slurm, 5, 8, 1, 2);
  }
  SUBCASE("SLURM_NTASKS_PER_NODE when no list") {
    scoped_env env;
    env.set(base);
    env.set({{"SLURM_NTASKS_PER_NODE", "4"}});
    check_world(*detect_world(), launcher::slurm, 5, 8, 1, 4);
  }
  SUBCASE("a list without SLURM_NODEID is not used") {
    scoped_env env;
    env.set(base);
    env.set({{"SLURM_TASKS_PER_NODE", "2(x4)"}, {"SLURM_NTASKS_PER_NODE", "4"}});
    check_world(*detect_world(), launcher::slurm, 5, 8, 1, 4);
  }
  SUBCASE("no per-node information: local size = size") {
    scoped_env env;
    env.set(base);
    check_world(*detect_world(), launcher::slurm, 5, 8, 1, 8);
  }
  SUBCASE("no SLURM_LOCALID: one host") {
    check_world(detect({{"SLURM_PROCID", "5"},
                        {"SLURM_NTASKS", "8"},
                        {"SLURM_NODEID", "1"},
                        {"SLURM_TASKS_PER_NODE", "4(x2)"}}),
                launcher::slurm, 5, 8, 5, 8);
  }
  SUBCASE("SLURM_PROCID without SLURM_NTASKS is a batch script, not a launch") {
    scoped_env env;
    env.set({{"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}});
    CHECK_FALSE(detect_world().has_value());
  }
}

TEST_CASE("Slurm variables: malformed lists and ids past them raise invalid_argument") {
  SUBCASE("malformed lists") {
    for (const char* list : {"", "a", "4,", ",4", "4,,4", "4(x2", "4(2)", "(x2)", "4(x0)", "4(x)",
                             "4(x2)3", "4(x2))", "4(x-1)", "-4", "4(y2)", "4 ", "4(x2)(x3)"}) {
      INFO("list \"", list, "\"");
      check_invalid({{"SLURM_PROCID", "0"},
                     {"SLURM_NTASKS", "4"},
                     {"SLURM_LOCALID", "0"},
                     {"SLURM_NODEID", "0"},
                     {"SLURM_TASKS_PER_NODE", list}},
                    {"SLURM_TASKS_PER_NODE", list});
    }
  }
  SUBCASE("SLURM_NODEID past the list") {
    check_invalid({{"SLURM_PROCID", "0"},
                   {"SLURM_NTASKS", "4"},
                   {"SLURM_LOCALID", "0"},
                   {"SLURM_NODEID", "3"},
                   {"SLURM_TASKS_PER_NODE", "1(x2),2"}},
                  {"SLURM_TASKS_PER_NODE", "SLURM_NODEID=3", "3 nodes"});
  }
  SUBCASE("SLURM_LOCALID past this node's count") {
    check_invalid({{"SLURM_PROCID", "4"},
                   {"SLURM_NTASKS", "6"},
                   {"SLURM_LOCALID", "2"},
                   {"SLURM_NODEID", "1"},
                   {"SLURM_TASKS_PER_NODE", "4,2"}},
                  {"SLURM_LOCALID=2", "4,2"});
  }
}

TEST_CASE("precedence: RANK > Open MPI > Hydra > Slurm") {
  scoped_env env;
  env.set({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "5"}, {"SLURM_LOCALID", "0"}});
  check_world(*detect_world(), launcher::slurm, 4, 5, 0, 5);
  env.set({{"PMI_RANK", "3"}, {"PMI_SIZE", "5"}});
  check_world(*detect_world(), launcher::mpich, 3, 5, 3, 5);
  env.set({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "5"}});
  check_world(*detect_world(), launcher::open_mpi, 2, 5, 2, 5);
  env.set({{"RANK", "1"}, {"WORLD_SIZE", "5"}, {"MASTER_PORT", "5555"}});
  const auto w = *detect_world();
  check_world(w, launcher::torchrun, 1, 5, 1, 5);
  CHECK(w.master_port == 5555);
  // A lower-precedence launcher's malformed variables do not matter once a higher one matched.
  env.set({{"PMI_RANK", "junk"}});
  CHECK(detect_world()->source == launcher::torchrun);
}

TEST_CASE("malformed variables raise invalid_argument naming the variable and its value") {
  SUBCASE("integers") {
    for (const char* bad :
         {"abc", "-1", "1x", " 1", "1 ", "+1", "", "0x1", "1.0", "99999999999999999999"}) {
      INFO("RANK=\"", bad, "\"");
      check_invalid({{"RANK", bad}, {"WORLD_SIZE", "4"}}, {"RANK", bad});
    }
    check_invalid({{"RANK", "0"}, {"WORLD_SIZE", "four"}}, {"WORLD_SIZE", "four"});
    check_invalid({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "x"}}, {"LOCAL_RANK", "x"});
    check_invalid({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "-2"}},
                  {"LOCAL_WORLD_SIZE", "-2"});
    check_invalid({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2x"}},
                  {"OMPI_COMM_WORLD_SIZE", "2x"});
    check_invalid({{"PMI_RANK", "?"}, {"PMI_SIZE", "2"}}, {"PMI_RANK", "?"});
    check_invalid({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "q"}},
                  {"SLURM_LOCALID", "q"});
    check_invalid({{"SLURM_PROCID", "0"},
                   {"SLURM_NTASKS", "2"},
                   {"SLURM_LOCALID", "0"},
                   {"SLURM_NTASKS_PER_NODE", "z"}},
                  {"SLURM_NTASKS_PER_NODE", "z"});
  }
  SUBCASE("out of range") {
    check_invalid({{"RANK", "0"}, {"WORLD_SIZE", "0"}}, {"WORLD_SIZE=0", "at least 1"});
    check_invalid({{"RANK", "4"}, {"WORLD_SIZE", "4"}}, {"RANK=4", "WORLD_SIZE=4"});
    check_invalid(
        {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}},
        {"LOCAL_RANK=2", "LOCAL_WORLD_SIZE=2"});
    check_invalid(
        {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "0"}},
        {"LOCAL_WORLD_SIZE=0"});
    check_invalid(
        {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "5"}},
        {"LOCAL_WORLD_SIZE=5", "WORLD_SIZE=4"});
    // LOCAL_RANK unset is taken as RANK, which may not fit the local size.
    check_invalid({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "4"}},
                  {"LOCAL_RANK", "LOCAL_WORLD_SIZE=4"});
    check_invalid({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
                  {"OMPI_COMM_WORLD_RANK=2", "OMPI_COMM_WORLD_SIZE=2"});
    check_invalid({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "3"}},
                  {"MPI_LOCALRANKID=3"});
    check_invalid({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "0"}}, {"SLURM_NTASKS=0"});
    check_invalid({{"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "3"}}, {"SLURM_PROCID=9"});
  }
  SUBCASE("half of a rank/size pair") {
    check_invalid({{"RANK", "0"}}, {"RANK", "WORLD_SIZE is not"});
    check_invalid({{"WORLD_SIZE", "2"}}, {"WORLD_SIZE", "RANK is not"});
    check_invalid({{"OMPI_COMM_WORLD_RANK", "0"}}, {"OMPI_COMM_WORLD_SIZE is not"});
    check_invalid({{"PMI_SIZE", "2"}}, {"PMI_RANK is not"});
  }
  SUBCASE("MASTER_PORT") {
    for (const char* bad : {"0", "65536", "http", "-5", "", "80a", "4294967297"}) {
      INFO("MASTER_PORT=\"", bad, "\"");
      check_invalid({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", bad}},
                    {"MASTER_PORT", bad});
    }
  }
}

TEST_CASE("local_job_key: shared by siblings, different from the parent's own") {
  const std::string mine = tutti::bootstrap::local_job_key();
  CHECK(mine.find('-') != std::string::npos);
  CHECK(mine.rfind(std::to_string(::getppid()) + "-", 0) == 0);

  std::string keys[2];
  for (auto& key : keys) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    std::fflush(nullptr);
    std::cout.flush();  // nothing buffered for the child to print twice
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(fds[0]);
      int code = 0;
      try {
        const std::string k = tutti::bootstrap::local_job_key();
        code = ::write(fds[1], k.data(), k.size()) == static_cast<ssize_t>(k.size()) ? 0 : 2;
      } catch (...) {
        code = 3;
      }
      ::_exit(code);
    }
    ::close(fds[1]);
    char buf[128];
    ssize_t got = 0;
    while ((got = ::read(fds[0], buf, sizeof buf)) > 0) key.append(buf, static_cast<size_t>(got));
    ::close(fds[0]);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  CHECK(keys[0] == keys[1]);
  CHECK(keys[0] != mine);
  CHECK(keys[0].rfind(std::to_string(::getpid()) + "-", 0) == 0);
  // The start time after the pid is a number.
  const std::string start = keys[0].substr(keys[0].find('-') + 1);
  CHECK_FALSE(start.empty());
  CHECK(start.find_first_not_of("0123456789") == std::string::npos);
}

// ---- bootstrap::rendezvous: the one from_env / from_url behind shm, gloo and nccl ----------

namespace {

namespace bs = tutti::bootstrap;

bool file_exists(const std::string& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0;
}

/// A listening loopback socket handed to the next tcp store through TUTTI_STORE_FD (as
/// tutti::spawn does), so the test needs no free port guessed in advance.
int adopted_listener() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(fd, 16) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  REQUIRE(::setenv("TUTTI_STORE_FD", std::to_string(fd).c_str(), 1) == 0);
  return ntohs(a.sin_port);
}

/// The errc::invalid_argument `f` raises, as its full what().
template <class F>
std::string invalid_argument_of(F&& f) {
  try {
    (void)f();
  } catch (const tutti::error& e) {
    CHECK(e.kind() == tutti::errc::invalid_argument);
    return e.what();
  }
  FAIL("no error raised");
  return {};
}

const std::string invalid_argument_text =
    ": " + make_error_code(tutti::errc::invalid_argument).message();

}  // namespace

TEST_CASE("rendezvous_key: tutti/<transport>/<n>, one count per transport") {
  CHECK(bs::rendezvous_key("rdv-a") == "tutti/rdv-a/0");
  CHECK(bs::rendezvous_key("rdv-a") == "tutti/rdv-a/1");
  CHECK(bs::rendezvous_key("rdv-b") == "tutti/rdv-b/0");
  CHECK(bs::rendezvous_key("rdv-a") == "tutti/rdv-a/2");
}

TEST_CASE("rendezvous_from_env: one host without a store meets through a private file") {
  scoped_env env;
  const tutti::options opts{};
  const std::string stem = bs::private_dir() + "/" + bs::local_job_key() + ".rdv-file.";

  env.set({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  const bs::rendezvous r0 = bs::rendezvous_from_env(world_from_env(), "rdv-file", opts, "unused");
  CHECK(r0.key == "tutti/rdv-file/0");
  CHECK(r0.file == stem + "0");
  CHECK(r0.rank == 0);
  CHECK(r0.size == 1);
  CHECK(r0.local_rank == 0);
  CHECK(r0.route_host.empty());
  CHECK(r0.route_port == -1);
  REQUIRE(dynamic_cast<bs::file_store*>(r0.st.get()) != nullptr);
  r0.st->set_string(r0.key, "segment");
  CHECK(bs::file_store(r0.file).get_string(r0.key, std::chrono::seconds(1)) == "segment");
  CHECK(r0.file_to_remove() == r0.file);
  r0.remove_file();
  CHECK_FALSE(file_exists(r0.file));

  // Rank 2 of 3 on this host: the same file name scheme, and nothing to remove.
  env.set({{"RANK", "2"}, {"WORLD_SIZE", "3"}});
  const bs::rendezvous r2 = bs::rendezvous_from_env(world_from_env(), "rdv-file", opts, "unused");
  CHECK(r2.key == "tutti/rdv-file/1");
  CHECK(r2.file == stem + "1");
  CHECK(r2.rank == 2);
  CHECK(r2.size == 3);
  CHECK(r2.local_rank == 2);
  CHECK(r2.file_to_remove().empty());
  r2.remove_file();
  CHECK(file_exists(r2.file));
  CHECK(::unlink(r2.file.c_str()) == 0);

  // torchrun's agent already serves MASTER_PORT: a client of it in torch's protocol (which
  // connects on first use), keys under the restart count; no file.
  env.set({{"RANK", "0"},
           {"WORLD_SIZE", "2"},
           {"MASTER_ADDR", "127.0.0.1"},
           {"MASTER_PORT", "29500"},
           {"TORCHELASTIC_USE_AGENT_STORE", "True"},
           {"TORCHELASTIC_RESTART_COUNT", "2"}});
  const bs::rendezvous ra = bs::rendezvous_from_env(world_from_env(), "rdv-file", opts, "unused");
  CHECK(ra.key == "tutti/rdv-file/2");
  CHECK(ra.file.empty());
  CHECK(ra.route_host == "127.0.0.1");
  CHECK(ra.route_port == 29500);
  const auto* agent = dynamic_cast<bs::torch_tcp_store*>(ra.st.get());
  REQUIRE(agent != nullptr);
  CHECK(agent->host() == "127.0.0.1");
  CHECK(agent->port() == 29500);
  CHECK(agent->prefix() == "tutti/attempt_2/");
  CHECK(agent->timeout() == opts.timeout);
}

TEST_CASE("rendezvous_from_env: across hosts without a usable store, the transport's message") {
  scoped_env env;
  const std::string msg = "tutti::rdv across hosts needs a store";
  env.set({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}});
  CHECK(invalid_argument_of([&] {
          return bs::rendezvous_from_env(world_from_env(), "rdv-hosts", {}, msg);
        }) == "tutti on rank 1: " + msg + invalid_argument_text);
  // torchrun's agent serves MASTER_ADDR:MASTER_PORT: across hosts too, through its store.
  env.set({{"MASTER_ADDR", "10.0.0.1"},
           {"MASTER_PORT", "29500"},
           {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  const bs::rendezvous r = bs::rendezvous_from_env(world_from_env(), "rdv-hosts", {}, msg);
  const auto* agent = dynamic_cast<bs::torch_tcp_store*>(r.st.get());
  REQUIRE(agent != nullptr);
  CHECK(agent->host() == "10.0.0.1");
  CHECK(agent->prefix() == "tutti/attempt_0/");
  CHECK(r.route_host == "10.0.0.1");
  CHECK(r.route_port == 29500);
}

TEST_CASE("rendezvous: MASTER_ADDR:MASTER_PORT's process-wide store, and init URLs") {
  scoped_env env;
  const int port = adopted_listener();
  const std::string port_text = std::to_string(port);
  // Rank 0 of 2 on two hosts: the store at MASTER_ADDR:MASTER_PORT, which rank 0 serves.
  env.set({{"RANK", "0"},
           {"WORLD_SIZE", "2"},
           {"LOCAL_RANK", "0"},
           {"LOCAL_WORLD_SIZE", "1"},
           {"MASTER_ADDR", "127.0.0.1"},
           {"MASTER_PORT", port_text.c_str()}});
  const bs::rendezvous r = bs::rendezvous_from_env(world_from_env(), "rdv-env", {}, "unused");
  CHECK(r.key == "tutti/rdv-env/0");
  CHECK(r.st == bs::env_store(0));
  CHECK(r.route_host == "127.0.0.1");
  CHECK(r.route_port == port);
  CHECK(r.file.empty());
  CHECK(r.file_to_remove().empty());

  // env:// names the same store; its route is MASTER_ADDR:MASTER_PORT; local rank 0.
  const bs::rendezvous e = bs::rendezvous_from_url("env://", 0, 2, "rdv-url", {});
  CHECK(e.key == "tutti/rdv-url/0");
  CHECK(e.st == r.st);
  CHECK(e.route_host == "127.0.0.1");
  CHECK(e.route_port == port);
  CHECK(e.local_rank == 0);
  CHECK(e.file.empty());

  // file://: a file store on that path (the caller owns it: nothing to remove); the local rank
  // is the launcher's.
  env.set({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}});
  const std::string path = bs::private_dir() + "/rdv-url-" + std::to_string(::getpid());
  const bs::rendezvous f = bs::rendezvous_from_url("file://" + path, 3, 4, "rdv-url", {});
  CHECK(f.key == "tutti/rdv-url/1");
  CHECK(f.rank == 3);
  CHECK(f.size == 4);
  CHECK(f.local_rank == 1);
  CHECK(f.route_host.empty());
  CHECK(f.route_port == -1);
  CHECK(f.file.empty());
  CHECK(dynamic_cast<bs::file_store*>(f.st.get()) != nullptr);
  CHECK(file_exists(path));
  CHECK(::unlink(path.c_str()) == 0);

  // A URL that names no store consumes no key.
  CHECK(invalid_argument_of([] {
          return bs::rendezvous_from_url("ftp://h:1", 0, 1, "rdv-url", {});
        }).find("unknown scheme 'ftp'") != std::string::npos);
  CHECK(bs::rendezvous_key("rdv-url") == "tutti/rdv-url/2");
}

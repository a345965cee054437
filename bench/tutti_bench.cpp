// tutti-bench: every collective of tutti, measured and checked the way nccl-tests measures
// NCCL, over any transport and algorithm policy, optionally side by side with MPI and Gloo.
//
//   tutti-bench all_reduce -b 8 -e 64M -f 4 --np 4 -c 1
//   tutti-bench all_gather --transport gloo --algo ring --np 4 --json ag.json
//   tutti-bench all_reduce --np 2 --compare mpi,gloo --plot ar.png
//
// See `tutti-bench --help` and bench/README.md. Exit status: 0; 1 if any element was wrong or a
// compared peer failed; 2 on a usage error or when nothing asked for can run.

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tb/tutti_backend.hpp"

namespace {

namespace tb = tutti_bench;

#ifdef TUTTI_HAVE_GLOO
constexpr std::array<std::string_view, 4> transports{"shm", "inproc", "gloo", "cluster"};
#else
constexpr std::array<std::string_view, 2> transports{"shm", "inproc"};
#endif

int run_tutti(const tb::options& o) {
  if (o.transport == "inproc") return tb::run_inproc(o);
#ifdef TUTTI_HAVE_GLOO
  if (o.transport == "gloo") return tb::run_gloo(o);
  if (o.transport == "cluster") return tb::run_cluster(o);
#endif
  return tb::run_shm(o);
}

std::filesystem::path self_dir() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::current_path() : exe.parent_path();
}

/// Runs `argv` (PATH searched), its output going where ours goes; returns its exit status,
/// or 127 when it could not start.
int run_command(const std::vector<std::string>& argv,
                const std::vector<std::pair<std::string, std::string>>& env = {}) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) return 127;
  if (pid == 0) {
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "tutti-bench: cannot run %s: %s\n", args[0], std::strerror(errno));
    std::_Exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/// The sweep options a peer gets: the same sizes, iterations, checks, types, ops and roots.
std::vector<std::string> forwarded(const tb::options& o, const std::string& json) {
  std::vector<std::string> a{std::string(tb::name_of(o.coll)),
                             "-b",
                             std::to_string(o.min_bytes),
                             "-e",
                             std::to_string(o.max_bytes),
                             "-w",
                             std::to_string(o.warmup),
                             "-c",
                             o.check ? "1" : "0",
                             "-a",
                             std::to_string(static_cast<int>(o.average)),
                             "--json",
                             json};
  if (o.step_bytes != 0) {
    a.insert(a.end(), {"-i", std::to_string(o.step_bytes)});
  } else {
    a.insert(a.end(), {"-f", std::to_string(o.step_factor)});
  }
  if (o.iters != 0) a.insert(a.end(), {"-n", std::to_string(o.iters)});
  if (!o.in_place) a.insert(a.end(), {"--placement", "out-of-place"});
  if (!o.out_of_place) a.insert(a.end(), {"--placement", "in-place"});
  std::string types;
  for (auto t : o.types) (types.empty() ? types : types += ",") += tb::name_of(t);
  a.insert(a.end(), {"-d", types});
  if (tb::reduces(o.coll)) {
    std::string ops;
    for (auto op : o.ops) (ops.empty() ? ops : ops += ",") += tb::name_of(op);
    a.insert(a.end(), {"-o", ops});
  }
  if (tb::rooted(o.coll))
    a.insert(a.end(), {"-r", o.all_roots ? std::string("all") : std::to_string(o.roots.front())});
  return a;
}

/// Gloo's own algorithms for a collective, as tutti-bench-gloo --algo names them (the other
/// collectives have one implementation, run under the default name).
std::vector<std::string> gloo_algorithms(tb::collective c) {
  if (c == tb::collective::all_reduce) return {"ring", "bcube", "ring_chunked", "halving_doubling"};
  return {"ring"};
}

/// Prints tutti next to every peer: time per call (us) for each size, the peers' best, and
/// how many times faster tutti is than that best.
void print_comparison(const std::vector<tb::json_run>& runs) {
  if (runs.empty() || runs.front().rows.empty()) return;
  const auto& first = runs.front().rows.front();
  // One table: the first type/op/root tutti ran; per run out-of-place where it has that form,
  // else in-place (marked *).
  auto pick = [&](const tb::json_run& run, bool& in_place) {
    in_place = std::none_of(run.rows.begin(), run.rows.end(),
                            [](const tb::json_row& r) { return r.placement == "out-of-place"; });
    const std::string where = in_place ? "in-place" : "out-of-place";
    std::map<std::size_t, double> t;
    for (const auto& r : run.rows)
      if (r.type == first.type && r.redop == first.redop && r.root == first.root &&
          r.placement == where)
        t[r.size] = r.time_us;
    return t;
  };
  std::vector<std::map<std::size_t, double>> times;
  std::vector<std::string> heads;
  for (const auto& run : runs) {
    bool in_place = false;
    times.push_back(pick(run, in_place));
    heads.push_back(run.label.substr(0, in_place ? 13 : 14) + (in_place ? "*" : ""));
  }
  std::printf("\n# side by side: %s %s, root %d; time per call (us), out-of-place (* in-place)\n",
              first.type.c_str(), first.redop.c_str(), first.root);
  std::printf("# %10s", "size (B)");
  for (const auto& h : heads) std::printf("  %14s", h.c_str());
  std::printf("  %14s  %8s\n", "best peer", "speedup");
  for (const auto& [size, tutti_us] : times.front()) {
    std::printf("  %10zu  %14s", size, tb::detail::format_time(tutti_us).c_str());
    double best = 0;
    std::string best_label = "-";
    for (std::size_t i = 1; i < runs.size(); ++i) {
      const auto it = times[i].find(size);
      if (it == times[i].end()) {
        std::printf("  %14s", "N/A");
        continue;
      }
      std::printf("  %14s", tb::detail::format_time(it->second).c_str());
      if (best == 0 || it->second < best) {
        best = it->second;
        best_label = runs[i].label;
      }
    }
    if (best > 0)
      std::printf("  %14.14s  %7.2fx\n", best_label.c_str(), best / tutti_us);
    else
      std::printf("  %14s  %8s\n", "-", "-");
  }
  std::printf("# speedup = best peer's time / tutti's time (> 1: tutti is faster)\n");
  std::fflush(stdout);
}

int plot(const tb::options& o, const std::string& json, const std::string& png, bool quiet) {
  const auto script = self_dir() / "plot";
  if (!std::filesystem::exists(script)) {
    std::fprintf(stderr, "tutti-bench: %s not found (it is copied next to tutti-bench)\n",
                 script.c_str());
    return 1;
  }
  std::vector<std::string> argv{
      script.string(), "-o",   png, "--collective", std::string(tb::name_of(o.coll)),
      "--placement",   "auto", json};
  const int rc = run_command(argv);
  if (rc != 0 && !quiet) std::fprintf(stderr, "tutti-bench: plotting %s failed\n", png.c_str());
  return rc == 0 ? 0 : 1;
}

/// One peer's run over the sweep: what to call it in a failure, its command, its JSON.
struct peer_run {
  std::string what;
  std::vector<std::string> argv;
  std::string json;
};

/// The peers' runs (--compare) of `np` ranks writing into `dir`: MPI once, Gloo once per
/// algorithm. A peer that was not built is reported and left out (`missing`).
std::vector<peer_run> peer_runs(const tb::options& o, int np, const std::filesystem::path& dir,
                                bool& missing) {
  std::vector<peer_run> runs;
  for (const auto& peer : o.compare) {
    const auto exe = self_dir() / (peer == "mpi" ? "tutti-bench-mpi" : "tutti-bench-gloo");
    if (!std::filesystem::exists(exe)) {
      std::fprintf(stderr, "tutti-bench: %s not built (%s)\n", exe.c_str(),
                   peer == "mpi" ? "MPI was not found at configure time"
                                 : "configure with -DTUTTI_WITH_GLOO=ON");
      missing = true;
      continue;
    }
    if (peer == "mpi") {
      std::vector<std::string> argv{"mpirun",          "-np",       std::to_string(np),
                                    "--oversubscribe", "--bind-to", "none",
                                    "--mca",           "pml",       "ob1",
                                    "--mca",           "btl",       "self,vader"};
      if (::geteuid() == 0) argv.insert(argv.begin() + 1, "--allow-run-as-root");
      argv.push_back(exe.string());
      runs.push_back({"MPI", std::move(argv), (dir / "mpi.json").string()});
      continue;
    }
    for (const auto& algo : gloo_algorithms(o.coll))
      runs.push_back({"Gloo (" + algo + ")",
                      {exe.string(), "--np", std::to_string(np), "--algo", algo},
                      (dir / ("gloo-" + algo + ".json")).string()});
  }
  return runs;
}

/// tutti, then each peer over the same sweep; a side-by-side table, one JSON, one plot.
int compare(tb::options o) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("tutti-bench-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  struct cleanup {
    std::filesystem::path p;
    ~cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(p, ec);
    }
  } guard{dir};

  o.np = o.np != 0 ? o.np : 2;
  std::vector<std::string> files{(dir / "tutti.json").string()};
  {
    tb::options mine = o;
    mine.json = files.front();
    if (const int rc = run_tutti(mine); rc != 0) return rc;
  }
  bool failed = false;
  for (auto& peer : peer_runs(o, o.np, dir, failed)) {
    for (auto& a : forwarded(o, peer.json)) peer.argv.push_back(std::move(a));
    std::printf("\n");
    if (const int rc = run_command(peer.argv); rc != 0) {
      std::fprintf(stderr, "tutti-bench: the %s peer failed (exit %d)\n", peer.what.c_str(), rc);
      failed = true;
      continue;
    }
    files.push_back(peer.json);  // only the runs that succeeded
  }
  std::vector<tb::json_run> runs;
  for (const auto& f : files) runs.push_back(tb::read_run(f));
  print_comparison(runs);
  const std::string merged = o.json.empty() ? (dir / "all.json").string() : o.json;
  tb::write_merged(merged, runs);
  const std::string png =
      o.plot.empty() ? "tutti-bench-" + std::string(tb::name_of(o.coll)) + ".png" : o.plot;
  if (plot(o, merged, png, false) != 0) failed = true;
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  return tb::program_main(argc, argv,
                          {.name = "tutti-bench",
                           .spawns_ranks = true,
                           .transports = transports,
                           .algos = tb::tutti_algorithms,
                           .compares = true},
                          [](const tb::options& o) -> int {
                            // Refuse an inexact check before spawning any rank.
                            if (o.check && o.np != 0)
                              for (const auto t : o.types)
                                for (const auto op : o.ops)
                                  (void)tb::detail::with_type(t, [&]<class T>() {
                                    return tb::value_plan::make<T>(op, o.np, tb::name_of(t));
                                  });
                            if (!o.compare.empty()) {
                              if (tutti::bootstrap::detect_world()) {
                                std::fprintf(stderr,
                                             "tutti-bench: --compare starts every run itself "
                                             "(--np N); run it outside a launcher\n");
                                return 2;
                              }
                              return compare(o);
                            }
                            if (!o.plot.empty() && o.json.empty()) {
                              std::fprintf(stderr, "tutti-bench: --plot needs --json FILE\n");
                              return 2;
                            }
                            const int rc = run_tutti(o);
                            if (rc == 0 && !o.plot.empty()) return plot(o, o.json, o.plot, false);
                            return rc;
                          });
}

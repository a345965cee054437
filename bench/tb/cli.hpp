#pragma once
// tutti-bench's command line, shared by tutti-bench and its peers (bench/peers/): nccl-tests'
// flags where they make sense, plus what a CPU library needs (--transport, --algo, --np, --json,
// --compare, --plot). Parsing never prints: the caller decides which rank reports.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "names.hpp"

namespace tutti_bench {

struct options {
  collective coll = collective::all_reduce;
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{32} << 20;
  std::size_t step_bytes = 0;   // -i: additive step (used when -f is not given)
  std::size_t step_factor = 2;  // -f: multiplicative step
  std::size_t iters = 0;        // 0: adaptive (~0.2 s per size)
  std::size_t warmup = 5;
  bool check = true;
  std::vector<redop> ops{redop::sum};
  std::vector<datatype> types{datatype::float32};
  std::vector<int> roots{0};  // -r all: every rank in turn
  bool all_roots = false;
  average_mode average = average_mode::mean;
  std::string transport;  // programs with a choice (first of the program's list by default)
  std::string algo;
  int np = 0;                // --np N: spawn N local ranks (0: the launcher's world, else 2)
  bool out_of_place = true;  // --placement: which blocks to measure
  bool in_place = true;
  bool csv = false;  // --csv: impl,ranks,bytes,time_us,algbw,busbw,wrong instead of the table
  std::string json;
  std::string plot;
  std::vector<std::string> compare;
  std::vector<std::string> argv;  // the command line, for the JSON and for peers
};

/// What a program accepts beyond the common flags.
struct program {
  std::string_view name;
  bool spawns_ranks = false;                       // --np N
  std::span<const std::string_view> transports{};  // --transport NAME (first = default)
  std::span<const std::string_view> algos{};       // --algo NAME (first = default)
  bool compares = false;                           // --compare, --plot
};

struct parse_result {
  enum class status { run, help, error };
  status what = status::run;
  options opts;
  std::string message;  // the error, or the usage text for help
};

[[nodiscard]] inline std::string usage(const program& p) {
  // Built with append only: GCC 12's -Wrestrict misfires on `"literal" + std::string` at -O3.
  std::string u = "usage: ";
  u.append(p.name);
  u += " COLLECTIVE [options]\n"
       "  COLLECTIVE: all_reduce broadcast reduce all_gather reduce_scatter gather scatter "
       "all_to_all\n"
       "  -b, --minbytes N        smallest size, bytes (K/M/G suffixes)          [8]\n"
       "  -e, --maxbytes N        largest size, bytes (K/M/G suffixes)           [32M]\n"
       "  -f, --stepfactor N      multiply the size by N each step (N >= 2)      [2]\n"
       "  -i, --stepbytes N       add N bytes each step instead of -f\n"
       "  -n, --iters N           timed calls per size      [adaptive: ~0.2 s, 5..100000]\n"
       "  -w, --warmup_iters N    untimed calls per size                         [5]\n"
       "  -c, --check N           0: no check; else check every size exactly     [1]\n"
       "  -o, --op OP             sum prod min max avg, or all                   [sum]\n"
       "  -d, --datatype T        int8 uint8 int32 uint32 int64 uint64 half float double\n"
       "                          bfloat16, or all                               [float]\n"
       "  -r, --root N            root of rooted collectives, or all             [0]\n"
       "  -a, --average N         time over ranks: 0 rank 0, 1 mean, 2 min, 3 max [1]\n"
       "  -J, --json FILE         write every measurement to FILE as JSON\n"
       "      --placement P       out-of-place, in-place or both                 [both]\n"
       "      --csv               print impl,ranks,bytes,time_us,algbw,busbw,wrong rows (the\n"
       "                          out-of-place block, or in-place where that is the only one)\n";
  if (p.spawns_ranks)
    u += "      --np N              spawn N local ranks          [launcher's world, else 2]\n";
  auto list = [&u](std::string_view flag, std::span<const std::string_view> names) {
    if (names.empty()) return;
    u += "      ";
    u.append(flag);
    u += " NAME      one of:";
    for (auto a : names) (u += ' ').append(a);
    (u += "  [").append(names.front()) += "]\n";
  };
  list("--transport", p.transports);
  list("--algo     ", p.algos);
  if (p.compares)
    u += "      --compare LIST      also run these peers over the same sizes: mpi, gloo\n"
         "      --plot FILE.png     plot busbw and latency of every run (bench/plot, gnuplot)\n";
  u += "  -h, --help\n";
  return u;
}

namespace detail {

// nccl-tests' size syntax: digits with an optional K, M or G (powers of 1024).
[[nodiscard]] inline std::size_t parse_size(std::string_view flag, const std::string& s) {
  std::size_t pos = 0;
  unsigned long long v = 0;
  std::string f(flag);
  try {
    if (s.empty() || s.front() == '-') throw std::invalid_argument(s);
    v = std::stoull(s, &pos);
  } catch (const std::exception&) {
    throw std::invalid_argument(f + ": not a size: '" + s + "'");
  }
  unsigned shift = 0;
  if (pos + 1 == s.size()) {
    switch (s[pos]) {
      case 'k':
      case 'K':
        shift = 10;
        break;
      case 'm':
      case 'M':
        shift = 20;
        break;
      case 'g':
      case 'G':
        shift = 30;
        break;
      default:
        throw std::invalid_argument(f + ": unknown suffix in '" + s + "' (use K, M or G)");
    }
  } else if (pos != s.size()) {
    throw std::invalid_argument(f + ": not a size: '" + s + "'");
  }
  if (v > (std::numeric_limits<std::size_t>::max() >> shift))
    throw std::invalid_argument(f + ": too large: '" + s + "'");
  return static_cast<std::size_t>(v) << shift;
}

[[nodiscard]] inline std::size_t parse_count(std::string_view flag, const std::string& s) {
  std::size_t pos = 0;
  unsigned long long v = 0;
  try {
    if (s.empty() || s.front() == '-') throw std::invalid_argument(s);
    v = std::stoull(s, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos == 0 || pos != s.size())
    throw std::invalid_argument(std::string(flag) + ": not a non-negative integer: '" + s + "'");
  return static_cast<std::size_t>(v);
}

// A finite number that is all of `s` (model-scaling's and bench_ddp_buckets' rates and sizes).
[[nodiscard]] inline double parse_real(std::string_view flag, const std::string& s) {
  char* end = nullptr;
  const double v = s.empty() ? 0.0 : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v))
    throw std::invalid_argument(std::string(flag) + ": '" + s + "' is not a number");
  return v;
}

[[nodiscard]] inline std::optional<collective> parse_collective(std::string_view s) {
  std::string n(s);
  if (n.size() > 5 && n.ends_with("_perf")) n.resize(n.size() - 5);  // nccl-tests' binary names
  for (auto c : all_collectives) {
    std::string plain(name_of(c));
    std::erase(plain, '_');
    if (n == name_of(c) || n == plain) return c;
  }
  return std::nullopt;
}

[[nodiscard]] inline std::optional<datatype> parse_datatype(std::string_view s) {
  for (auto t : all_datatypes)
    if (s == name_of(t)) return t;
  if (s == "float32") return datatype::float32;
  if (s == "float64") return datatype::float64;
  if (s == "float16" || s == "fp16") return datatype::float16;
  if (s == "bf16") return datatype::bfloat16;
  if (s == "int") return datatype::int32;
  if (s == "char") return datatype::int8;
  return std::nullopt;
}

[[nodiscard]] inline std::optional<redop> parse_redop(std::string_view s) {
  for (auto o : all_redops)
    if (s == name_of(o)) return o;
  return std::nullopt;
}

[[nodiscard]] inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const auto comma = s.find(',', start);
    const auto end = comma == std::string::npos ? s.size() : comma;
    if (end > start) out.push_back(s.substr(start, end - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

/// -o's value: ops, comma-separated, or all.
[[nodiscard]] inline std::vector<redop> parse_ops(const std::string& arg, const std::string& s) {
  if (s == "all") return {all_redops.begin(), all_redops.end()};
  std::vector<redop> ops;
  for (const auto& part : split_list(s)) {
    const auto op = parse_redop(part);
    if (!op)
      throw std::invalid_argument(arg + ": unknown op '" + part +
                                  "' (sum, prod, min, max, avg or all)");
    ops.push_back(*op);
  }
  if (ops.empty()) throw std::invalid_argument(arg + ": empty");
  return ops;
}

/// -d's value: datatypes, comma-separated, or all.
[[nodiscard]] inline std::vector<datatype> parse_types(const std::string& arg,
                                                       const std::string& s) {
  if (s == "all") return {all_datatypes.begin(), all_datatypes.end()};
  std::vector<datatype> types;
  for (const auto& part : split_list(s)) {
    const auto t = parse_datatype(part);
    if (!t) throw std::invalid_argument(arg + ": unknown datatype '" + part + "'");
    types.push_back(*t);
  }
  if (types.empty()) throw std::invalid_argument(arg + ": empty");
  return types;
}

/// `value` where `known` has it (--transport, --algo); else the error says which are.
[[nodiscard]] inline std::string one_of(const std::string& value,
                                        std::span<const std::string_view> known,
                                        const std::string& refusal) {
  if (std::find(known.begin(), known.end(), value) != known.end()) return value;
  std::string names;
  for (auto k : known) (names += ' ').append(k);
  throw std::invalid_argument(refusal + " (known:" + names + ")");
}

/// What the options seen so far leave for the checks after the last one.
struct parse_state {
  bool have_collective = false;
  bool have_factor = false;
  bool have_step_bytes = false;
  std::string root_arg = "0";
};

/// Applies `arg` if it shapes the sweep (sizes, iterations, checks, types, ops, roots,
/// averaging, placement), taking its value from `next()`; false when it is not one of those.
template <class Next>
[[nodiscard]] bool parse_sweep_option(const std::string& arg, Next&& next, options& o,
                                      parse_state& st) {
  if (arg == "-b" || arg == "--minbytes") {
    o.min_bytes = parse_size(arg, next());
  } else if (arg == "-e" || arg == "--maxbytes") {
    o.max_bytes = parse_size(arg, next());
  } else if (arg == "-f" || arg == "--stepfactor") {
    o.step_factor = parse_count(arg, next());
    st.have_factor = true;
  } else if (arg == "-i" || arg == "--stepbytes") {
    o.step_bytes = parse_size(arg, next());
    st.have_step_bytes = true;
  } else if (arg == "-n" || arg == "--iters") {
    o.iters = parse_count(arg, next());
    if (o.iters == 0) throw std::invalid_argument(arg + ": must be at least 1");
  } else if (arg == "-w" || arg == "--warmup_iters") {
    o.warmup = parse_count(arg, next());
  } else if (arg == "-c" || arg == "--check") {
    o.check = parse_count(arg, next()) != 0;
  } else if (arg == "-o" || arg == "--op") {
    o.ops = parse_ops(arg, next());
  } else if (arg == "-d" || arg == "--datatype") {
    o.types = parse_types(arg, next());
  } else if (arg == "-r" || arg == "--root") {
    st.root_arg = next();
  } else if (arg == "-a" || arg == "--average") {
    const std::size_t a = parse_count(arg, next());
    if (a > 3) throw std::invalid_argument(arg + ": 0, 1, 2 or 3");
    o.average = static_cast<average_mode>(a);
  } else if (arg == "--placement") {
    const std::string& v = next();
    if (v != "out-of-place" && v != "in-place" && v != "both")
      throw std::invalid_argument("--placement: out-of-place, in-place or both");
    o.out_of_place = v != "in-place";
    o.in_place = v != "out-of-place";
  } else {
    return false;
  }
  return true;
}

/// Applies `arg` if it says how the program runs and reports (output, ranks, transport,
/// algorithm, peers, plot: those `p` has); false when it is not one of those.
template <class Next>
[[nodiscard]] bool parse_run_option(const std::string& arg, Next&& next, bool has_value, options& o,
                                    const program& p) {
  if (arg == "--csv") {
    if (has_value) throw std::invalid_argument("--csv takes no value");
    o.csv = true;
  } else if (arg == "-J" || arg == "--json" || arg == "--output_file") {
    o.json = next();
  } else if (p.spawns_ranks && arg == "--np") {
    const std::size_t n = parse_count(arg, next());
    if (n < 1 || n > 1024) throw std::invalid_argument("--np: between 1 and 1024");
    o.np = static_cast<int>(n);
  } else if (!p.transports.empty() && arg == "--transport") {
    const std::string& t = next();
    o.transport = one_of(t, p.transports, "--transport: '" + t + "' is not built in");
  } else if (!p.algos.empty() && arg == "--algo") {
    const std::string& a = next();
    o.algo = one_of(a, p.algos, "--algo: unknown algorithm '" + a + "'");
  } else if (p.compares && arg == "--compare") {
    o.compare = split_list(next());
    for (const auto& peer : o.compare)
      if (peer != "mpi" && peer != "gloo")
        throw std::invalid_argument("--compare: unknown peer '" + peer + "' (mpi, gloo)");
  } else if (p.compares && arg == "--plot") {
    o.plot = next();
  } else {
    return false;
  }
  return true;
}

/// The checks that need every option: a collective, sizes and step, roots; and ops only for
/// a collective that reduces.
inline void finish_options(options& o, const parse_state& st) {
  if (!st.have_collective) throw std::invalid_argument("name a collective");
  if (o.min_bytes == 0) throw std::invalid_argument("-b/--minbytes: must be at least 1");
  if (o.min_bytes > o.max_bytes)
    throw std::invalid_argument("-b/--minbytes (" + std::to_string(o.min_bytes) +
                                ") exceeds -e/--maxbytes (" + std::to_string(o.max_bytes) + ")");
  if (st.have_step_bytes && st.have_factor)
    throw std::invalid_argument("-i/--stepbytes and -f/--stepfactor exclude each other");
  if (st.have_step_bytes && o.step_bytes == 0)
    throw std::invalid_argument("-i/--stepbytes: must be at least 1");
  if (!st.have_step_bytes && o.step_factor < 2)
    throw std::invalid_argument("-f/--stepfactor: must be at least 2");
  if (!st.have_step_bytes) o.step_bytes = 0;
  if (st.root_arg == "all" || st.root_arg == "-1") {
    o.all_roots = true;
  } else {
    const std::size_t root = parse_count("-r/--root", st.root_arg);
    if (root > 4096) throw std::invalid_argument("-r/--root: too large");
    o.roots = {static_cast<int>(root)};
  }
  if (!reduces(o.coll)) o.ops = {redop::none};
}

}  // namespace detail

/// Parses the command line. `argv[1]` (or any non-flag argument) names the collective.
[[nodiscard]] inline parse_result parse(int argc, char** argv, const program& p) {
  parse_result r;
  options& o = r.opts;
  for (int i = 0; i < argc; ++i) o.argv.emplace_back(argv[i]);
  if (!p.transports.empty()) o.transport = std::string(p.transports.front());
  if (!p.algos.empty()) o.algo = std::string(p.algos.front());
  detail::parse_state st;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      std::string value;
      bool has_value = false;
      if (arg.rfind("--", 0) == 0) {
        if (const auto eq = arg.find('='); eq != std::string::npos) {
          value = arg.substr(eq + 1);
          arg.resize(eq);
          has_value = true;
        }
      }
      auto next = [&]() -> const std::string& {
        if (!has_value) {
          if (i + 1 >= argc) throw std::invalid_argument(arg + ": missing value");
          value = argv[++i];
          has_value = true;
        }
        return value;
      };
      if (arg == "-h" || arg == "--help") {
        r.what = parse_result::status::help;
        r.message = usage(p);
        return r;
      }
      if (arg.empty() || arg.front() != '-') {
        if (st.have_collective)
          throw std::invalid_argument("one collective per run ('" + std::string(name_of(o.coll)) +
                                      "' and '" + arg + "')");
        const auto c = detail::parse_collective(arg);
        if (!c) throw std::invalid_argument("unknown collective '" + arg + "'");
        o.coll = *c;
        st.have_collective = true;
      } else if (!detail::parse_sweep_option(arg, next, o, st) &&
                 !detail::parse_run_option(arg, next, has_value, o, p)) {
        throw std::invalid_argument("unknown argument '" + arg + "'");
      }
    }
    detail::finish_options(o, st);
  } catch (const std::invalid_argument& e) {
    r.what = parse_result::status::error;
    r.message = std::string(p.name) + ": " + e.what() + "\n" + usage(p);
  }
  return r;
}

/// The sizes of a sweep: from min to max by the factor (or the additive step), never past max.
[[nodiscard]] inline std::vector<std::size_t> sizes_of(const options& o) {
  std::vector<std::size_t> out;
  for (std::size_t s = o.min_bytes; s <= o.max_bytes;) {
    out.push_back(s);
    if (o.step_bytes != 0) {
      if (s > o.max_bytes - o.step_bytes) break;
      s += o.step_bytes;
    } else {
      if (s > o.max_bytes / o.step_factor) break;
      s *= o.step_factor;
    }
  }
  return out;
}

}  // namespace tutti_bench

#pragma once
// The all_reduce sweep shared by bench/mpi_all_reduce.cpp and bench/shm_all_reduce.cpp:
// nccl-tests' command line, measurement rule, result check and columns, so the two programs
// differ only in the library call they time.
//
// Measurement, per message size (identical in both programs):
//   barrier; `warmup` calls, each timed; barrier; `iters` calls timed as one block with
//   std::chrono::steady_clock; time per call = elapsed / iters, then the MAX over ranks (an
//   all_reduce through the library under test, outside the timed block).
//   Without -n, iters = clamp(ceil(0.2 s / t_warm), 5, 100000), where t_warm is the fastest
//   warm-up call (the max of that over ranks, so every rank runs the same count); with -w 0
//   one untimed-in-the-result calibration call stands in for the warm-up.
// Before the first size, ~0.5 s of one-element calls let the job settle.
// Check (-c 1): rank r's input element i is 1 + r + h(i), h a hash of i in [0, 31], so every
// sum is a small integer, exact in float, and an element taken from the wrong rank or offset
// shows. The output is poisoned (-1) before the timed block, so what is compared, bit for bit,
// is what the last timed call wrote. #wrong is summed over ranks; any wrong element makes the
// program exit 1.
// Columns (rank 0): size(B) count type redop time(us) algbw(GB/s) busbw(GB/s) #wrong, with
// algbw = size / time (GB = 1e9 B) and busbw = algbw * 2(n-1)/n, nccl-tests' all_reduce factor.

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <exception>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace tutti_bench {

inline constexpr double target_seconds_per_size = 0.2;
inline constexpr std::size_t min_adaptive_iters = 5;
inline constexpr std::size_t max_adaptive_iters = 100000;
inline constexpr double settle_seconds = 0.5;

enum class datatype { float32, float64, int32 };

[[nodiscard]] constexpr std::string_view name_of(datatype t) noexcept {
  switch (t) {
    case datatype::float64:
      return "double";
    case datatype::int32:
      return "int32";
    case datatype::float32:
      break;
  }
  return "float";
}

struct options {
  std::size_t min_bytes = 4;
  std::size_t max_bytes = std::size_t{256} << 20;
  std::size_t step_factor = 2;
  std::size_t iters = 0;  // 0: adaptive
  std::size_t warmup = 5;
  datatype type = datatype::float32;
  bool check = true;
  bool csv = false;
  int np = 2;                      // programs that fork their ranks (--np)
  std::string algo = "automatic";  // programs with a choice of algorithm (--algo)
};

/// What a program accepts beyond nccl-tests' flags.
struct program {
  std::string_view name;
  bool forks_ranks = false;                 // --np N
  std::span<const std::string_view> algos;  // --algo NAME, one of these (first = default)
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
  u += " [options]\n"
       "  -b, --minbytes N      smallest message, bytes (K/M/G suffixes)   [4]\n"
       "  -e, --maxbytes N      largest message, bytes (K/M/G suffixes)    [256M]\n"
       "  -f, --stepfactor N    multiply the size by N each step (N >= 2)  [2]\n"
       "  -n, --iters N         timed calls per size     [adaptive: ~0.2 s, 5..100000]\n"
       "  -w, --warmup_iters N  untimed calls per size                     [5]\n"
       "  -d, --datatype T      float, double or int32                     [float]\n"
       "  -c, --check 0|1       verify the last timed call exactly         [1]\n"
       "      --csv             print impl,ranks,bytes,time_us,algbw,busbw,wrong\n";
  if (p.forks_ranks)
    u += "      --np N            ranks to fork                              [2]\n";
  if (!p.algos.empty()) {
    u += "      --algo NAME       one of:";
    for (auto a : p.algos) (u += ' ').append(a);
    (u += "  [").append(p.algos.front()) += "]\n";
  }
  u += "  -h, --help\n";
  return u;
}

namespace detail {

// nccl-tests' size syntax: digits with an optional K, M or G (powers of 1024).
[[nodiscard]] inline std::size_t parse_size(std::string_view flag, const std::string& s) {
  std::size_t pos = 0;
  unsigned long long v = 0;
  try {
    if (s.empty() || s.front() == '-') throw std::invalid_argument(s);
    v = std::stoull(s, &pos);
  } catch (const std::exception&) {
    throw std::invalid_argument(std::string(flag) + ": not a size: '" + s + "'");
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
        throw std::invalid_argument(std::string(flag) + ": unknown suffix in '" + s +
                                    "' (use K, M or G)");
    }
  } else if (pos != s.size()) {
    throw std::invalid_argument(std::string(flag) + ": not a size: '" + s + "'");
  }
  if (v > (std::numeric_limits<std::size_t>::max() >> shift))
    throw std::invalid_argument(std::string(flag) + ": too large: '" + s + "'");
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

}  // namespace detail

/// Parses nccl-tests-style arguments. Never prints: the caller decides which rank reports.
[[nodiscard]] inline parse_result parse(int argc, char** argv, const program& p) {
  parse_result r;
  options& o = r.opts;
  if (!p.algos.empty()) o.algo = std::string(p.algos.front());
  try {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      std::string value;
      bool has_value = false;
      // --flag=value
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
      } else if (arg == "-b" || arg == "--minbytes") {
        o.min_bytes = detail::parse_size(arg, next());
      } else if (arg == "-e" || arg == "--maxbytes") {
        o.max_bytes = detail::parse_size(arg, next());
      } else if (arg == "-f" || arg == "--stepfactor") {
        o.step_factor = detail::parse_count(arg, next());
      } else if (arg == "-n" || arg == "--iters") {
        o.iters = detail::parse_count(arg, next());
        if (o.iters == 0) throw std::invalid_argument(arg + ": must be at least 1");
      } else if (arg == "-w" || arg == "--warmup_iters") {
        o.warmup = detail::parse_count(arg, next());
      } else if (arg == "-d" || arg == "--datatype") {
        const std::string& t = next();
        if (t == "float" || t == "float32")
          o.type = datatype::float32;
        else if (t == "double" || t == "float64")
          o.type = datatype::float64;
        else if (t == "int32" || t == "int")
          o.type = datatype::int32;
        else
          throw std::invalid_argument(arg + ": unsupported datatype '" + t +
                                      "' (float, double or int32)");
      } else if (arg == "-c" || arg == "--check") {
        const std::size_t c = detail::parse_count(arg, next());
        if (c > 1) throw std::invalid_argument(arg + ": 0 or 1");
        o.check = c == 1;
      } else if (arg == "--csv") {
        if (has_value) throw std::invalid_argument("--csv takes no value");
        o.csv = true;
      } else if (p.forks_ranks && arg == "--np") {
        const std::size_t n = detail::parse_count(arg, next());
        if (n < 1 || n > 1024) throw std::invalid_argument("--np: between 1 and 1024");
        o.np = static_cast<int>(n);
      } else if (!p.algos.empty() && arg == "--algo") {
        const std::string& a = next();
        if (std::find(p.algos.begin(), p.algos.end(), a) == p.algos.end())
          throw std::invalid_argument("--algo: unknown algorithm '" + a + "'");
        o.algo = a;
      } else {
        throw std::invalid_argument("unknown argument '" + arg + "'");
      }
    }
    if (o.min_bytes == 0) throw std::invalid_argument("-b/--minbytes: must be at least 1");
    if (o.min_bytes > o.max_bytes)
      throw std::invalid_argument("-b/--minbytes (" + std::to_string(o.min_bytes) +
                                  ") exceeds -e/--maxbytes (" + std::to_string(o.max_bytes) + ")");
    if (o.step_factor < 2) throw std::invalid_argument("-f/--stepfactor: must be at least 2");
  } catch (const std::invalid_argument& e) {
    r.what = parse_result::status::error;
    r.message = std::string(p.name) + ": " + e.what() + "\n" + usage(p);
  }
  return r;
}

/// A library under test, as the sweep sees it. `all_reduce` sums `count` elements of `in`
/// into `out` (out-of-place) across all ranks; `max` and `sum` reduce one value across ranks
/// with the same library. `describe` heads the table; `impl` is the CSV's first column.
template <class B>
concept backend =
    requires(B& b, const float* fi, float* fo, const double* di, double* dout,
             const std::int32_t* ii, std::int32_t* io, std::size_t n, double x, std::uint64_t u) {
      { b.rank() } -> std::convertible_to<int>;
      { b.size() } -> std::convertible_to<int>;
      b.barrier();
      b.all_reduce(fi, fo, n);
      b.all_reduce(di, dout, n);
      b.all_reduce(ii, io, n);
      { b.max(x) } -> std::convertible_to<double>;
      { b.sum(u) } -> std::convertible_to<std::uint64_t>;
      { b.describe() } -> std::convertible_to<std::string>;
      { b.impl() } -> std::convertible_to<std::string>;
    };

namespace detail {

[[nodiscard]] constexpr std::uint32_t hash_index(std::size_t i) noexcept {
  auto h = static_cast<std::uint64_t>(i) * 0x9E3779B97F4A7C15ULL;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ULL;
  h ^= h >> 32;
  return static_cast<std::uint32_t>(h & 31U);
}

template <class T>
[[nodiscard]] constexpr T input_value(int rank, std::size_t i) noexcept {
  return static_cast<T>(1 + static_cast<std::uint32_t>(rank) + hash_index(i));
}

// sum over r < n of (1 + r + h(i)): n(1 + h(i)) + n(n-1)/2.
template <class T>
[[nodiscard]] constexpr T expected_value(int n, std::size_t i) noexcept {
  const auto un = static_cast<std::uint64_t>(n);
  return static_cast<T>(un * (1 + hash_index(i)) + un * (un - 1) / 2);
}

// Bit-exact comparison: every expected value is an integer the type represents exactly.
template <class T>
[[nodiscard]] bool same_bits(T a, T b) noexcept {
  using bits = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;
  return std::bit_cast<bits>(a) == std::bit_cast<bits>(b);
}

[[nodiscard]] inline std::string local_date() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  std::array<char, 64> buf{};
  const std::size_t n = std::strftime(buf.data(), buf.size(), "%Y-%m-%d %H:%M:%S %Z", &tm);
  return std::string(buf.data(), n);
}

// nccl-tests' time format: fewer decimals as the number grows, 7 columns wide.
[[nodiscard]] inline std::string format_time(double us) {
  std::array<char, 32> buf{};
  int n = 0;
  if (us >= 10000.0)
    n = std::snprintf(buf.data(), buf.size(), "%7.0f", us);
  else if (us >= 100.0)
    n = std::snprintf(buf.data(), buf.size(), "%7.1f", us);
  else
    n = std::snprintf(buf.data(), buf.size(), "%7.2f", us);
  return std::string(buf.data(), static_cast<std::size_t>(std::max(n, 0)));
}

[[nodiscard]] inline std::size_t adaptive_iters(double seconds_per_call) {
  if (!(seconds_per_call > 0.0)) return max_adaptive_iters;
  const double want = std::ceil(target_seconds_per_size / seconds_per_call);
  if (want >= static_cast<double>(max_adaptive_iters)) return max_adaptive_iters;
  return std::max(min_adaptive_iters, static_cast<std::size_t>(want));
}

template <class T, backend B>
int sweep(B& b, const options& o, std::string_view program_name) {
  using clock = std::chrono::steady_clock;
  const int rank = b.rank();
  const int n = b.size();
  const bool out0 = rank == 0;
  const std::size_t max_count = o.max_bytes / sizeof(T);

  // Allocated and written once at the largest size, like nccl-tests: every size uses a prefix.
  std::vector<T> in(max_count);
  std::vector<T> out(max_count);
  for (std::size_t i = 0; i < max_count; ++i) in[i] = input_value<T>(rank, i);

  const std::string type_name(name_of(o.type));
  if (out0) {
    if (o.csv) {
      std::printf("impl,ranks,bytes,time_us,algbw,busbw,wrong\n");
    } else {
      std::printf("# %.*s: %d ranks, %s, %s sum out-of-place, %s\n",
                  static_cast<int>(program_name.size()), program_name.data(), n,
                  std::string(b.describe()).c_str(), type_name.c_str(), local_date().c_str());
      std::array<char, 96> iters{};
      if (o.iters != 0)
        std::snprintf(iters.data(), iters.size(), "%zu", o.iters);
      else
        std::snprintf(iters.data(), iters.size(), "adaptive (~%g s per size, %zu..%zu)",
                      target_seconds_per_size, min_adaptive_iters, max_adaptive_iters);
      std::printf(
          "#  minBytes %zu maxBytes %zu step: %zu(factor) warmup iters: %zu iters: %s "
          "validation: %d\n#\n",
          o.min_bytes, o.max_bytes, o.step_factor, o.warmup, iters.data(), o.check ? 1 : 0);
      std::printf("# %10s  %12s  %8s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type", "redop",
                  "time", "algbw", "busbw", "#wrong");
      std::printf("# %10s  %12s  %8s  %6s  %7s  %6s  %6s\n", "(B)", "(elements)", "", "", "(us)",
                  "(GB/s)", "(GB/s)");
    }
    std::fflush(stdout);
  }

  // Settle before the first size: a launcher finishing its start-up (mpirun, orted) and the
  // first calls' set-up otherwise inflate the smallest sizes, measured first, several times.
  {
    const std::size_t count = std::min<std::size_t>(max_count, 1);
    b.barrier();
    const auto t0 = clock::now();
    do {
      for (int i = 0; i < 100; ++i) b.all_reduce(in.data(), out.data(), count);
    } while (b.max(std::chrono::duration<double>(clock::now() - t0).count()) < settle_seconds);
  }

  const double bus_factor = 2.0 * static_cast<double>(n - 1) / static_cast<double>(n);
  std::uint64_t total_wrong = 0;
  double busbw_sum = 0.0;
  std::size_t rows = 0;
  for (std::size_t size = o.min_bytes; size <= o.max_bytes;) {
    const std::size_t count = size / sizeof(T);
    const std::size_t bytes = count * sizeof(T);
    const T* src = in.data();
    T* dst = out.data();

    b.barrier();
    double fastest = std::numeric_limits<double>::infinity();
    const std::size_t warm = o.warmup == 0 && o.iters == 0 ? 1 : o.warmup;
    for (std::size_t w = 0; w < warm; ++w) {
      const auto t0 = clock::now();
      b.all_reduce(src, dst, count);
      fastest = std::min(fastest, std::chrono::duration<double>(clock::now() - t0).count());
    }
    const std::size_t iters = o.iters != 0 ? o.iters : adaptive_iters(b.max(fastest));
    if (o.check) std::fill_n(dst, count, static_cast<T>(-1));

    b.barrier();
    const auto t0 = clock::now();
    for (std::size_t it = 0; it < iters; ++it) b.all_reduce(src, dst, count);
    const double elapsed = std::chrono::duration<double>(clock::now() - t0).count();
    const double seconds = b.max(elapsed / static_cast<double>(iters));

    std::uint64_t wrong = 0;
    if (o.check)
      for (std::size_t i = 0; i < count; ++i)
        if (!same_bits(dst[i], expected_value<T>(n, i))) ++wrong;
    wrong = b.sum(wrong);
    total_wrong += wrong;

    const double us = seconds * 1e6;
    const double algbw = static_cast<double>(bytes) / seconds / 1e9;
    const double busbw = algbw * bus_factor;
    busbw_sum += busbw;
    ++rows;
    if (out0) {
      if (o.csv)
        std::printf("%s,%d,%zu,%.6g,%.6g,%.6g,%llu\n", std::string(b.impl()).c_str(), n, bytes, us,
                    algbw, busbw, static_cast<unsigned long long>(wrong));
      else
        std::printf("  %10zu  %12zu  %8s  %6s  %7s  %6.2f  %6.2f  %6llu\n", bytes, count,
                    type_name.c_str(), "sum", format_time(us).c_str(), algbw, busbw,
                    static_cast<unsigned long long>(wrong));
      std::fflush(stdout);
    }
    if (size > o.max_bytes / o.step_factor) break;  // the next step would pass max (or wrap)
    size *= o.step_factor;
  }

  if (out0 && !o.csv) {
    std::printf("# Out of bounds values : %llu %s\n", static_cast<unsigned long long>(total_wrong),
                total_wrong == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %g\n#\n",
                rows == 0 ? 0.0 : busbw_sum / static_cast<double>(rows));
    std::fflush(stdout);
  }
  if (out0 && total_wrong != 0)
    std::fprintf(stderr, "%.*s: %llu wrong elements\n", static_cast<int>(program_name.size()),
                 program_name.data(), static_cast<unsigned long long>(total_wrong));
  // No rank leaves before rank 0 has printed: a launcher may kill the job at the first rank
  // that exits non-zero.
  b.barrier();
  return total_wrong == 0 ? 0 : 1;
}

}  // namespace detail

/// Runs the sweep `o` describes on `b`; returns the process exit code (0, or 1 on any wrong
/// element). Every rank calls it with the same options.
template <backend B>
[[nodiscard]] int run(B& b, const options& o, std::string_view program_name) {
  switch (o.type) {
    case datatype::float64:
      return detail::sweep<double>(b, o, program_name);
    case datatype::int32:
      return detail::sweep<std::int32_t>(b, o, program_name);
    case datatype::float32:
      break;
  }
  return detail::sweep<float>(b, o, program_name);
}

/// main() of a program that forks its own ranks: parses the command line (help on stdout and
/// exit 0; a usage error on stderr and exit 2), then returns `run(options)`, which starts the
/// ranks; an exception from it is printed and exits 2.
template <class Run>
int forking_main(int argc, char** argv, const program& p, Run&& run) {
  const auto parsed = parse(argc, argv, p);
  switch (parsed.what) {
    case parse_result::status::help:
      std::fputs(parsed.message.c_str(), stdout);
      return 0;
    case parse_result::status::error:
      std::fputs(parsed.message.c_str(), stderr);
      return 2;
    case parse_result::status::run:
      break;
  }
  try {
    return run(parsed.opts);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(p.name.size()), p.name.data(), e.what());
    return 2;
  }
}

}  // namespace tutti_bench

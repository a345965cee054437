#pragma once
// tutti-bench's measurement loop, shared by tutti-bench and its peers so that every library is
// measured by the same rule:
//
//   for each type, op and root; for each size: out-of-place, then in-place (where the library
//   has that form):
//     fill the buffers; barrier; `warmup` calls, each timed; barrier; `iters` calls, each timed
//     on its own with std::chrono::steady_clock, back to back.
//     Without -n, iters = clamp(ceil(0.2 s / t_warm), 5, 100000), t_warm the fastest warm-up
//     call (the slowest rank's), so every rank runs the same count.
//     time = each rank's mean per call, p50/p99 = each rank's per-call percentiles; each
//     combined over ranks as -a says (default: the mean over ranks, as nccl-tests).
//     With -c: refill (in-place) or zero the output (out-of-place), one more call, compare it
//     bit for bit with the expected values (tb/data.hpp); #wrong is summed over ranks.
//   algbw = bytes / time (GB = 1e9 B), busbw = algbw x nccl-tests' factor for the collective.
//
// Statistics and checks travel through the library under test, outside the timed calls.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli.hpp"
#include "data.hpp"
#include "progress.hpp"
#include "report.hpp"
#include "types.hpp"

namespace tutti_bench {

enum class stat { min, max, sum };

/// One call of a collective, as the driver asks a backend to make it. In place, `in == out`
/// is the one buffer (shape::buf_elems elements).
template <class T>
struct call_args {
  collective coll = collective::all_reduce;
  redop op = redop::sum;
  placement where = placement::out_of_place;
  const T* in = nullptr;
  T* out = nullptr;
  shape s;  // s.count: per-rank elements (per block for blocked collectives); buffer lengths
  int root = 0;
};

/// A library under test. `unsupported` says why a (collective, placement, type, op) cannot
/// run, or returns "" when it can; `call` makes one call.
template <class B>
concept backend = requires(B& b, const B& cb, double x, std::uint64_t u, stat s, collective c,
                           placement p, datatype t, redop o, const call_args<float>& a) {
  { cb.rank() } -> std::convertible_to<int>;
  { cb.size() } -> std::convertible_to<int>;
  b.barrier();
  { b.reduce_stat(x, s) } -> std::convertible_to<double>;
  { b.sum(u) } -> std::convertible_to<std::uint64_t>;
  { cb.unsupported(c, p, t, o) } -> std::convertible_to<std::string>;
  { cb.info() } -> std::convertible_to<run_info>;
  b.call(a);
};

namespace detail {

[[nodiscard]] inline std::size_t adaptive_iters(double seconds_per_call) {
  if (!(seconds_per_call > 0.0)) return max_adaptive_iters;
  const double want = std::ceil(target_seconds_per_size / seconds_per_call);
  if (want >= static_cast<double>(max_adaptive_iters)) return max_adaptive_iters;
  return std::max(min_adaptive_iters, static_cast<std::size_t>(want));
}

[[nodiscard]] inline double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const auto idx = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
  return v[std::min(idx, v.size() - 1)];
}

template <class B>
[[nodiscard]] double combine(B& b, double x, average_mode a) {
  switch (a) {
    case average_mode::rank0: {
      const double mine = b.rank() == 0 ? x : 0.0;
      return b.reduce_stat(mine, stat::sum);
    }
    case average_mode::min:
      return b.reduce_stat(x, stat::min);
    case average_mode::max:
      return b.reduce_stat(x, stat::max);
    case average_mode::mean:
      break;
  }
  return b.reduce_stat(x, stat::sum) / static_cast<double>(b.size());
}

template <class T, backend B>
measurement measure(B& b, const options& o, const shape& s, const dataset<T>& data, placement where,
                    std::vector<T>& in, std::vector<T>& out) {
  using clock = std::chrono::steady_clock;
  const bool in_place = where == placement::in_place;
  call_args<T> a{o.coll,     data.op(), where,      in_place ? out.data() : in.data(),
                 out.data(), s,         data.root()};

  if (in_place)
    data.fill_in_place(out.data(), s);
  else
    data.fill_input(in.data(), s);

  b.barrier();
  double fastest = std::numeric_limits<double>::infinity();
  const std::size_t warm = o.warmup == 0 && o.iters == 0 ? 1 : o.warmup;
  for (std::size_t w = 0; w < warm; ++w) {
    const auto t0 = clock::now();
    b.call(a);
    fastest = std::min(fastest, std::chrono::duration<double>(clock::now() - t0).count());
  }
  measurement m;
  m.ran = true;
  m.iters = o.iters != 0 ? o.iters : adaptive_iters(b.reduce_stat(fastest, stat::max));

  std::vector<double> per_call(m.iters);
  b.barrier();
  for (std::size_t it = 0; it < m.iters; ++it) {
    const auto t0 = clock::now();
    b.call(a);
    per_call[it] = std::chrono::duration<double>(clock::now() - t0).count();
  }
  double total = 0;
  for (const double d : per_call) total += d;
  const double seconds = combine(b, total / static_cast<double>(m.iters), o.average);
  m.time_us = seconds * 1e6;
  m.p50_us = combine(b, percentile(per_call, 0.50), o.average) * 1e6;
  m.p99_us = combine(b, percentile(per_call, 0.99), o.average) * 1e6;
  m.algbw = seconds > 0 ? static_cast<double>(s.bytes) / seconds / 1e9 : 0.0;
  m.busbw = m.algbw * s.bus_factor;

  if (o.check) {
    if (in_place)
      data.fill_in_place(out.data(), s);
    else
      std::fill_n(out.data(), s.out_elems, T{});
    b.barrier();
    b.call(a);
    m.checked = true;
    m.wrong = b.sum(data.count_wrong(out.data(), s, where));
  }
  return m;
}

/// Prints "program: what" on stderr (rank 0 calls it).
inline void complain(std::string_view program, const std::string& what) {
  std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(program.size()), program.data(),
               what.c_str());
}

/// The roots the sweep visits: -1 alone for a collective without one, else -r's (or every
/// rank with -r all).
[[nodiscard]] inline std::vector<int> roots_of(const options& o, int n) {
  if (!rooted(o.coll)) return {-1};
  if (!o.all_roots) return o.roots;
  std::vector<int> all;
  for (int r = 0; r < n; ++r) all.push_back(r);
  return all;
}

/// A (type, op) pair the sweep runs, in the placements the backend has for it.
struct combo {
  datatype type;
  redop op;
  bool oop;
  bool ip;
  value_plan plan;  // the inputs (unchecked runs keep the default)
};

/// The (type, op) pairs the backend supports (the rest said once on stderr by rank 0, `say`);
/// false when the check data cannot be planned (why said), every rank alike.
template <backend B>
[[nodiscard]] bool plan_combos(B& b, const options& o, std::vector<combo>& combos, auto say) {
  const int n = b.size();
  for (const auto t : o.types)
    for (const auto op : o.ops) {
      const std::string why_o = o.out_of_place
                                    ? b.unsupported(o.coll, placement::out_of_place, t, op)
                                    : std::string("--placement in-place");
      const std::string why_i = o.in_place ? b.unsupported(o.coll, placement::in_place, t, op)
                                           : std::string("--placement out-of-place");
      if (!why_o.empty() && !why_i.empty()) {
        say("skipping " + std::string(name_of(t)) + " " + std::string(name_of(op)) + ": " + why_o);
        continue;
      }
      value_plan plan;
      if (o.check) {
        try {
          plan = with_type(t, [&]<class T>() { return value_plan::make<T>(op, n, name_of(t)); });
        } catch (const std::invalid_argument& e) {
          say(e.what());
          return false;
        }
      }
      combos.push_back({t, op, why_o.empty(), why_i.empty(), plan});
    }
  return true;
}

/// Barriers for at least 0.3 s (the slowest rank's clock): a launcher finishing its start-up
/// otherwise inflates the first sizes measured.
template <backend B>
void settle(B& b) {
  b.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  do {
    for (int i = 0; i < 20; ++i) b.barrier();
  } while (
      b.reduce_stat(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                    stat::max) < 0.3);
}

/// What the sweep found: every row, wrong elements over every measurement, and the bus
/// bandwidths to average.
struct sweep_result {
  std::vector<row> rows;
  std::uint64_t wrong = 0;
  double busbw_sum = 0;
  std::size_t busbw_count = 0;
};

/// Measures every combo, root and size, printing each row as it comes (rank 0).
template <backend B>
[[nodiscard]] sweep_result sweep(B& b, const options& o, const std::vector<combo>& combos,
                                 const std::vector<int>& roots,
                                 const std::vector<std::size_t>& sizes, const run_info& info) {
  const int n = b.size();
  const bool out0 = b.rank() == 0;
  std::string csv_impl = info.label;  // "tutti:shm:automatic", "mpi", "gloo:ring"
  std::replace(csv_impl.begin(), csv_impl.end(), ' ', ':');
  sweep_result res;
  progress prog(out0);
  const std::size_t total_rows = combos.size() * roots.size() * sizes.size();
  for (const auto& c : combos) {
    with_type(c.type, [&]<class T>() {
      const shape biggest = shape_of(o.coll, o.max_bytes, sizeof(T), n);
      std::vector<T> in(std::max(biggest.in_elems, std::size_t{1}));
      std::vector<T> out(std::max({biggest.out_elems, biggest.buf_elems, std::size_t{1}}));
      for (const int root : roots) {
        // Collectives without a root print -1 and give the dataset 0 (unused).
        const dataset<T> data(o.coll, c.op, b.rank(), n, root < 0 ? 0 : root, c.plan);
        for (const std::size_t size : sizes) {
          const shape s = shape_of(o.coll, size, sizeof(T), n);
          row r{s.bytes, s.count, std::string(name_of(c.type)), std::string(name_of(c.op)), root,
                {},      {}};
          if (c.oop) r.oop = measure<T>(b, o, s, data, placement::out_of_place, in, out);
          if (c.ip) r.ip = measure<T>(b, o, s, data, placement::in_place, in, out);
          for (const measurement* m : {&r.oop, &r.ip}) {
            if (!m->ran) continue;
            res.wrong += m->wrong;
            res.busbw_sum += m->busbw;
            ++res.busbw_count;
          }
          if (out0 && o.csv) {
            const measurement& m = r.oop.ran ? r.oop : r.ip;
            std::printf("%s,%d,%zu,%.6g,%.6g,%.6g,%llu\n", csv_impl.c_str(), n, r.size, m.time_us,
                        m.algbw, m.busbw, static_cast<unsigned long long>(m.wrong));
            std::fflush(stdout);
          } else if (out0) {
            print_row(stdout, r);
            std::fflush(stdout);
          }
          res.rows.push_back(std::move(r));
          prog.update(std::string(name_of(o.coll)) + " " + std::string(name_of(c.type)) + " " +
                          std::to_string(size) + " B",
                      res.rows.size(), total_rows);
        }
      }
    });
  }
  prog.finish();
  return res;
}

}  // namespace detail

/// Runs the whole sweep `o` describes on `b` and prints the table on rank 0 (stdout); writes
/// --json there too. Returns the process exit code: 0, 1 if any element was wrong, 2 if
/// nothing the options asked for can run on this backend. Every rank calls it alike.
template <backend B>
[[nodiscard]] int run(B& b, const options& o, std::string_view program_name) {
  const int n = b.size();
  const bool out0 = b.rank() == 0;
  const run_info info = b.info();
  const auto say = [&](const std::string& what) {
    if (out0) detail::complain(program_name, what);
  };
  // Every rank finds the same problems; they leave together (a launcher may stop the job at
  // the first rank that exits).
  auto give_up = [&b]() {
    b.barrier();
    return 2;
  };
  const std::vector<int> roots = detail::roots_of(o, n);
  for (const int r : roots)
    if (r >= n) {
      say("-r " + std::to_string(r) + ": there are only " + std::to_string(n) + " ranks");
      return give_up();
    }
  std::vector<detail::combo> combos;
  if (!detail::plan_combos(b, o, combos, say)) return give_up();
  if (combos.empty()) {
    say("nothing to run: " + info.label + " cannot run " + std::string(name_of(o.coll)) +
        " with these types and ops");
    return give_up();
  }

  if (out0) print_preamble(o, info, n, program_name);
  detail::settle(b);
  const detail::sweep_result res = detail::sweep(b, o, combos, roots, sizes_of(o), info);

  if (out0 && !o.csv) {
    std::printf("# Out of bounds values : %llu %s\n", static_cast<unsigned long long>(res.wrong),
                res.wrong == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %g \n#\n",
                res.busbw_count == 0 ? 0.0 : res.busbw_sum / static_cast<double>(res.busbw_count));
    std::printf("# Collective test concluded: %s\n", std::string(name_of(o.coll)).c_str());
    std::fflush(stdout);
  }
  if (out0) {
    if (!o.json.empty()) write_json(o.json, info, o, n, res.rows);
    if (res.wrong != 0) say(std::to_string(res.wrong) + " wrong elements");
  }
  // No rank leaves before rank 0 has printed: a launcher may kill the job at the first rank
  // that exits non-zero.
  b.barrier();
  return res.wrong == 0 ? 0 : 1;
}

/// main() of a program: parses the command line (help on stdout and exit 0; a usage error on
/// stderr and exit 2), then returns `run(options)`; an exception from it is printed, exit 2.
template <class Run>
int program_main(int argc, char** argv, const program& p, Run&& run) {
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
    detail::complain(p.name, e.what());
    return 2;
  }
}

}  // namespace tutti_bench

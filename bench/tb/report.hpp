#pragma once
// tutti-bench's results: one row per size (out-of-place and in-place measurements), printed
// as nccl-tests' table and written as JSON ("tutti-bench/1", documented in bench/README.md).
// The JSON writer puts every result row on a line of its own, so read_rows() can read back
// what it wrote without a JSON library (tutti-bench --compare merges its peers' files that way).

#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cli.hpp"

namespace tutti_bench {

/// What ran: heads the table and the JSON run.
struct run_info {
  std::string impl;       // tutti, mpi, gloo
  std::string label;      // legend text: "tutti shm automatic"
  std::string transport;  // shm, inproc, gloo (tcp), mpi
  std::string algo;
  std::string library;  // "tutti 0.1.0", "Open MPI v4.1.4", ...
};

/// One measurement: a (size, type, op, root, placement) cell of the table.
struct measurement {
  bool ran = false;
  double time_us = 0;  // per call, over ranks as -a says
  double p50_us = 0;   // per-call percentiles of each rank, combined like time_us
  double p99_us = 0;
  double algbw = 0;  // GB/s (1e9)
  double busbw = 0;
  std::size_t iters = 0;
  bool checked = false;
  std::uint64_t wrong = 0;
};

struct row {
  std::size_t size = 0;
  std::size_t count = 0;
  std::string type;
  std::string redop;
  int root = -1;
  measurement oop;
  measurement ip;
};

namespace detail {

[[nodiscard]] inline std::string local_date() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  std::array<char, 64> buf{};
  const std::size_t n = std::strftime(buf.data(), buf.size(), "%Y-%m-%d %H:%M:%S %Z", &tm);
  return std::string(buf.data(), n);
}

[[nodiscard]] inline std::string host_name() {
  std::array<char, 256> buf{};
  if (::gethostname(buf.data(), buf.size() - 1) != 0) return "unknown";
  return std::string(buf.data());
}

[[nodiscard]] inline std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        auto v = line.substr(colon + 1);
        const auto first = v.find_first_not_of(" \t");
        return first == std::string::npos ? std::string() : v.substr(first);
      }
    }
  }
  return "unknown CPU";
}

// nccl-tests' time format: fewer decimals as the number grows.
[[nodiscard]] inline std::string format_time(double us) {
  std::array<char, 32> buf{};
  int n = 0;
  if (us >= 10000.0)
    n = std::snprintf(buf.data(), buf.size(), "%.0f", us);
  else if (us >= 100.0)
    n = std::snprintf(buf.data(), buf.size(), "%.1f", us);
  else
    n = std::snprintf(buf.data(), buf.size(), "%.2f", us);
  return std::string(buf.data(), static_cast<std::size_t>(n > 0 ? n : 0));
}

[[nodiscard]] inline std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          std::array<char, 8> esc{};
          std::snprintf(esc.data(), esc.size(), "\\u%04x", static_cast<unsigned>(c));
          out += esc.data();
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

[[nodiscard]] inline std::string json_number(double v) {
  std::array<char, 40> buf{};
  std::snprintf(buf.data(), buf.size(), "%.9g", v);
  return buf.data();
}

}  // namespace detail

/// The column header, nccl-tests' layout with p50 and p99 added to each block.
inline void print_header(std::FILE* f) {
  // Each label centred over its block (the row prefix is 50 columns, a block 52).
  std::fprintf(f, "#%69s%s%50s\n", "", "out-of-place", "in-place");
  std::fprintf(f,
               "# %10s  %12s  %8s  %6s  %4s  %8s %8s %8s  %6s  %6s  %6s  %8s %8s %8s  %6s  "
               "%6s  %6s\n",
               "size", "count", "type", "redop", "root", "time", "p50", "p99", "algbw", "busbw",
               "#wrong", "time", "p50", "p99", "algbw", "busbw", "#wrong");
  std::fprintf(f,
               "# %10s  %12s  %8s  %6s  %4s  %8s %8s %8s  %6s  %6s  %6s  %8s %8s %8s  %6s  "
               "%6s  %6s\n",
               "(B)", "(elements)", "", "", "", "(us)", "(us)", "(us)", "(GB/s)", "(GB/s)", "",
               "(us)", "(us)", "(us)", "(GB/s)", "(GB/s)", "");
}

inline void print_row(std::FILE* f, const row& r) {
  std::fprintf(f, "  %10zu  %12zu  %8s  %6s  %4d", r.size, r.count, r.type.c_str(), r.redop.c_str(),
               r.root);
  for (const measurement* m : {&r.oop, &r.ip}) {
    if (!m->ran) {
      std::fprintf(f, "  %8s %8s %8s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A", "N/A", "N/A");
      continue;
    }
    const std::string wrong = m->checked ? std::to_string(m->wrong) : "N/A";
    std::fprintf(f, "  %8s %8s %8s  %6.2f  %6.2f  %6s", detail::format_time(m->time_us).c_str(),
                 detail::format_time(m->p50_us).c_str(), detail::format_time(m->p99_us).c_str(),
                 m->algbw, m->busbw, wrong.c_str());
  }
  std::fputc('\n', f);
}

/// The table's heading (or the CSV header), on stdout.
inline void print_preamble(const options& o, const run_info& info, int n,
                           std::string_view program_name) {
  if (o.csv) {
    std::printf("impl,ranks,bytes,time_us,algbw,busbw,wrong\n");
    std::fflush(stdout);
    return;
  }
  std::printf("# %.*s %s: %s, %d ranks, %s\n", static_cast<int>(program_name.size()),
              program_name.data(), std::string(name_of(o.coll)).c_str(), info.label.c_str(), n,
              info.library.c_str());
  std::string iters = o.iters != 0 ? std::to_string(o.iters) : "adaptive (~0.2 s, 5..100000)";
  std::string step = o.step_bytes != 0 ? std::to_string(o.step_bytes) + "(bytes)"
                                       : std::to_string(o.step_factor) + "(factor)";
  std::printf(
      "#  minBytes %zu maxBytes %zu step: %s warmup iters: %zu iters: %s validation: %d "
      "average: %d\n",
      o.min_bytes, o.max_bytes, step.c_str(), o.warmup, iters.c_str(), o.check ? 1 : 0,
      static_cast<int>(o.average));
  std::printf("#  %s, %s, %u cores, %s\n#\n", detail::host_name().c_str(),
              detail::cpu_model().c_str(), std::thread::hardware_concurrency(),
              detail::local_date().c_str());
  print_header(stdout);
  std::fflush(stdout);
}

/// Writes one run as a "tutti-bench/1" file.
inline void write_json(const std::string& path, const run_info& info, const options& o, int ranks,
                       const std::vector<row>& rows) {
  std::ostringstream j;
  using detail::json_number;
  using detail::json_string;
  std::string command;
  for (const auto& a : o.argv) {
    if (!command.empty()) command += ' ';
    command += a;
  }
  j << "{\"format\": \"tutti-bench/1\",\n\"runs\": [\n{\n";
  j << "\"impl\": " << json_string(info.impl) << ",\n";
  j << "\"label\": " << json_string(info.label) << ",\n";
  j << "\"collective\": " << json_string(name_of(o.coll)) << ",\n";
  j << "\"transport\": " << json_string(info.transport) << ",\n";
  j << "\"algo\": " << json_string(info.algo) << ",\n";
  j << "\"ranks\": " << ranks << ",\n";
  j << "\"library\": " << json_string(info.library) << ",\n";
  j << "\"date\": " << json_string(detail::local_date()) << ",\n";
  j << "\"host\": " << json_string(detail::host_name()) << ",\n";
  j << "\"cpu\": " << json_string(detail::cpu_model()) << ",\n";
  j << "\"cores\": " << std::thread::hardware_concurrency() << ",\n";
  j << "\"command\": " << json_string(command) << ",\n";
  j << "\"iters\": " << o.iters << ",\n\"warmup\": " << o.warmup
    << ",\n\"check\": " << (o.check ? "true" : "false") << ",\n";
  j << "\"results\": [\n";
  bool first = true;
  for (const auto& r : rows) {
    for (const auto& [m, where] :
         {std::pair{&r.oop, placement::out_of_place}, std::pair{&r.ip, placement::in_place}}) {
      if (!m->ran) continue;
      if (!first) j << ",\n";
      first = false;
      j << "{\"size\": " << r.size << ", \"count\": " << r.count
        << ", \"type\": " << json_string(r.type) << ", \"redop\": " << json_string(r.redop)
        << ", \"root\": " << r.root << ", \"placement\": " << json_string(name_of(where))
        << ", \"iters\": " << m->iters << ", \"time_us\": " << json_number(m->time_us)
        << ", \"p50_us\": " << json_number(m->p50_us) << ", \"p99_us\": " << json_number(m->p99_us)
        << ", \"algbw\": " << json_number(m->algbw) << ", \"busbw\": " << json_number(m->busbw)
        << ", \"wrong\": " << (m->checked ? std::to_string(m->wrong) : std::string("null")) << "}";
    }
  }
  j << "\n]\n}\n]}\n";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << j.str();
  out.flush();
  if (!out) throw std::runtime_error("cannot write " + path);
}

// ---- reading back what write_json wrote (tutti-bench --compare) ---------------------------

/// One result row of a run, as read back: what the side-by-side table needs.
struct json_row {
  std::size_t size = 0;
  std::string type, redop, placement;
  int root = -1;
  double time_us = 0;
};

struct json_run {
  std::string label;
  std::string body;  // the run object's text, to merge files
  std::vector<json_row> rows;
};

namespace detail {

// The value of "key" in a one-line flat object; strings unescaped only as far as we escape.
[[nodiscard]] inline std::optional<std::string> field(std::string_view line, std::string_view key) {
  std::string pat = "\"";
  pat.append(key);
  pat += "\": ";
  const auto at = line.find(pat);
  if (at == std::string_view::npos) return std::nullopt;
  auto rest = line.substr(at + pat.size());
  if (!rest.empty() && rest.front() == '"') {
    std::string out;
    for (std::size_t i = 1; i < rest.size(); ++i) {
      if (rest[i] == '\\' && i + 1 < rest.size()) {
        out += rest[++i];
        continue;
      }
      if (rest[i] == '"') return out;
      out += rest[i];
    }
    return std::nullopt;
  }
  const auto end = rest.find_first_of(",}");
  return std::string(rest.substr(0, end));
}

}  // namespace detail

/// Reads a file written by write_json. Throws std::runtime_error on anything else.
[[nodiscard]] inline json_run read_run(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream all;
  all << in.rdbuf();
  const std::string text = all.str();
  const std::string head = "{\"format\": \"tutti-bench/1\",\n\"runs\": [\n";
  const std::string tail = "\n]}\n";
  if (text.rfind(head, 0) != 0 || text.size() < head.size() + tail.size() ||
      text.compare(text.size() - tail.size(), tail.size(), tail) != 0)
    throw std::runtime_error(path + " is not a tutti-bench/1 file from this program");
  json_run run;
  run.body = text.substr(head.size(), text.size() - head.size() - tail.size());
  std::istringstream lines(run.body);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("\"label\": ", 0) == 0) {
      run.label = detail::field(line, "label").value_or("");
      continue;
    }
    if (line.rfind("{\"size\": ", 0) != 0) continue;
    json_row r;
    auto num = [&](std::string_view key) { return detail::field(line, key).value_or("0"); };
    r.size = static_cast<std::size_t>(std::stoull(num("size")));
    r.type = detail::field(line, "type").value_or("");
    r.redop = detail::field(line, "redop").value_or("");
    r.placement = detail::field(line, "placement").value_or("");
    r.root = std::stoi(num("root"));
    r.time_us = std::stod(num("time_us"));
    run.rows.push_back(std::move(r));
  }
  return run;
}

/// Writes several runs (their bodies as read) into one "tutti-bench/1" file.
inline void write_merged(const std::string& path, const std::vector<json_run>& runs) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << "{\"format\": \"tutti-bench/1\",\n\"runs\": [\n";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (i != 0) out << ",\n";
    out << runs[i].body;
  }
  out << "\n]}\n";
  out.flush();
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace tutti_bench

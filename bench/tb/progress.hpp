#pragma once
// tutti-bench's progress line on stderr, for sweeps that run long.

#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>

namespace tutti_bench::detail {

/// Prints "[tutti-bench] ..." progress on stderr once a sweep has run for a while: rewritten
/// in place on a terminal, a line at most every 10 s otherwise.
class progress {
 public:
  explicit progress(bool on) : on_(on), tty_(on && ::isatty(2) == 1) {}
  void update(const std::string& what, std::size_t done, std::size_t total) {
    if (!on_) return;
    const auto now = clock::now();
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    if (elapsed < 3.0) return;
    if (!tty_ && std::chrono::duration<double>(now - last_).count() < 10.0) return;
    last_ = now;
    std::fprintf(stderr, "%s[tutti-bench] %s  %zu/%zu rows  %.0f s%s", tty_ ? "\r\033[K" : "",
                 what.c_str(), done, total, elapsed, tty_ ? "" : "\n");
    std::fflush(stderr);
    shown_ = true;
  }
  void finish() {
    if (shown_ && tty_) std::fputs("\r\033[K", stderr);
  }

 private:
  using clock = std::chrono::steady_clock;
  bool on_;
  bool tty_;
  bool shown_ = false;
  clock::time_point start_ = clock::now();
  clock::time_point last_ = start_;
};

}  // namespace tutti_bench::detail

// Pieces that the stand-alone harnesses (tests/soak, tests/faults, tests/mismatch) share.
// Header-only; each harness includes it as "../harness_common.hpp". Nothing here draws
// random numbers, so the harnesses' documented seeds keep their meaning.
#pragma once

#include <stdlib.h>  // mkdtemp

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include <tutti/tutti.hpp>

namespace tutti_harness {

/// Calls fn with the reduction op object that `k` names (avg for any kind not listed).
template <class Fn>
void with_op(tutti::op_kind k, Fn&& fn) {
  switch (k) {
    case tutti::op_kind::sum:
      return fn(tutti::sum);
    case tutti::op_kind::prod:
      return fn(tutti::prod);
    case tutti::op_kind::min:
      return fn(tutti::min);
    case tutti::op_kind::max:
      return fn(tutti::max);
    default:
      return fn(tutti::avg);
  }
}

/// A fresh directory `<tmp>/<tool>-XXXXXX` for one world's file store, removed afterwards.
/// On failure it prints "<tool>: mkdtemp: ..." and exits with status 2.
class temp_dir {
 public:
  explicit temp_dir(const char* tool) {
    std::string name(tool);
    name += "-XXXXXX";
    std::string t = (std::filesystem::temp_directory_path() / name).string();
    if (mkdtemp(t.data()) == nullptr) {
      std::string what(tool);
      what += ": mkdtemp";
      std::perror(what.c_str());
      std::exit(2);
    }
    path_ = t;
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  [[nodiscard]] std::string url() const {
    std::string u = "file://";
    u += path_;
    u += "/store";
    return u;
  }

 private:
  std::string path_;
};

}  // namespace tutti_harness

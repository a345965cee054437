#pragma once
// The number of GPUs tutti::spawn's ranks may use, found WITHOUT initialising CUDA: a CUDA
// context does not survive fork(), so the parent of the ranks must not touch the CUDA runtime
// (no cudaGetDeviceCount). The NVIDIA driver lists one entry per GPU under
// /proc/driver/nvidia/gpus; CUDA_VISIBLE_DEVICES, when set, caps the count (an empty value
// hides every GPU).

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string_view>
#include <system_error>

namespace gpu_count {

[[nodiscard]] inline int visible_gpus() {
  int n = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc/driver/nvidia/gpus", ec), end;
       !ec && it != end; it.increment(ec))
    ++n;
  if (const char* env = std::getenv("CUDA_VISIBLE_DEVICES")) {
    int listed = 0;
    std::string_view rest(env);
    while (!rest.empty()) {
      const auto comma = rest.find(',');
      if (!rest.substr(0, comma).empty()) ++listed;
      rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    }
    n = std::min(n, listed);
  }
  return n;
}

}  // namespace gpu_count

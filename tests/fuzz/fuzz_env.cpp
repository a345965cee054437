// libFuzzer target: the launcher environment parser (detect_world), with arbitrary values in
// the variables it reads.
//
// Input: values separated by '\n', assigned in order to the variables below; a value starting
// with '!' leaves that variable unset. Properties: detect_world returns or raises
// tutti::error(errc::invalid_argument); a world it returns is consistent (0 <= rank < size,
// 0 <= local_rank < local_size <= size, master_port -1 or in 1..65535).

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <tutti/bootstrap/env.hpp>
#include <tutti/core/error.hpp>

#include "fuzz_check.hpp"

using fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  for (const char* var : tutti::detail::launcher_variables) ::unsetenv(var);
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  for (const char* var : tutti::detail::launcher_variables) {
    if (rest.empty()) break;
    const auto nl = rest.find('\n');
    const std::string value(rest.substr(0, nl));
    rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
    if (value.find('\0') != std::string::npos || (!value.empty() && value.front() == '!')) continue;
    ::setenv(var, value.c_str(), 1);
  }
  try {
    if (const auto w = tutti::bootstrap::detect_world()) {
      check(w->rank >= 0 && w->rank < w->size);
      check(w->local_rank >= 0 && w->local_rank < w->local_size && w->local_size <= w->size);
      check(w->master_port == -1 || (w->master_port >= 1 && w->master_port <= 65535));
    }
  } catch (const tutti::error& e) {
    check(e.code() == tutti::errc::invalid_argument);
  }
  for (const char* var : tutti::detail::launcher_variables) ::unsetenv(var);
  return 0;
}

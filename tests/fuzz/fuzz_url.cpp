// libFuzzer target: parse_init_url on arbitrary text. Properties: it returns or raises
// tutti::error(errc::invalid_argument); a parsed URL has a known lower-case scheme, a port in
// 1..65535 exactly for tcp:// and redis:// (else -1), a non-empty host for those, and an
// absolute path for file://.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <tutti/bootstrap/url.hpp>
#include <tutti/core/error.hpp>

#include "fuzz_check.hpp"

using fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const tutti::bootstrap::init_url u = tutti::bootstrap::parse_init_url(text);
    const bool host_port = u.scheme == "tcp" || u.scheme == "redis";
    check(host_port || u.scheme == "env" || u.scheme == "file");
    check(host_port ? u.port >= 1 && u.port <= 65535 && !u.host.empty() : u.port == -1);
    if (u.scheme == "file") check(!u.path.empty() && u.path.front() == '/');
    for (const auto& [key, value] : u.query) check(!key.empty());
  } catch (const tutti::error& e) {
    check(e.code() == tutti::errc::invalid_argument);
  }
  return 0;
}

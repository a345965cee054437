// libFuzzer target: the records tutti::gloo's ranks leave each other in the store
// (detail/gloo_support.hpp) on arbitrary text — gloo_abort_record::decode (why a rank aborted
// the world) and gloo_parse_call (a rank's last call, compared for mismatches and printed in
// timeout errors). Properties: a decoded abort record has a known errc and ranks >= -1, and
// encodes back to a record that decodes the same; a parsed call describes itself without
// fault, and its record, written again, parses to the same call.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <tutti/detail/gloo_support.hpp>

#include "fuzz_check.hpp"

using fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tutti::detail;  // NOLINT(google-build-using-namespace): one target
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (const auto rec = gloo_abort_record::decode(text)) {
    check(rec->code >= tutti::errc::timeout && rec->code <= tutti::errc::transport_failure);
    check(rec->writer >= -1 && rec->subject >= -1);
    const auto again = gloo_abort_record::decode(rec->encode());
    check(again.has_value());
    check(again->code == rec->code && again->writer == rec->writer &&
          again->subject == rec->subject && again->what == rec->what);
  }
  if (const auto parsed = gloo_parse_call(std::string(text))) {
    const std::string described = parsed->second.describe();
    check(!described.empty());
    call c;
    c.seq = parsed->first;
    c.fp = parsed->second;
    const auto again = gloo_parse_call(gloo_call_record(c));
    check(again.has_value());
    check(again->first == parsed->first && again->second == parsed->second);
  }
  return 0;
}

// libFuzzer target: cma_offer::decode (detail/cma.hpp) on arbitrary text, the record another
// rank publishes in the store for tutti::gloo's single-copy probe. Properties: it returns an
// offer or nothing; an offer has a non-empty host without spaces and a pid > 0, and encoding it
// and decoding again gives back the same offer.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <tutti/detail/cma.hpp>

#include "fuzz_check.hpp"

using fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto offer = tutti::detail::cma_offer::decode(text);
  if (!offer) return 0;
  check(!offer->host.empty() && offer->host.find(' ') == std::string::npos);
  check(offer->pid > 0);
  const auto again = tutti::detail::cma_offer::decode(offer->encode());
  check(again.has_value());
  check(again->host == offer->host && again->pid == offer->pid &&
        again->address == offer->address && again->value == offer->value);
  return 0;
}

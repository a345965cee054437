// libFuzzer target: the check of a shm segment header another process wrote
// (shm_check_header), with arbitrary header fields, segment size and rank count.
//
// Input: [u64 magic][u32 version][u32 ranks][u64 slot_bytes][u64 channel_bytes]
// [u64 total_bytes][u64 segment bytes][u32 expected ranks], little-endian; missing bytes are
// zero. Properties: a header it accepts describes exactly the segment: every region lies
// inside it in order, the total equals its size, and the rings are powers of two, so nothing
// placed by the header can reach past the mapping.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <tutti/detail/shm_layout.hpp>

#include "fuzz_check.hpp"

namespace td = tutti::detail;

using fuzz::check;

namespace {

struct reader {
  const std::uint8_t* p;
  std::size_t left;
  std::uint64_t take(int n) {
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) {
      const std::uint64_t b = left > 0 ? *p : 0;
      if (left > 0) {
        ++p;
        --left;
      }
      v |= b << (8 * i);
    }
    return v;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  reader r{data, size};
  td::shm_header h;
  h.magic.store(r.take(8));
  h.version = static_cast<std::uint32_t>(r.take(4));
  h.ranks = static_cast<std::uint32_t>(r.take(4));
  h.slot_bytes = r.take(8);
  h.channel_bytes = r.take(8);
  h.total_bytes = r.take(8);
  const auto bytes = static_cast<std::size_t>(r.take(8));
  const auto ranks = static_cast<int>(static_cast<std::int32_t>(r.take(4)));
  td::shm_layout l;
  const std::string why = td::shm_check_header(h, bytes, ranks, l);
  if (!why.empty()) return 0;
  check(ranks >= 1 && l.ranks == static_cast<std::size_t>(ranks));
  check(l.channel_bytes >= 4096 && (l.channel_bytes & (l.channel_bytes - 1)) == 0);
  check(l.header_bytes() <= l.blocks_offset());
  check(l.blocks_offset() + l.ranks * l.block_bytes() <= l.lines_offset());
  check(l.lines_offset() + l.ranks * l.lines_bytes() <= l.channels_offset());
  const std::size_t last = l.ranks - 1;
  check(l.channel_offset(td::space{1}, last, last) + l.channel_stride() <= l.slots_offset());
  check(l.slot_offset(last) + l.slot_bytes == l.total_bytes());
  check(l.total_bytes() == bytes && h.total_bytes == bytes);
  return 0;
}

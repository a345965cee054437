// libFuzzer target: store_wire's field parser (store_parser) on arbitrary payloads, and the
// frame builder and parser as inverses.
//
// Input: [u8 program][payload...]. The program's bits pick a sequence of reads (u8, u32, u64,
// key, field with a limit) run over the payload. Properties: a read never consumes more than
// is left, a key is 1 .. max_key_bytes bytes, a field never exceeds its limit, and the bytes
// successfully read, rebuilt with store_frame, give back exactly the bytes they consumed.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include <tutti/bootstrap/store.hpp>
#include <tutti/detail/store/wire.hpp>

#include "fuzz_check.hpp"

namespace td = tutti::detail;

using fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::uint8_t program = data[0];
  const std::span<const std::byte> payload(reinterpret_cast<const std::byte*>(data) + 1, size - 1);
  td::store_parser p(payload);
  td::store_frame rebuilt;
  std::size_t consumed = 0;  // by the reads that succeeded (a failed one may use a prefix)
  for (int step = 0; step < 16; ++step) {
    const std::size_t before = p.remaining();
    bool ok = false;
    switch ((program + step) % 5) {
      case 0: {
        std::uint8_t v = 0;
        ok = p.u8(v);
        if (ok) rebuilt.u8(v);
        break;
      }
      case 1: {
        std::uint32_t v = 0;
        ok = p.u32(v);
        if (ok) rebuilt.u32(v);
        break;
      }
      case 2: {
        std::uint64_t v = 0;
        ok = p.u64(v);
        if (ok) rebuilt.u64(v);
        break;
      }
      case 3: {
        std::span<const std::byte> key;
        ok = p.key(key);
        if (ok) {
          check(!key.empty() && key.size() <= tutti::bootstrap::max_key_bytes);
          rebuilt.field(key);
        }
        break;
      }
      default: {
        std::span<const std::byte> f;
        const std::size_t limit = program;
        ok = p.field(f, limit);
        if (ok) {
          check(f.size() <= limit);
          rebuilt.field(f);
        }
        break;
      }
    }
    check(p.remaining() <= before);
    if (!ok) break;
    consumed = payload.size() - p.remaining();
    program = static_cast<std::uint8_t>(program * 37 + 11);
  }
  check(p.done() == (p.remaining() == 0));
  const std::vector<std::byte> frame = rebuilt.finish();
  check(frame.size() == 4 + consumed);
  check(td::store_load_le(frame.data(), 4) == consumed);
  for (std::size_t i = 0; i < consumed; ++i) check(frame[4 + i] == payload[i]);
  return 0;
}

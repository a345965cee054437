#pragma once
/// \file
/// The layout of tutti::shm's segment: one POSIX shared-memory object per communicator.
///
///   header        magic, geometry, attach count, abort record
///   rank blocks   per rank: doorbell, pid and state, barrier record, call board
///   lines         per rank: two halves of flagged cache lines for small all_reduce payloads
///   channels      per (space, source, destination): a single-producer ring of framed messages
///   slots         per rank: the shared segment the direct algorithms copy through
///
/// Everything here is standard layout with atomics and integers only: no pointers, since each
/// process maps the segment at its own address.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "tutti/core/error.hpp"
#include "tutti/detail/board.hpp"
#include "tutti/detail/call.hpp"
#include "tutti/detail/wait.hpp"

namespace tutti::inline v0::detail {

inline constexpr std::size_t cache_line = 64;

[[nodiscard]] constexpr std::size_t round_up(std::size_t n, std::size_t to) noexcept {
  return (n + to - 1) / to * to;
}

/// What a rank is doing with the segment.
enum class shm_rank_state : std::uint32_t { absent = 0, attached = 1, closed = 2 };

/// A rank's arrival at a segment barrier. Records alternate by generation parity: a rank can
/// rewrite record g % 2 only in barrier g + 2, which it enters after every peer left barrier g.
struct alignas(cache_line) shm_barrier_record {
  std::atomic<std::uint64_t> gen{0};
  struct entry {
    std::atomic<std::uint64_t> seq{0};
    std::atomic<std::uint64_t> head{0};
    std::atomic<std::uint64_t> count{0};
  } rec[2];
};

struct shm_rank_block {
  alignas(cache_line) doorbell bell;  // rung by peers: written by others, read by the owner
  alignas(cache_line) std::atomic<std::int32_t> pid{0};
  std::atomic<std::uint32_t> state{0};  // shm_rank_state
  // The single-copy probe: a word in the owner's memory and its value, written before the
  // owner counts itself attached; peers read it back through process_vm_readv.
  std::atomic<std::uint64_t> probe_address{0};
  std::atomic<std::uint64_t> probe_value{0};
  // Advanced by the owner at each call and at most every millisecond while it sleeps in a
  // wait: a value that stays put while others wait names the rank that stopped making progress.
  std::atomic<std::uint64_t> beat{0};
  shm_barrier_record barrier;  // written by the owner only
  alignas(cache_line) call_board_row board;
};

struct shm_header {
  static constexpr std::uint64_t magic_value = 0x3169747475742d78ull;  // "x-tutti1"
  static constexpr std::uint32_t layout_version = 6;

  std::atomic<std::uint64_t> magic{0};  // stored last by the creator
  std::uint32_t version = 0;
  std::uint32_t ranks = 0;
  std::uint64_t slot_bytes = 0;
  std::uint64_t channel_bytes = 0;
  std::uint64_t total_bytes = 0;
  std::uint64_t stamp_key = 0;  // random, per segment: frames carry position ^ key (shm_frame)
  alignas(cache_line) std::atomic<std::uint32_t> attached{0};
  alignas(cache_line) std::atomic<std::uint32_t> abort_state{0};  // 0 none, 1 writing, 2 set
  std::int32_t abort_code = 0;
  std::int32_t abort_peer = 0;  // the rank the writer blamed, plus one (0: none)
  char abort_what[1024] = {};
};

/// A message on a channel: this header at a 64-byte-aligned stream position, then (unless it
/// rides in the header or travels as a single copy) `bytes` of payload, padded to 64 bytes.
///
/// The producer writes `stamp` last (release): the position of the header xor the segment's
/// stamp_key, so the consumer finds a new frame by reading that one line, not the producer's
/// `head` (a line it would have to fetch from the producer for every message); stale bytes at
/// that place hold another position's stamp, or payload. `address` says where the payload is:
///   shm_frame::streamed   it follows, written as the ring frees; the consumer watches `head`;
///   shm_frame::whole      it follows, all written before the stamp; a payload of up to
///                         `inline_max` bytes rides in the header instead, and nothing follows:
///                         in `word` (8 bytes) in the collective space, and from `seq` to
///                         `word` (32 bytes) in the point-to-point space, whose frames are
///                         matched by tag and carry no call;
///   anything else         it is not in the ring: the receiver reads `bytes` at that address
///                         in the sender's memory (a single copy, detail/shm_channels.hpp).
struct shm_frame {
  static constexpr std::uint64_t streamed = 0;
  static constexpr std::uint64_t whole = 1;

  std::uint64_t tag;
  std::uint64_t bytes;
  std::uint64_t address;
  std::uint64_t seq;      // collective frames: the call; these three and `word` are payload in
  std::uint64_t fp_head;  // point-to-point frames of up to 32 bytes
  std::uint64_t fp_count;
  std::uint64_t word;
  std::uint64_t stamp;

  /// Where a payload that rides in the header starts, and how much fits, in space `s`.
  [[nodiscard]] static constexpr std::size_t inline_at(space s) noexcept;
  [[nodiscard]] static constexpr std::size_t inline_max(space s) noexcept;
};
static_assert(sizeof(shm_frame) == cache_line);
constexpr std::size_t shm_frame::inline_at(space s) noexcept {
  return s == space::p2p ? offsetof(shm_frame, seq) : offsetof(shm_frame, word);
}
constexpr std::size_t shm_frame::inline_max(space s) noexcept {
  return offsetof(shm_frame, stamp) - inline_at(s);
}
static_assert(shm_frame::inline_max(space::p2p) == 32 &&
              shm_frame::inline_max(space::collective) == 8);

/// A cache line that carries its own ready flag: `tag` is the round it holds, stored (release)
/// after the payload, so a reader that sees its round in `tag` sees the payload with it — one
/// cache-line transfer per line and no separate flag to fetch first. The first line of a
/// round also carries the call, so rounds of different calls never mix silently.
struct alignas(cache_line) shm_line {
  static constexpr std::size_t payload = 56;
  std::atomic<std::uint64_t> tag{0};
  std::byte data[payload] = {};
};
struct alignas(cache_line) shm_first_line {
  static constexpr std::size_t payload = 32;
  std::atomic<std::uint64_t> tag{0};
  std::uint64_t seq = 0;
  std::uint64_t fp_head = 0;
  std::uint64_t fp_count = 0;
  std::byte data[payload] = {};
};
static_assert(sizeof(shm_line) == cache_line && sizeof(shm_first_line) == cache_line);

/// Lines per half: an all_reduce of up to `shm_line_capacity` (256) bytes travels in them.
/// Measured on 2 cores (bench: tutti-bench all_reduce): above 256 bytes the slots are faster — a
/// reader then waits for one flag and streams the rest, where lines cost one hand-off each.
inline constexpr std::size_t shm_lines_per_half = 5;
inline constexpr std::size_t shm_line_capacity =
    shm_first_line::payload + (shm_lines_per_half - 1) * shm_line::payload;

/// Producer and consumer positions of one channel (bytes ever written / ever consumed), and
/// what the consumer writes besides: whether it can read the producer's memory, how many
/// single-copy messages it has read so far, and the one it offers the producer a share of
/// (detail/shm_single_copy.hpp); on a line of its own, what the producer wrote of that.
struct shm_channel_ctl {
  alignas(cache_line) std::atomic<std::uint64_t> head{0};
  alignas(cache_line) std::atomic<std::uint64_t> tail{0};
  std::atomic<std::uint64_t> acked{0};
  std::atomic<std::uint64_t> share{0};     // (message << 24) | next unclaimed chunk; both claim
  std::atomic<std::uint64_t> share_to{0};  // the consumer's destination for that message
  std::atomic<std::uint32_t> single_copy{0};
  alignas(cache_line) std::atomic<std::uint64_t> helped{0};  // (message << 24) | chunks written
  std::atomic<std::uint64_t> help_failed{0};                 // a message a write failed for
};

/// Offsets of everything in a segment for `ranks` ranks.
struct shm_layout {
  std::size_t ranks = 1;
  std::size_t slot_bytes = 0;
  std::size_t channel_bytes = 0;  // ring capacity per channel: a power of two, >= 4096

  static constexpr std::size_t page = 4096;
  [[nodiscard]] static constexpr std::size_t header_bytes() noexcept {
    return round_up(sizeof(shm_header), page);
  }
  [[nodiscard]] static constexpr std::size_t block_bytes() noexcept {
    return round_up(sizeof(shm_rank_block), cache_line);
  }
  [[nodiscard]] std::size_t blocks_offset() const noexcept { return header_bytes(); }
  [[nodiscard]] static constexpr std::size_t lines_bytes() noexcept {
    return 2 * shm_lines_per_half * cache_line;
  }
  [[nodiscard]] std::size_t lines_offset() const noexcept {
    return round_up(blocks_offset() + ranks * block_bytes(), page);
  }
  [[nodiscard]] std::size_t channels_offset() const noexcept {
    return round_up(lines_offset() + ranks * lines_bytes(), page);
  }
  [[nodiscard]] std::size_t channel_stride() const noexcept {
    return sizeof(shm_channel_ctl) + channel_bytes;
  }
  [[nodiscard]] std::size_t channel_offset(space s, std::size_t src,
                                           std::size_t dst) const noexcept {
    return channels_offset() +
           ((static_cast<std::size_t>(s) * ranks + src) * ranks + dst) * channel_stride();
  }
  [[nodiscard]] std::size_t slots_offset() const noexcept {
    return round_up(channels_offset() + 2 * ranks * ranks * channel_stride(), page);
  }
  [[nodiscard]] std::size_t slot_offset(std::size_t r) const noexcept {
    return slots_offset() + r * slot_bytes;
  }
  [[nodiscard]] std::size_t total_bytes() const noexcept { return slot_offset(ranks); }
};

/// Checks a segment header another process wrote, for a segment of `bytes` bytes and a world
/// of `ranks` ranks, before anything is placed by it: magic, version, rank count, and a
/// geometry rank 0 could have chosen (shm_default_layout: slots a page multiple up to 1 GiB,
/// rings a power of two in [4 KiB, 64 MiB], at most 65536 ranks so no offset overflows) whose
/// total is exactly `bytes`. Returns "" and sets `out`, or what is wrong.
[[nodiscard]] inline std::string shm_check_header(const shm_header& h, std::size_t bytes, int ranks,
                                                  shm_layout& out) {
  const auto said = [&] {
    return " (" + std::to_string(h.ranks) + " ranks, layout version " + std::to_string(h.version) +
           "; this rank expects " + std::to_string(ranks) + " ranks, version " +
           std::to_string(shm_header::layout_version) + ")";
  };
  if (bytes < shm_layout::header_bytes()) return "is too small";
  if (h.magic.load(std::memory_order_acquire) != shm_header::magic_value ||
      h.version != shm_header::layout_version || ranks < 1 || ranks > 65536 ||
      h.ranks != static_cast<std::uint32_t>(ranks))
    return "was made for another world" + said();
  const std::uint64_t slot = h.slot_bytes;
  const std::uint64_t ring = h.channel_bytes;
  if (slot % shm_layout::page != 0 || slot > (std::uint64_t{1} << 30) || ring < 4096 ||
      ring > (std::uint64_t{64} << 20) || (ring & (ring - 1)) != 0)
    return "has an impossible geometry (slots of " + std::to_string(slot) + " bytes, rings of " +
           std::to_string(ring) + " bytes)";
  const shm_layout l{static_cast<std::size_t>(ranks), static_cast<std::size_t>(slot),
                     static_cast<std::size_t>(ring)};
  if (h.total_bytes != bytes || l.total_bytes() != bytes)
    return "is " + std::to_string(bytes) + " bytes, not the " + std::to_string(l.total_bytes()) +
           " its header describes" + said();
  out = l;
  return {};
}

/// Typed views of a mapped segment.
class shm_view {
 public:
  shm_view() = default;
  shm_view(std::byte* base, const shm_layout& l) noexcept : base_(base), layout_(l) {}

  [[nodiscard]] shm_header& header() const noexcept {
    return *reinterpret_cast<shm_header*>(base_);
  }
  [[nodiscard]] shm_rank_block& block(int r) const noexcept {
    return *reinterpret_cast<shm_rank_block*>(base_ + layout_.blocks_offset() +
                                              static_cast<std::size_t>(r) * layout_.block_bytes());
  }
  /// Line `i` of half `h` of rank r's lines (line 0 is a shm_first_line).
  [[nodiscard]] std::byte* line(int r, std::size_t h, std::size_t i) const noexcept {
    return base_ + layout_.lines_offset() +
           static_cast<std::size_t>(r) * shm_layout::lines_bytes() +
           (h * shm_lines_per_half + i) * cache_line;
  }
  [[nodiscard]] shm_channel_ctl& channel(space s, int src, int dst) const noexcept {
    return *reinterpret_cast<shm_channel_ctl*>(base_ + channel_at(s, src, dst));
  }
  [[nodiscard]] std::byte* ring(space s, int src, int dst) const noexcept {
    return base_ + channel_at(s, src, dst) + sizeof(shm_channel_ctl);
  }
  [[nodiscard]] std::byte* slot(int r) const noexcept {
    return base_ + layout_.slot_offset(static_cast<std::size_t>(r));
  }
  [[nodiscard]] const shm_layout& layout() const noexcept { return layout_; }

  /// Records why the world failed, and the rank to blame if it is not the reader's own
  /// peer (-1: none); the first writer wins. Rings every rank's doorbell.
  void abort(errc code, const std::string& what, int blame = -1) const noexcept {
    auto& h = header();
    std::uint32_t expected = 0;
    if (h.abort_state.compare_exchange_strong(expected, 1)) {
      h.abort_code = static_cast<std::int32_t>(code);
      h.abort_peer = blame + 1;
      const std::size_t n = std::min(what.size(), sizeof(h.abort_what) - 1);
      std::memcpy(h.abort_what, what.data(), n);
      h.abort_what[n] = '\0';
      h.abort_state.store(2, std::memory_order_release);
    }
    for (int r = 0; r < static_cast<int>(layout_.ranks); ++r) block(r).bell.ring(true);
  }
  [[nodiscard]] bool aborted() const noexcept {
    return header().abort_state.load(std::memory_order_acquire) != 0;
  }
  /// The abort record: code, text and the rank it blames (-1: none); `aborted()` must have
  /// been true.
  struct abort_record {
    errc code;
    std::string what;
    int blame;
  };
  [[nodiscard]] abort_record abort_reason() const {
    auto& h = header();
    for (int i = 0; i < 1000 && h.abort_state.load(std::memory_order_acquire) != 2; ++i)
      cpu_relax();
    if (h.abort_state.load(std::memory_order_acquire) != 2)
      return {errc::aborted, "another rank aborted the communicator", -1};
    return {static_cast<errc>(h.abort_code), std::string(h.abort_what), h.abort_peer - 1};
  }

 private:
  [[nodiscard]] std::size_t channel_at(space s, int src, int dst) const noexcept {
    return layout_.channel_offset(s, static_cast<std::size_t>(src), static_cast<std::size_t>(dst));
  }
  std::byte* base_ = nullptr;
  shm_layout layout_;
};

}  // namespace tutti::inline v0::detail

#pragma once
/// \file
/// SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), for the tcp_store's token
/// authentication; plus a constant-time comparison and random bytes from getrandom(2). Small
/// and portable rather than fast: the store hashes a few dozen bytes per connection.

#include <sys/random.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <span>

namespace tutti::inline v0::detail {

using sha256_digest = std::array<std::byte, 32>;

/// Incremental SHA-256: update() any number of times, then digest() once.
class sha256 {
 public:
  sha256& update(std::span<const std::byte> data) noexcept {
    for (const std::byte b : data) {
      block_[fill_++] = b;
      if (fill_ == block_.size()) {
        compress();
        fill_ = 0;
      }
    }
    bits_ += static_cast<std::uint64_t>(data.size()) * 8;
    return *this;
  }

  /// The digest of everything passed to update(); the object is spent afterwards.
  [[nodiscard]] sha256_digest digest() noexcept {
    const std::uint64_t bits = bits_;
    const std::byte pad_start{0x80};
    update(std::span(&pad_start, 1));
    const std::byte zero{0};
    while (fill_ != 56) update(std::span(&zero, 1));
    std::array<std::byte, 8> length{};
    for (int i = 0; i < 8; ++i)
      length[static_cast<std::size_t>(i)] = std::byte((bits >> (56 - 8 * i)) & 0xff);
    update(length);
    sha256_digest out{};
    for (std::size_t i = 0; i < 8; ++i)
      for (std::size_t j = 0; j < 4; ++j)
        out[4 * i + j] = std::byte((h_[i] >> (24 - 8 * j)) & 0xff);
    return out;
  }

 private:
  static constexpr std::uint32_t rotr(std::uint32_t x, int n) noexcept {
    return (x >> n) | (x << (32 - n));
  }

  void compress() noexcept {
    static constexpr std::array<std::uint32_t, 64> k{
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2};
    std::array<std::uint32_t, 64> w{};
    for (std::size_t i = 0; i < 16; ++i)
      w[i] = (std::to_integer<std::uint32_t>(block_[4 * i]) << 24) |
             (std::to_integer<std::uint32_t>(block_[4 * i + 1]) << 16) |
             (std::to_integer<std::uint32_t>(block_[4 * i + 2]) << 8) |
             std::to_integer<std::uint32_t>(block_[4 * i + 3]);
    for (std::size_t i = 16; i < 64; ++i) {
      const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    std::uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3];
    std::uint32_t e = h_[4], f = h_[5], g = h_[6], h = h_[7];
    for (std::size_t i = 0; i < 64; ++i) {
      const std::uint32_t t1 =
          h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      const std::uint32_t t2 =
          (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h_[0] += a;
    h_[1] += b;
    h_[2] += c;
    h_[3] += d;
    h_[4] += e;
    h_[5] += f;
    h_[6] += g;
    h_[7] += h;
  }

  std::array<std::uint32_t, 8> h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                  0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::array<std::byte, 64> block_{};
  std::size_t fill_ = 0;
  std::uint64_t bits_ = 0;
};

/// HMAC-SHA-256 of the concatenation of `parts` under `key` (RFC 2104; keys longer than the
/// 64-byte block are hashed first).
[[nodiscard]] inline sha256_digest hmac_sha256(std::span<const std::byte> key,
                                               std::span<const std::span<const std::byte>> parts) {
  std::array<std::byte, 64> k{};
  if (key.size() > k.size()) {
    const sha256_digest d = sha256().update(key).digest();
    for (std::size_t i = 0; i < d.size(); ++i) k[i] = d[i];
  } else {
    for (std::size_t i = 0; i < key.size(); ++i) k[i] = key[i];
  }
  std::array<std::byte, 64> pad{};
  for (std::size_t i = 0; i < pad.size(); ++i) pad[i] = k[i] ^ std::byte{0x36};
  sha256 inner;
  inner.update(pad);
  for (const auto part : parts) inner.update(part);
  const sha256_digest inner_digest = inner.digest();
  for (std::size_t i = 0; i < pad.size(); ++i) pad[i] = k[i] ^ std::byte{0x5c};
  return sha256().update(pad).update(inner_digest).digest();
}

/// Whether a and b hold the same bytes, in time that depends on their sizes only.
[[nodiscard]] inline bool equal_constant_time(std::span<const std::byte> a,
                                              std::span<const std::byte> b) noexcept {
  if (a.size() != b.size()) return false;
  std::byte diff{0};
  for (std::size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
  return diff == std::byte{0};
}

/// Fills `out` from the kernel's random source; false (errno set) when it fails.
[[nodiscard]] inline bool random_bytes(std::span<std::byte> out) noexcept {
  while (!out.empty()) {
    const ssize_t n = ::getrandom(out.data(), out.size(), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    out = out.subspan(static_cast<std::size_t>(n));
  }
  return true;
}

}  // namespace tutti::inline v0::detail

#pragma once
// Checks for payloads of a size only the sender knows (broadcast_object, all_gather_object,
// gather_object), run by p2p_checks::all_checks in test_p2p.cpp (inproc, shm) and
// test_gloo_p2p.cpp. Each returns "" or what went wrong on this rank.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace p2p_checks {

/// The byte of a payload string at `i` that rank `r` made.
inline char text_byte(int r, std::size_t i) {
  return static_cast<char>('a' + (static_cast<std::size_t>(r) * 7 + i * 13 + i / 251) % 26);
}

/// broadcast_object, all_gather_object and gather_object: a 10 MB string from the last rank
/// to ranks holding other strings, an empty one, vectors of doubles and of ints whose sizes
/// differ per rank (rank 0's empty), strings gathered to rank 0.
template <class Comm>
std::string objects(Comm& comm) {
  const int p = comm.size();
  const int r = comm.rank();
  const int last = p - 1;
  const std::size_t big = 10'000'000;
  std::string s =
      r == last ? std::string(big, ' ') : std::string(static_cast<std::size_t>(r) * 3, 'x');
  if (r == last)
    for (std::size_t i = 0; i < big; ++i) s[i] = text_byte(last, i);
  comm.broadcast_object(s, last);
  if (s.size() != big) return "broadcast_object: " + std::to_string(s.size()) + " bytes";
  for (std::size_t i = 0; i < big; ++i)
    if (s[i] != text_byte(last, i)) return "broadcast_object: byte " + std::to_string(i);
  std::string empty = r == 0 ? "" : "not empty";
  comm.broadcast_object(empty, 0);
  if (!empty.empty()) return "broadcast_object of an empty string";
  std::vector<double> d;
  if (r == 0) d = {0.5, -1.25, 3e300};
  comm.broadcast_object(d, 0);
  if (d != std::vector<double>{0.5, -1.25, 3e300}) return "broadcast_object of doubles";

  std::vector<std::int32_t> mine(static_cast<std::size_t>(r) * 37);
  for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = r * 100'000 + static_cast<int>(i);
  const auto all = comm.all_gather_object(mine);
  if (all.size() != static_cast<std::size_t>(p)) return "all_gather_object: size";
  for (int q = 0; q < p; ++q) {
    const auto& v = all[static_cast<std::size_t>(q)];
    if (v.size() != static_cast<std::size_t>(q) * 37)
      return "all_gather_object: rank " + std::to_string(q) + " has " + std::to_string(v.size());
    for (std::size_t i = 0; i < v.size(); ++i)
      if (v[i] != q * 100'000 + static_cast<int>(i)) return "all_gather_object: a value";
  }

  const std::string text =
      "rank " + std::to_string(r) + std::string(static_cast<std::size_t>(r) * 1000, '!');
  const auto got = comm.gather_object(text, 0);
  if (r != 0) return got.empty() ? "" : "gather_object: a non-root got something";
  if (got.size() != static_cast<std::size_t>(p)) return "gather_object: size";
  for (int q = 0; q < p; ++q)
    if (got[static_cast<std::size_t>(q)] !=
        "rank " + std::to_string(q) + std::string(static_cast<std::size_t>(q) * 1000, '!'))
      return "gather_object: rank " + std::to_string(q);
  return {};
}

}  // namespace p2p_checks

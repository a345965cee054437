#pragma once
/// \file
/// Payloads whose size only the sender knows (communicator::broadcast_object, all_gather_object,
/// gather_object): a header with each payload's size goes first, then the bytes, each through
/// the communicator's own collectives, so they are checked, numbered and timed like any other.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "tutti/core/error.hpp"

namespace tutti::inline v0 {

namespace detail {
template <class C>
struct byte_container_traits {
  static constexpr bool ok = false;
};
template <class Ch, class Tr, class A>
struct byte_container_traits<std::basic_string<Ch, Tr, A>> {
  static constexpr bool ok = std::is_trivially_copyable_v<Ch>;
  using value_type = Ch;
};
template <class T, class A>
struct byte_container_traits<std::vector<T, A>> {
  static constexpr bool ok = std::is_trivially_copyable_v<T> && !std::is_same_v<T, bool>;
  using value_type = T;
};
}  // namespace detail

/// What broadcast_object, all_gather_object and gather_object carry: a std::string (or another
/// std::basic_string of trivially copyable characters), or a std::vector<T> of a trivially
/// copyable T (not bool) — bytes a program serialised, or plain values. Every rank of a call
/// uses the same container type.
template <class C>
concept byte_container = detail::byte_container_traits<C>::ok;

namespace detail {

/// Each rank's part of a payload header: its size in bytes and its element's size, so that
/// ranks that pass different element types raise instead of reading a torn value.
struct object_header {
  std::uint64_t bytes;
  std::uint64_t elem;
};

template <byte_container C>
inline constexpr std::uint64_t object_elem = sizeof(typename byte_container_traits<C>::value_type);

template <byte_container C>
[[nodiscard]] std::span<const unsigned char> object_bytes(const C& c) noexcept {
  return {reinterpret_cast<const unsigned char*>(c.data()), c.size() * object_elem<C>};
}

/// Fills `c` from `bytes` (a whole number of elements, which the caller checked).
template <byte_container C>
void object_assign(C& c, std::span<const unsigned char> bytes) {
  c.resize(bytes.size() / object_elem<C>);
  if (!bytes.empty()) std::memcpy(c.data(), bytes.data(), bytes.size());
}

/// The sentence for a rank whose payload cannot be read as this rank's container.
[[noreturn]] inline void object_mismatch(const char* what, int rank, int peer, std::uint64_t elem,
                                         const object_header& theirs) {
  throw error(errc::mismatch, what, 0, rank, peer,
              "this rank reads elements of " + std::to_string(elem) + " bytes; rank " +
                  std::to_string(peer) + " sent " + std::to_string(theirs.bytes) +
                  " bytes of elements of " + std::to_string(theirs.elem) +
                  " bytes (every rank must pass the same container type)");
}

template <byte_container C>
void check_object(const char* what, int rank, int peer, const object_header& h) {
  if (h.elem != object_elem<C> || h.bytes % object_elem<C> != 0)
    object_mismatch(what, rank, peer, object_elem<C>, h);
}

/// Headers as a collective's buffer: two 64-bit words each.
[[nodiscard]] inline std::span<std::uint64_t> header_words(std::vector<object_header>& h) noexcept {
  return {reinterpret_cast<std::uint64_t*>(h.data()), 2 * h.size()};
}

template <class Comm, byte_container C>
void broadcast_object(Comm& comm, C& data, int root) {
  std::vector<object_header> h(1);
  if (comm.rank() == root) h[0] = {object_bytes(data).size(), object_elem<C>};
  comm.broadcast(header_words(h), root);
  if (comm.rank() == root) {  // root's buffer is only read
    comm.broadcast(std::span<unsigned char>(reinterpret_cast<unsigned char*>(data.data()),
                                            static_cast<std::size_t>(h[0].bytes)),
                   root);
    return;
  }
  std::vector<unsigned char> bytes(h[0].bytes);
  comm.broadcast(std::span<unsigned char>(bytes), root);
  // Checked after the bytes moved: every rank took part in both calls whatever it finds.
  check_object<C>("broadcast_object", comm.rank(), root, h[0]);
  object_assign(data, bytes);
}

/// Every rank's header, all-gathered; the byte counts as all_gatherv/gatherv counts.
template <class Comm, byte_container C>
std::vector<object_header> gather_headers(Comm& comm, const C& mine) {
  const auto p = static_cast<std::size_t>(comm.size());
  std::vector<object_header> h(p);
  h[static_cast<std::size_t>(comm.rank())] = {object_bytes(mine).size(), object_elem<C>};
  comm.all_gather(header_words(h));
  return h;
}

/// Splits the all-gathered bytes into one container per rank, checking each rank's header.
template <byte_container C>
std::vector<C> split_objects(const char* what, int rank, const std::vector<object_header>& h,
                             std::span<const unsigned char> all) {
  std::vector<C> out(h.size());
  std::size_t at = 0;
  for (std::size_t q = 0; q < h.size(); ++q) {
    check_object<C>(what, rank, static_cast<int>(q), h[q]);
    object_assign(out[q], all.subspan(at, h[q].bytes));
    at += h[q].bytes;
  }
  return out;
}

template <class Comm, byte_container C>
std::vector<C> all_gather_object(Comm& comm, const C& mine) {
  const auto h = gather_headers(comm, mine);
  std::vector<std::size_t> counts(h.size());
  std::size_t total = 0;
  for (std::size_t q = 0; q < h.size(); ++q) total += counts[q] = h[q].bytes;
  std::vector<unsigned char> all(total);
  comm.all_gatherv(object_bytes(mine), std::span<unsigned char>(all),
                   std::span<const std::size_t>(counts));
  return split_objects<C>("all_gather_object", comm.rank(), h, all);
}

template <class Comm, byte_container C>
std::vector<C> gather_object(Comm& comm, const C& mine, int root) {
  const auto h = gather_headers(comm, mine);
  std::vector<std::size_t> counts(h.size());
  std::size_t total = 0;
  for (std::size_t q = 0; q < h.size(); ++q) total += counts[q] = h[q].bytes;
  std::vector<unsigned char> all(comm.rank() == root ? total : 0);
  comm.gatherv(object_bytes(mine), std::span<unsigned char>(all),
               std::span<const std::size_t>(counts), root);
  if (comm.rank() != root) return {};
  return split_objects<C>("gather_object", comm.rank(), h, all);
}

}  // namespace detail
}  // namespace tutti::inline v0

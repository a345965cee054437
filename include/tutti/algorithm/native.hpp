#pragma once
/// \file
/// tutti::native: the backend's own collectives — Gloo's algorithms over tutti::gloo, NCCL's
/// over tutti::nccl. Each collective exists where the transport runs it natively (see the
/// native_* concepts in transport/concepts.hpp); tutti still checks arguments, numbers and
/// fingerprints every call, and applies avg's final division.

#include <cstddef>
#include <span>

#include "tutti/transport/concepts.hpp"

namespace tutti::inline v0 {

struct native {
  static constexpr const char* name = "native";

  template <class Ctx>
    requires native_all_reduce<typename Ctx::transport_type>
  static void all_reduce(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    c.transport().native_all_reduce(c.info(), in, out, count, c.deadline());
    averaged(c);
  }

  template <class Ctx>
    requires native_reduce<typename Ctx::transport_type>
  static void reduce(Ctx& c, const std::byte* in, std::byte* out, std::size_t count, int root) {
    c.transport().native_reduce(c.info(), in, out, count, root, c.deadline());
    averaged(c);
  }

  template <class Ctx>
    requires native_reduce_scatter<typename Ctx::transport_type>
  static void reduce_scatter(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    c.transport().native_reduce_scatter(c.info(), in, out, count, c.deadline());
    averaged(c);
  }

  template <class Ctx>
    requires native_all_to_allv<typename Ctx::transport_type>
  static void all_to_allv(Ctx& c, const std::byte* in, std::span<const std::size_t> sc,
                          std::byte* out, std::span<const std::size_t> rc) {
    c.transport().native_all_to_allv(c.info(), in, sc, out, rc, c.deadline());
  }

  template <class Ctx>
    requires native_broadcast<typename Ctx::transport_type>
  static void broadcast(Ctx& c, std::byte* buf, std::size_t count, int root) {
    c.transport().native_broadcast(c.info(), buf, count, root, c.deadline());
  }

  template <class Ctx>
    requires native_all_gather<typename Ctx::transport_type>
  static void all_gather(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    c.transport().native_all_gather(c.info(), in, out, count, c.deadline());
  }

  template <class Ctx>
    requires native_gather<typename Ctx::transport_type>
  static void gather(Ctx& c, const std::byte* in, std::byte* out, std::size_t count, int root) {
    c.transport().native_gather(c.info(), in, out, count, root, c.deadline());
  }

  template <class Ctx>
    requires native_scatter<typename Ctx::transport_type>
  static void scatter(Ctx& c, const std::byte* in, std::byte* out, std::size_t count, int root) {
    c.transport().native_scatter(c.info(), in, out, count, root, c.deadline());
  }

  template <class Ctx>
    requires native_all_to_all<typename Ctx::transport_type>
  static void all_to_all(Ctx& c, const std::byte* in, std::byte* out, std::size_t count) {
    c.transport().native_all_to_all(c.info(), in, out, count, c.deadline());
  }

  template <class Ctx>
    requires native_barrier<typename Ctx::transport_type>
  static void barrier(Ctx& c) {
    c.transport().native_barrier(c.info(), c.deadline());
  }

 private:
  /// A backend that applies avg's division itself (NCCL's ncclAvg) tells the communicator not
  /// to divide again.
  template <class Ctx>
  static void averaged(Ctx& c) noexcept {
    if constexpr (requires { Ctx::transport_type::native_avg; })
      if constexpr (Ctx::transport_type::native_avg) c.mark_finished();
  }
};

}  // namespace tutti::inline v0

#pragma once
/// \file
/// tutti::inproc::run: `n` ranks as threads of this process, each with a communicator over
/// tutti::inproc. It sits above both the transport and the communicator (it builds
/// communicators over the transport), so transport/inproc.hpp only declares it; include this
/// header, or tutti/tutti.hpp, to call it.
///
///   tutti::inproc::run<tutti::ring>(4, [](auto& comm) { comm.all_reduce(span, tutti::sum); });

#include <atomic>
#include <cstddef>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tutti/algorithm/automatic.hpp"
#include "tutti/communicator.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/options.hpp"
#include "tutti/detail/inproc_world.hpp"
#include "tutti/transport/inproc.hpp"

namespace tutti::inline v0 {

template <class Algorithm, class Fn>
void inproc::run(int n, Fn&& fn, const options& opts) {
  if (n < 1) throw std::invalid_argument("tutti::inproc::run: world size must be at least 1");
  auto world = std::make_shared<detail::inproc_world>(n);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::atomic<int> failures{0};
  std::vector<int> order(static_cast<std::size_t>(n), -1);
  auto body = [&](int r) {
    try {
      {
        communicator<inproc, Algorithm> comm(inproc(world, r), opts);
        fn(comm);
      }  // the communicator's queued async work is done here
      world->mark_exited(r);
    } catch (...) {
      const auto i = static_cast<std::size_t>(r);
      errors[i] = std::current_exception();
      order[i] = failures.fetch_add(1);
      std::string what = "unknown exception";
      try {
        throw;
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      world->abort(errc::aborted, "rank " + std::to_string(r) + " failed: " + what, r, r);
      world->mark_exited(r);
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n));
  for (int r = 1; r < n; ++r) threads.emplace_back(body, r);
  body(0);
  for (auto& t : threads) t.join();
  // The cause is the earliest failure that is not an abort another failure caused.
  std::exception_ptr cause;
  int best = n + 1;
  for (int r = 0; r < n; ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (!errors[i]) continue;
    bool induced = false;
    try {
      std::rethrow_exception(errors[i]);
    } catch (const error& e) {
      induced = e.kind() == errc::aborted;
    } catch (...) {
    }
    const int rank_order = order[i] + (induced ? n : 0);
    if (rank_order < best) {
      best = rank_order;
      cause = errors[i];
    }
  }
  if (cause) std::rethrow_exception(cause);
}

template <class Fn>
void inproc::run(int n, Fn&& fn, const options& opts) {
  run<automatic>(n, std::forward<Fn>(fn), opts);
}

}  // namespace tutti::inline v0

// A collective's input and output must hold the same element type: converting on the fly is
// the caller's choice, so a mismatch is a compile-time error with a sentence.
// expect-error: static assertion failed
// expect-error: must hold the same element type
#include <cstdint>
#include <span>
#include <vector>

#include <tutti/tutti.hpp>

void gather_counts(tutti::communicator<tutti::inproc>& comm, std::span<const std::int32_t> mine);

void gather_counts(tutti::communicator<tutti::inproc>& comm, std::span<const std::int32_t> mine) {
#ifndef TUTTI_COMPILE_FAIL_CONTROL
  std::vector<std::int64_t> all(mine.size() * static_cast<std::size_t>(comm.size()));
#else
  std::vector<std::int32_t> all(mine.size() * static_cast<std::size_t>(comm.size()));
#endif
  comm.all_gather(mine, std::span(all));
}

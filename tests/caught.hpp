#pragma once
// What a call raised, for tests that assert on tutti::error's kind and message.

#include <string>
#include <string_view>

#include <tutti/core/error.hpp>

namespace tutti_test {

/// Whether a call raised a tutti::error, its kind and message.
struct caught {
  bool raised = false;
  tutti::errc kind{};
  std::string what;
};

/// Runs `f`, catching a tutti::error (any other exception propagates).
template <class F>
caught catch_error(F&& f) {
  caught c;
  try {
    f();
  } catch (const tutti::error& e) {
    c = {true, e.kind(), e.what()};
  }
  return c;
}

[[nodiscard]] inline bool contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

}  // namespace tutti_test

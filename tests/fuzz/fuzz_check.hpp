#pragma once
// What every libFuzzer target here checks its properties with: a violated property aborts,
// which libFuzzer reports as a crash and saves the input for.

#include <cstdlib>

namespace fuzz {

inline void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace fuzz

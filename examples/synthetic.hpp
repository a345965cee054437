#pragma once
// The examples' synthetic regression data and their weight comparison: deterministic
// pseudo-random inputs in [-1, 1) and targets y = sin(A x) for a fixed A, so that any number of
// processes draw the same samples by index; and the relative difference the examples check
// their weights by.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace synthetic {

/// Deterministic pseudo-random number in [-1, 1) from an index (SplitMix64).
inline double noise(std::uint64_t i) {
  std::uint64_t z = i + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30U)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27U)) * 0x94D049BB133111EBULL;
  z ^= z >> 31U;
  return static_cast<double>(z >> 11U) * 0x1p-52 - 1.0;
}

/// Sample i: x (in_dim values) uniform in [-1, 1), y (out_dim values) = sin(A x), computed in T.
template <class T>
void sample(std::size_t i, std::size_t in_dim, std::size_t out_dim, T* x, T* y) {
  for (std::size_t k = 0; k < in_dim; ++k) x[k] = static_cast<T>(noise(i * in_dim + k));
  for (std::size_t o = 0; o < out_dim; ++o) {
    T s = 0;
    for (std::size_t k = 0; k < in_dim; ++k)
      s += static_cast<T>(noise(1'000'003 + o * in_dim + k)) * x[k];
    y[o] = std::sin(s);
  }
}

/// |a - b| relative to the larger magnitude, floored at `floor` for values near zero.
inline double relative_difference(double a, double b, double floor = 1e-3) {
  return std::fabs(a - b) / std::max({std::fabs(a), std::fabs(b), floor});
}

}  // namespace synthetic

// The random numbers Tandem draws (weights, inputs, shuffles, splits): xoshiro256**
// seeded through splitmix64, with its own uniform, normal and bounded-integer transforms
// rather than <random>'s, whose distributions are implementation-defined: a seed gives
// the same values with every compiler and standard library. Not thread-safe; cheap to copy.
#pragma once

#include <cstdint>
#include <string_view>

namespace tandem {

class Rng {
 public:
  explicit Rng(uint64_t seed);
  /// A generator for one named stream under `seed`: adding a layer leaves the others' values alone.
  Rng(uint64_t seed, std::string_view stream);
  /// A generator for a numbered stream under `seed` (an epoch's shuffle); nearby pairs
  /// give unrelated states.
  Rng(uint64_t seed, uint64_t stream);

  uint64_t next();
  /// Uniform in [low, high).
  double uniform(double low, double high);
  /// Standard normal (Box-Muller).
  double normal();
  /// Uniform integer in [0, n) without modulo bias (Lemire's method); n > 0.
  uint64_t below(uint64_t n);

 private:
  uint64_t s_[4];
  double spare_normal_ = 0;
  bool has_spare_ = false;
};

}  // namespace tandem

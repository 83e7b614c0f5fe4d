// The random numbers Tandem draws (weights, inputs): xoshiro256** seeded through
// splitmix64, with its own uniform and normal transforms so that a seed gives the same
// values with every compiler and standard library.
#pragma once

#include <cstdint>
#include <string_view>

namespace tandem {

class Rng {
 public:
  explicit Rng(uint64_t seed);
  /// A generator for one named stream under `seed`: adding a layer leaves the others' values alone.
  Rng(uint64_t seed, std::string_view stream);

  uint64_t next();
  /// Uniform in [low, high).
  double uniform(double low, double high);
  /// Standard normal (Box-Muller).
  double normal();
  /// Uniform integer in [0, n); n > 0.
  int64_t below(int64_t n);

 private:
  uint64_t s_[4];
  double spare_normal_ = 0;
  bool has_spare_ = false;
};

}  // namespace tandem

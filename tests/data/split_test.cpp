// split_dataset: sizes, disjointness, determinism per seed.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>

#include "runtime/data/dataset.h"
#include "tests/data/data_test_util.h"

using namespace tandem;
using namespace data_test;

namespace {

/// Sample i holds id i, so a split shows which samples went where.
Dataset ids(int64_t n) {
  std::vector<int64_t> id(static_cast<size_t>(n));
  std::iota(id.begin(), id.end(), int64_t{0});
  std::vector<float> x(id.begin(), id.end());
  return Dataset(TensorMap{{"id", Tensor::from_vector({n}, id)}, {"x", Tensor::from_vector({n, 1}, x)}});
}

std::vector<int64_t> ids_of(const Dataset& d) { return d.tensors().at("id").to_vector<int64_t>(); }

}  // namespace

TEST_CASE("split sizes follow round of fraction times n", "[split]") {
  uint64_t seed = run_seed();
  INFO("seed " << seed);
  for (int64_t n : {1, 2, 10, 101, 1797}) {
    for (double f : {0.0, 0.1, 0.25, 0.5, 0.8}) {
      auto expected_val = static_cast<int64_t>(std::llround(f * static_cast<double>(n)));
      if (expected_val >= n) continue;
      INFO("n " << n << " fraction " << f);
      auto [train, val] = split_dataset(ids(n), f, seed);
      CHECK(val.size() == expected_val);
      CHECK(train.size() == n - expected_val);
      std::vector<int64_t> all = ids_of(train), v = ids_of(val);
      all.insert(all.end(), v.begin(), v.end());
      std::vector<int64_t> sorted = all;
      std::sort(sorted.begin(), sorted.end());
      std::vector<int64_t> expected(static_cast<size_t>(n));
      std::iota(expected.begin(), expected.end(), int64_t{0});
      CHECK(sorted == expected);  // disjoint, and together every sample once
      CHECK(val.tensors().at("x").shape() == Shape{expected_val, 1});
      // x moved with its id
      auto xs = train.tensors().at("x").to_vector<float>();
      auto tid = ids_of(train);
      for (size_t i = 0; i < xs.size(); ++i) CHECK(xs[i] == static_cast<float>(tid[i]));
    }
  }
}

TEST_CASE("split is deterministic per seed and differs across seeds", "[split]") {
  uint64_t seed = run_seed();
  INFO("seed " << seed);
  Dataset d = ids(1000);
  auto [t1, v1] = split_dataset(d, 0.2, seed);
  auto [t2, v2] = split_dataset(d, 0.2, seed);
  CHECK(ids_of(t1) == ids_of(t2));
  CHECK(ids_of(v1) == ids_of(v2));
  auto [t3, v3] = split_dataset(d, 0.2, seed + 1);
  CHECK(ids_of(v1) != ids_of(v3));
  // A shuffled split, not the last fifth of the file.
  std::vector<int64_t> tail(200);
  std::iota(tail.begin(), tail.end(), int64_t{800});
  CHECK(ids_of(v1) != tail);
  // Both parts keep the file's order and together hold every sample once.
  std::vector<int64_t> train_ids = ids_of(t1), val_ids = ids_of(v1);
  CHECK(std::is_sorted(train_ids.begin(), train_ids.end()));
  CHECK(std::is_sorted(val_ids.begin(), val_ids.end()));
  std::vector<int64_t> all = train_ids;
  all.insert(all.end(), val_ids.begin(), val_ids.end());
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expected(1000);
  std::iota(expected.begin(), expected.end(), int64_t{0});
  CHECK(all == expected);
  // A larger fraction of the same seed validates a superset: one permutation chooses both.
  auto [t4, v4] = split_dataset(d, 0.5, seed);
  std::vector<int64_t> v4ids = ids_of(v4);
  CHECK(std::includes(v4ids.begin(), v4ids.end(), val_ids.begin(), val_ids.end()));
}

TEST_CASE("split refuses fractions outside 0 to 1", "[split]") {
  Dataset d = ids(10);
  CHECK_THROWS_AS(split_dataset(d, 1.0, 1), UserError);
  CHECK_THROWS_AS(split_dataset(d, -0.1, 1), UserError);
  CHECK_THROWS_AS(split_dataset(d, std::nan(""), 1), UserError);
  CHECK_THROWS_WITH(split_dataset(d, 0.97, 1), Catch::Contains("leaves none to train on"));
  auto [train, val] = split_dataset(d, 0.0, 1);
  CHECK(train.size() == 10);
  CHECK(val.size() == 0);
  CHECK(val.tensors().at("id").shape() == Shape{0});
}

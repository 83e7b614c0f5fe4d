// Dataset: construction checks and gather.
#include <catch2/catch.hpp>

#include "runtime/data/dataset.h"
#include "tests/data/data_test_util.h"

using namespace tandem;
using namespace data_test;

TEST_CASE("gather copies the rows at the indices in order", "[dataset]") {
  uint64_t seed = run_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int64_t n = 50;
  std::vector<float> x(static_cast<size_t>(n * 2 * 3));
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (float& v : x) v = static_cast<float>(rng() % 1000) / 7.0f;
  for (int64_t& v : y) v = static_cast<int64_t>(rng());
  Dataset d(TensorMap{{"x", Tensor::from_vector({n, 2, 3}, x)}, {"y", Tensor::from_vector({n}, y)}});
  REQUIRE(d.size() == n);

  std::vector<int64_t> idx;
  for (int i = 0; i < 80; ++i) idx.push_back(static_cast<int64_t>(rng() % n));  // repeats allowed
  TensorMap g = d.gather(idx);
  REQUIRE(g.at("x").shape() == Shape{80, 2, 3});
  REQUIRE(g.at("y").shape() == Shape{80});
  for (size_t k = 0; k < idx.size(); ++k) {
    for (int j = 0; j < 6; ++j) CHECK(g.at("x").data<float>()[k * 6 + j] == x[static_cast<size_t>(idx[k] * 6 + j)]);
    CHECK(g.at("y").data<int64_t>()[k] == y[static_cast<size_t>(idx[k])]);
  }
  // Fresh memory: writing to the batch leaves the dataset alone.
  g.at("y").data<int64_t>()[0] = 12345;
  CHECK(d.tensors().at("y").data<int64_t>()[idx[0]] == y[static_cast<size_t>(idx[0])]);

  Dataset sub = d.subset(std::vector<int64_t>{3, 1});
  CHECK(sub.size() == 2);
  CHECK(sub.tensors().at("y").to_vector<int64_t>() == std::vector<int64_t>{y[3], y[1]});

  TensorMap none = d.gather({});
  CHECK(none.at("x").shape() == Shape{0, 2, 3});
}

TEST_CASE("a dataset needs one sample count", "[dataset]") {
  CHECK_THROWS_WITH(Dataset(TensorMap{{"a", Tensor::zeros({3, 2}, DType::float32)},
                                      {"b", Tensor::zeros({4}, DType::int64)}}),
                    "dataset tensor 'b' has 4 samples, 'a' has 3");
  CHECK_THROWS_AS(Dataset(TensorMap{{"a", Tensor::zeros({}, DType::float32)}}), UserError);
  CHECK(Dataset().size() == 0);
}

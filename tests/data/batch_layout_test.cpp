// to_model_layout: a batch of samples (dimension 0) laid out where the model takes its
// batch, e.g. [B, T] -> [T, B] for a sequence-first model.
#include <catch2/catch.hpp>

#include "runtime/data/dataset.h"
#include "tests/data/data_test_util.h"

using namespace tandem;
using namespace data_test;

TEST_CASE("to_model_layout moves the sample dimension to each column's batch_dim", "[dataset][layout]") {
  uint64_t seed = run_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int64_t b = 2 + static_cast<int64_t>(rng() % 7), t = 1 + static_cast<int64_t>(rng() % 9),
                c = 1 + static_cast<int64_t>(rng() % 5);
  INFO("b " << b << " t " << t << " c " << c);
  std::vector<int64_t> tokens(static_cast<size_t>(b * t));
  std::vector<float> feats(static_cast<size_t>(b * t * c)), flat(static_cast<size_t>(b * c));
  for (int64_t& v : tokens) v = static_cast<int64_t>(rng() % 100000) + 1;
  for (float& v : feats) v = static_cast<float>(rng() % 100000) / 7.0f + 1;
  for (float& v : flat) v = static_cast<float>(rng() % 100000) / 3.0f + 1;
  TensorMap batch{{"tokens", Tensor::from_vector({b, t}, tokens)},
                  {"feats", Tensor::from_vector({b, t, c}, feats)},
                  {"flat", Tensor::from_vector({b, c}, flat)}};
  const void* flat_data = batch.at("flat").raw_data();
  std::vector<ColumnSpec> columns(3);
  columns[0] = {"tokens", {t}, DType::int64, std::nullopt, 1};  // [T, B]
  columns[1] = {"feats", {t, c}, DType::float32, std::nullopt, 1};  // [T, B, C]
  columns[2] = {"flat", {c}, DType::float32, std::nullopt, 0};  // unchanged
  TensorMap out = to_model_layout(batch, columns);

  REQUIRE(out.at("tokens").shape() == Shape{t, b});
  REQUIRE(out.at("feats").shape() == Shape{t, b, c});
  REQUIRE(out.at("flat").shape() == Shape{b, c});
  CHECK(out.at("flat").raw_data() == flat_data);  // batch_dim 0: no copy
  const int64_t* tk = out.at("tokens").data<int64_t>();
  const float* ft = out.at("feats").data<float>();
  for (int64_t i = 0; i < b; ++i)
    for (int64_t s = 0; s < t; ++s) {
      CHECK(tk[s * b + i] == tokens[static_cast<size_t>(i * t + s)]);
      for (int64_t k = 0; k < c; ++k)
        CHECK(ft[(s * b + i) * c + k] == feats[static_cast<size_t>((i * t + s) * c + k)]);
    }
}

TEST_CASE("to_model_layout moves the samples of a 3-D column to its last dimension", "[dataset][layout]") {
  uint64_t seed = run_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int64_t b = 2 + static_cast<int64_t>(rng() % 5), p = 1 + static_cast<int64_t>(rng() % 4),
                q = 1 + static_cast<int64_t>(rng() % 4);
  std::vector<float> x(static_cast<size_t>(b * p * q));
  for (float& v : x) v = static_cast<float>(rng() % 100000) / 9.0f + 1;
  std::vector<ColumnSpec> columns{{"x", {p, q}, DType::float32, std::nullopt, 2}};  // [P, Q, B]
  TensorMap out = to_model_layout(TensorMap{{"x", Tensor::from_vector({b, p, q}, x)}}, columns);
  REQUIRE(out.at("x").shape() == Shape{p, q, b});
  const float* y = out.at("x").data<float>();
  for (int64_t i = 0; i < b; ++i)
    for (int64_t m = 0; m < p * q; ++m) CHECK(y[m * b + i] == x[static_cast<size_t>(i * p * q + m)]);
}

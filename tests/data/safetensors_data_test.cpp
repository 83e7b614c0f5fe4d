// Datasets from safetensors files: one tensor per column, samples along dimension 0.
#include <catch2/catch.hpp>

#include <cmath>

#include "runtime/data/dataset.h"
#include "runtime/io/safetensors.h"
#include "tests/data/data_test_util.h"

using namespace tandem;
using namespace data_test;

namespace {

const std::vector<ColumnSpec> kColumns = {{"x", {2, 3}, DType::float32, std::nullopt},
                                          {"label", {}, DType::int64, 4}};

TensorMap good_tensors(int64_t n) {
  std::vector<float> x(static_cast<size_t>(n * 6));
  std::vector<int64_t> label(static_cast<size_t>(n));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.5f;
  for (size_t i = 0; i < label.size(); ++i) label[i] = static_cast<int64_t>(i % 4);
  return {{"x", Tensor::from_vector({n, 2, 3}, x)}, {"label", Tensor::from_vector({n}, label)}};
}

}  // namespace

TEST_CASE("safetensors datasets load by tensor name", "[safetensors]") {
  TempDir dir;
  std::string path = dir.file("d.safetensors");
  TensorMap tensors = good_tensors(5);
  tensors.emplace("unused", Tensor::from_vector<float>({1}, {1.0f}));
  write_safetensors(path, tensors);
  Dataset d = load_dataset(spec_of(path), kColumns);
  CHECK(d.size() == 5);
  CHECK(d.tensors().size() == 2);
  CHECK(d.tensors().at("x").shape() == Shape{5, 2, 3});
  CHECK(d.tensors().at("x").to_vector<float>() == tensors.at("x").to_vector<float>());
  CHECK(d.tensors().at("label").to_vector<int64_t>() == tensors.at("label").to_vector<int64_t>());
}

TEST_CASE("bad safetensors datasets name the file and tensor", "[safetensors]") {
  TempDir dir;
  std::string path = dir.file("bad.safetensors");
  auto load_with = [&](TensorMap tensors) {
    write_safetensors(path, tensors);
    return load_dataset(spec_of(path), kColumns);
  };
  TensorMap t = good_tensors(5);

  SECTION("missing tensor") {
    t.erase("label");
    CHECK_THROWS_WITH(load_with(t), path + ": no tensor 'label' (the file holds: x)");
  }
  SECTION("wrong dtype") {
    t["label"] = Tensor::from_vector<float>({5}, {0, 1, 2, 3, 0});
    CHECK_THROWS_WITH(load_with(t), path + ": tensor 'label' is float32, expected int64");
  }
  SECTION("wrong sample shape") {
    t["x"] = t["x"].view({5, 6});
    CHECK_THROWS_WITH(load_with(t), path + ": tensor 'x' has shape [5, 6], expected [N, 2, 3]");
  }
  SECTION("scalar label given a trailing dimension") {
    t["label"] = t["label"].view({5, 1});
    CHECK_THROWS_WITH(load_with(t), path + ": tensor 'label' has shape [5, 1], expected [N]");
  }
  SECTION("different sample counts") {
    t["label"] = Tensor::from_vector<int64_t>({4}, {0, 1, 2, 3});
    CHECK_THROWS_WITH(load_with(t), path + ": tensor 'label' has 4 samples, 'x' has 5");
  }
  SECTION("label out of range") {
    t["label"] = Tensor::from_vector<int64_t>({5}, {0, 1, 2, 4, 0});
    CHECK_THROWS_WITH(load_with(t), path + ": tensor 'label': sample 3: label 4 is outside [0, 4)");
  }
  SECTION("label out of range but the loss's ignore_index") {
    t["label"] = Tensor::from_vector<int64_t>({5}, {0, -100, 2, -1, 0});
    std::vector<ColumnSpec> columns = kColumns;
    columns[1].ignored = -100;
    write_safetensors(path, t);
    CHECK_THROWS_WITH(load_dataset(spec_of(path), columns),
                      path + ": tensor 'label': sample 3: label -1 is outside [0, 4)");
    t["label"] = Tensor::from_vector<int64_t>({5}, {0, -100, 2, 3, -100});
    write_safetensors(path, t);
    CHECK(load_dataset(spec_of(path), columns).tensors().at("label").to_vector<int64_t>() ==
          std::vector<int64_t>{0, -100, 2, 3, -100});
  }
  SECTION("NaN or infinite values") {
    t["x"].data<float>()[3 * 6 + 4] = std::nanf("");
    CHECK_THROWS_WITH(load_with(t), path + ": tensor 'x': sample 3, element 4 is nan; training data must hold finite "
                                           "values (drop or fill in that sample)");
    t = good_tensors(5);
    t["x"].data<float>()[7] = -INFINITY;
    CHECK_THROWS_WITH(load_with(t), path + ": tensor 'x': sample 1, element 1 is -inf; training data must hold "
                                           "finite values (drop or fill in that sample)");
  }
  SECTION("no samples") {
    CHECK_THROWS_WITH(load_with(good_tensors(0)), path + ": no samples");
  }
  SECTION("a column mapping") {
    write_safetensors(path, t);
    DataSpec spec = spec_of(path);
    spec.columns = {{"x", "0:6"}};
    CHECK_THROWS_WITH(load_dataset(spec, kColumns), Catch::Contains("the mapping is for CSV only"));
  }
  SECTION("missing file") {
    CHECK_THROWS_AS(load_dataset(spec_of(dir.file("none.safetensors")), kColumns), UserError);
  }
}

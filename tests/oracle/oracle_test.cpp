// Tandem against PyTorch: for every case that tests/oracle/make_cases.py prepared (the
// models in tests/oracle/cases and configs/, with fresh random weights and inputs), run
// the same weights and inputs through Tandem and compare every output.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/io/safetensors.h"
#include "runtime/model.h"

namespace {

using tandem::Tensor;
using tandem::TensorMap;

nlohmann::json manifest() {
  std::ifstream in(std::string(TANDEM_ORACLE_DIR) + "/manifest.json");
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

// max|a - b| / max|b|: the error relative to the tensor's scale.
double relative_error(const Tensor& actual, const Tensor& expected) {
  REQUIRE(actual.shape() == expected.shape());
  REQUIRE(actual.dtype() == expected.dtype());
  if (actual.dtype() == tandem::DType::int64) return actual.to_vector<int64_t>() == expected.to_vector<int64_t>() ? 0 : 1;
  auto a = actual.span<float>(), b = expected.span<float>();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    diff = std::max(diff, std::abs(double(a[i]) - b[i]));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

void compare_outputs(const TensorMap& actual, const TensorMap& expected, const std::string& case_name) {
  REQUIRE(actual.size() == expected.size());
  for (const auto& [name, want] : expected) {
    INFO("case " << case_name << ", output " << name);
    REQUIRE(actual.count(name) == 1);
    double err = relative_error(actual.at(name), want);
    CHECK(err <= 1e-5);
  }
}

}  // namespace

TEST_CASE("every model computes what PyTorch computes", "[oracle]") {
  nlohmann::json m = manifest();
  INFO("oracle seed " << m["seed"]);
  REQUIRE(m["cases"].size() >= 10);
  for (const auto& c : m["cases"]) {
    std::string name = c["name"], dir = c["dir"];
    DYNAMIC_SECTION(name) {
      tandem::Model model = tandem::Model::load(c["model"]);
      model.load_weights(dir + "/weights.safetensors");
      TensorMap inputs = tandem::read_safetensors(dir + "/inputs.safetensors");
      TensorMap expected = tandem::read_safetensors(dir + "/expected.safetensors");
      compare_outputs(model.forward(inputs), expected, name);
      // a second forward reuses the compiled kernels and gives the same answer
      int64_t primitives = model.primitives_created();
      compare_outputs(model.forward(inputs), expected, name);
      CHECK(model.primitives_created() == primitives);
    }
  }
}

TEST_CASE("the tandem CLI computes what PyTorch computes", "[oracle][cli]") {
  nlohmann::json m = manifest();
  std::filesystem::path scratch = std::filesystem::temp_directory_path() / ("tandem-oracle-cli-" + std::to_string(getpid()));
  std::filesystem::create_directories(scratch);
  for (const auto& c : m["cases"]) {
    std::string name = c["name"], dir = c["dir"];
    std::string out = (scratch / (name + ".safetensors")).string();
    std::string cmd = std::string(TANDEM_CLI) + " run '" + c["model"].get<std::string>() + "' --weights '" + dir +
                      "/weights.safetensors' --inputs '" + dir + "/inputs.safetensors' --outputs '" + out + "' > /dev/null";
    INFO("case " << name << ": " << cmd);
    REQUIRE(std::system(cmd.c_str()) == 0);
    compare_outputs(tandem::read_safetensors(out), tandem::read_safetensors(dir + "/expected.safetensors"), name);
  }
  std::filesystem::remove_all(scratch);
}

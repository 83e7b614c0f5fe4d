// bf16 against fp32: for every case whose model says `precision: bf16` (make_cases.py ran
// it under torch.autocast; oracle_test.cpp and oracle_train_test.cpp hold Tandem's bf16 to
// autocast's outputs and gradients), the same model in fp32 is PyTorch's fp32 to 1e-5, and
// Tandem's bf16 is its own fp32 to the case's tolerance (outputs 1e-2, gradients 2e-2 of
// each tensor's largest value), or, where bf16 itself strays further (a gradient through a
// softmax and a layer_norm, or an output, whose terms cancel), to twice autocast's own
// distance from PyTorch's fp32. Each error is printed, so a run shows how far bf16 is.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "runtime/io/safetensors.h"
#include "runtime/model.h"
#include "tests/oracle/oracle_util.h"

namespace {

using tandem::Precision;
using tandem::TensorMap;

TensorMap with_prefix(const TensorMap& all, const std::string& prefix) {
  TensorMap out;
  for (const auto& [name, t] : all)
    if (name.starts_with(prefix)) out.emplace(name.substr(prefix.size()), t);
  return out;
}

tandem::Model load(const nlohmann::json& c, Precision precision) {
  tandem::Model model = tandem::Model::load(c["model"]);
  model.set_precision(precision);
  model.to(tandem::Device::cpu());
  model.load_weights(c["dir"].get<std::string>() + "/weights.safetensors");
  return model;
}

/// Every gradient of one backward (parameters by name, inputs as "input.NAME").
TensorMap gradients(tandem::Model& model, const TensorMap& inputs, const TensorMap& grad_outputs) {
  model.zero_gradients();
  TensorMap out;
  for (const auto& [name, g] : model.backward(inputs, grad_outputs, /*training=*/false)) out.emplace("input." + name, g);
  for (const auto& [name, g] : model.gradients()) out.emplace(name, model.gradient(name));
  return out;
}

}  // namespace

TEST_CASE("bf16 models stay within their tolerance of fp32, forward and backward", "[oracle][precision]") {
  nlohmann::json m = oracle::manifest();
  INFO("oracle seed " << m["seed"]);
  int cases = 0;
  for (const auto& c : m["cases"]) {
    if (c.value("precision", "fp32") == "fp32") continue;
    ++cases;
    const std::string name = c["name"], dir = c["dir"];
    DYNAMIC_SECTION(name) {
      tandem::Model bf16 = load(c, Precision::bf16);
      tandem::Model fp32 = load(c, Precision::fp32);
      const TensorMap inputs = tandem::read_safetensors(dir + "/inputs.safetensors");
      const TensorMap autocast = tandem::read_safetensors(dir + "/expected.safetensors");
      const TensorMap torch_fp32 = tandem::read_safetensors(dir + "/expected_fp32.safetensors");
      const TensorMap out16 = bf16.forward(inputs), out32 = fp32.forward(inputs);
      const double tolerance = c["tolerance"];
      for (const auto& [output, want] : torch_fp32) {
        INFO("output " << output);
        CHECK(oracle::relative_error(out32.at(output), want) <= 1e-5);
        const double vs_fp32 = oracle::relative_error(out16.at(output), out32.at(output));
        const double vs_autocast = oracle::relative_error(out16.at(output), autocast.at(output));
        const double autocast_vs_fp32 = oracle::relative_error(autocast.at(output), want);
        std::printf("precision: %s output %s: bf16 vs fp32 %.2e (autocast's %.2e), vs autocast %.2e\n", name.c_str(),
                    output.c_str(), vs_fp32, autocast_vs_fp32, vs_autocast);
        CHECK(vs_fp32 <= std::max(tolerance, 2 * autocast_vs_fp32));
      }
      if (!c.value("grads", false)) return;
      const TensorMap grad_outputs = with_prefix(tandem::read_safetensors(dir + "/grads.safetensors"), "grad_output.");
      const TensorMap g16 = gradients(bf16, inputs, grad_outputs), g32 = gradients(fp32, inputs, grad_outputs);
      const TensorMap autocast_grads = tandem::read_safetensors(dir + "/grads.safetensors");
      const TensorMap torch_grads = tandem::read_safetensors(dir + "/grads_fp32.safetensors");
      const double grad_tolerance = c["grad_tolerance"];
      for (const auto& [grad, want] : g32) {
        INFO("gradient of " << grad);
        // the oracle's names: grad.PARAM, grad_input.INPUT
        const std::string key = grad.starts_with("input.") ? "grad_input." + grad.substr(6) : "grad." + grad;
        CHECK(oracle::relative_error(want, torch_grads.at(key)) <= 1e-4);
        const double err = oracle::relative_error(g16.at(grad), want);
        const double autocast_err = oracle::relative_error(autocast_grads.at(key), torch_grads.at(key));
        std::printf("precision: %s gradient of %s: bf16 vs fp32 %.2e (autocast's %.2e)\n", name.c_str(), grad.c_str(),
                    err, autocast_err);
        CHECK(err <= std::max(grad_tolerance, 2 * autocast_err));
      }
    }
  }
  CHECK(cases >= 10);  // linear, matmul, conv2d, attention and the recurrent layers, each at two batch sizes
}

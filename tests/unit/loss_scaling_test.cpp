// fp16 training's dynamic loss scaling (runtime/optim/loss_scaler.h) against a reference
// of torch.cuda.amp.GradScaler's algorithm written here: the scale each step runs with,
// which steps are skipped, and the weights, step by step. This CPU runs fp16 layers in
// fp32 (docs/precision.md), so what is tested is the scaler's mechanics: with a
// power-of-two scale a clean step's update is the unscaled fp32 run's to the bit, and a
// skipped step leaves the weights and the optimizer's state alone.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <unistd.h>

#include "graph/load_graph.h"
#include "runtime/trainer.h"
#include "unit_test_support.h"

using namespace tandem;
using tandem::testing::run_cli;
using tandem::testing::seeded_rng;

namespace {

/// A small regression MLP whose precision and loss_scaling the test writes.
std::string model_yaml(const std::string& precision, const std::string& loss_scaling) {
  return "name: scaled\n"
         "precision: " + precision + "\n"
         "inputs:\n"
         "  x: {shape: [batch, 6]}\n"
         "targets:\n"
         "  y: {shape: [batch, 3]}\n"
         "layers:\n"
         "  - {name: fc1, op: linear, in_features: 6, out_features: 16}\n"
         "  - {name: act, op: tanh}\n"
         "  - {name: fc2, op: linear, in_features: 16, out_features: 3}\n"
         "loss: {op: mse_loss, input: fc2, target: y}\n"
         "train:\n"
         "  batch: 8\n"
         "  seed: 5\n"
         "  optimizer: {name: adam, lr: 0.01}\n" +
         (loss_scaling.empty() ? "" : "  loss_scaling: " + loss_scaling + "\n");
}

Model load_model(const std::string& precision, const std::string& loss_scaling = "") {
  Model m(load_graph_from_string(model_yaml(precision, loss_scaling), "scaled.yaml"));
  m.init_parameters(5);
  return m;
}

/// Fresh N(0, 1) inputs and N(0, y_sigma) targets.
TensorMap random_batch(std::mt19937_64& rng, float y_sigma = 1.0f) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Tensor x = Tensor::empty({8, 6}, DType::float32), y = Tensor::empty({8, 3}, DType::float32);
  for (float& v : x.span<float>()) v = normal(rng);
  for (float& v : y.span<float>()) v = y_sigma * normal(rng);
  return {{"x", x}, {"y", y}};
}

/// Whether two models' parameters are equal to the bit.
bool same_weights(const Model& a, const Model& b) {
  for (const auto& [name, p] : a.parameters()) {
    const Tensor& q = b.parameters().at(name);
    if (std::memcmp(p.raw_data(), q.raw_data(), p.nbytes()) != 0) return false;
  }
  return true;
}

/// GradScaler's update as torch 1.13's amp_update_scale_cuda_kernel writes it.
struct ReferenceScaler {
  float scale;
  double growth_factor = 2.0, backoff_factor = 0.5;
  int growth_interval;
  int growth_tracker = 0;
  void update(bool found_inf) {
    if (found_inf) {
      scale = static_cast<float>(scale * backoff_factor);
      growth_tracker = 0;
    } else if (growth_tracker + 1 == growth_interval) {
      const float grown = static_cast<float>(scale * growth_factor);
      if (std::isfinite(grown)) scale = grown;
      growth_tracker = 0;
    } else {
      ++growth_tracker;
    }
  }
};

/// Whether any gradient of `m` holds an inf or a NaN.
bool any_not_finite(const Model& m) {
  for (const auto& [name, g] : m.gradients())
    for (float v : g.span<float>())
      if (!std::isfinite(v)) return true;
  return false;
}

}  // namespace

TEST_CASE("fp16 loss scaling follows GradScaler's schedule: scale, skipped steps and weights", "[precision][loss_scaling]") {
  std::mt19937_64 rng = seeded_rng("loss scaling schedule");
  // Started at 2^116 and grown every 2 clean steps, the scale climbs until the scaled
  // gradients (of targets ~N(0, 1000): up to ~2^8) overflow near 2^120, backs off, and
  // climbs again: GradScaler's steady state, reached in a few steps with finite losses.
  // Step 9's batch has an infinite target (an infinite loss): skipped too, not stopped.
  const float init = std::ldexp(1.0f, 116);
  Model fp16 = load_model("fp16", "{init_scale: " + std::to_string(static_cast<double>(init)) + ", growth_interval: 2}");
  Model fp32 = load_model("fp32");   // trained on the steps the reference scaler takes
  Model probe = load_model("fp32");  // the reference's overflow check: fp32's weights, the scaled backward
  Trainer trainer(fp16, fp16.graph().training.value());
  Trainer reference(fp32, fp32.graph().training.value());
  REQUIRE(trainer.scales_loss());
  REQUIRE_FALSE(reference.scales_loss());
  ReferenceScaler expected{init, 2.0, 0.5, 2};

  int skipped = 0, finite_loss_skips = 0, growths = 0;
  for (int step = 0; step < 40; ++step) {
    INFO("step " << step + 1 << ", scale 2^" << std::log2(expected.scale));
    TensorMap batch = random_batch(rng, 1000.0f);
    if (step == 8) batch.at("y").data<float>()[4] = INFINITY;
    CHECK(trainer.loss_scale() == expected.scale);
    probe.set_weights(fp32.parameters());
    probe.zero_gradients();
    const double probe_loss = probe.loss_and_backward(batch, 0, nullptr, expected.scale).loss;
    const bool found_inf = any_not_finite(probe);
    const float before = expected.scale;
    expected.update(found_inf);
    growths += expected.scale > before;

    const double loss = trainer.step(batch);
    CHECK(trainer.last_step_skipped() == found_inf);
    CHECK(trainer.loss_scale() == expected.scale);
    CHECK(trainer.loss_scale_growth_tracker() == expected.growth_tracker);
    if (found_inf) {
      ++skipped;
      finite_loss_skips += std::isfinite(loss);
      if (step == 8) CHECK(std::isinf(loss));
    } else {
      CHECK(loss == reference.step(batch));
      CHECK(loss == probe_loss);
    }
    CHECK(same_weights(fp16, fp32));  // skipped: neither moved; clean: the same update to the bit
  }
  CHECK(trainer.skipped_steps() == skipped);
  CHECK(trainer.steps_done() == 40);
  // the test saw what it is about: overflows with finite losses, the infinite one, growth
  CHECK(finite_loss_skips >= 3);
  CHECK(skipped > finite_loss_skips);
  CHECK(growths >= 3);
}

TEST_CASE("fp32 and bf16 train without loss scaling, fp16 without overflows trains as fp32 to the bit",
          "[precision][loss_scaling]") {
  std::mt19937_64 rng = seeded_rng("loss scaling off");
  Model fp32 = load_model("fp32"), bf16 = load_model("bf16"), fp16 = load_model("fp16"),
        fp16_unscaled = load_model("fp16", "{enabled: false}");
  Trainer t32(fp32, fp32.graph().training.value()), t16(fp16, fp16.graph().training.value()),
      tb16(bf16, bf16.graph().training.value()), tu(fp16_unscaled, fp16_unscaled.graph().training.value());
  CHECK_FALSE(t32.scales_loss());
  CHECK_FALSE(tb16.scales_loss());
  CHECK_FALSE(tu.scales_loss());
  CHECK(t32.loss_scale() == 1.0f);
  CHECK(t16.loss_scale() == 65536.0f);  // torch's init_scale
  for (int step = 0; step < 10; ++step) {
    TensorMap batch = random_batch(rng);
    const double loss = t32.step(batch);
    CHECK(t16.step(batch) == loss);
    CHECK(tu.step(batch) == loss);
    tb16.step(batch);
  }
  CHECK(same_weights(fp16, fp32));
  CHECK(same_weights(fp16_unscaled, fp32));
  CHECK(t16.skipped_steps() == 0);
  CHECK(t16.loss_scale() == 65536.0f);  // 10 clean steps of the 2000 that grow it
  CHECK(t16.loss_scale_growth_tracker() == 10);
  CHECK(tb16.skipped_steps() == 0);

  // accumulated micro-batches: each one's loss gradient is scaled, the step unscales once
  Model acc32 = load_model("fp32"), acc16 = load_model("fp16");
  TrainingSpec spec = acc32.graph().training.value();
  spec.accumulate = 2;  // two micro-batches of 8 a step
  Trainer ta32(acc32, spec), ta16(acc16, spec);
  for (int step = 0; step < 5; ++step) {
    TensorMap batch = random_batch(rng), more = random_batch(rng);
    for (auto& [name, t] : batch) {  // 16 samples: two micro-batches
      Tensor both = Tensor::empty({16, t.size(1)}, DType::float32);
      std::memcpy(both.raw_data(), t.raw_data(), t.nbytes());
      std::memcpy(static_cast<char*>(both.raw_data()) + t.nbytes(), more.at(name).raw_data(), t.nbytes());
      t = both;
    }
    CHECK(ta16.step(batch) == ta32.step(batch));
  }
  CHECK(ta16.scales_loss());
  CHECK(same_weights(acc16, acc32));
}

TEST_CASE("a NaN loss still stops fp32 training, fp16 skips it until the scale has shrunk to nothing",
          "[precision][loss_scaling]") {
  std::mt19937_64 rng = seeded_rng("loss scaling stop");
  TensorMap bad = random_batch(rng);
  bad.at("x").data<float>()[3] = std::nanf("");  // a NaN loss, and NaN gradients at any scale
  {
    Model m = load_model("fp32");
    Trainer t(m, m.graph().training.value());
    CHECK_THROWS_WITH(t.step(bad), Catch::Contains("step 1 (epoch 1): the training loss is NaN"));
  }
  // from 2^-120 the scale falls below fp32's smallest normal (2^-126) at the 7th skip
  Model m = load_model("fp16", "{init_scale: 7.52316384526264e-37}");
  Trainer t(m, m.graph().training.value());
  REQUIRE(t.loss_scale() == std::ldexp(1.0f, -120));
  for (int i = 0; i < 6; ++i) {
    t.step(bad);
    CHECK(t.last_step_skipped());
  }
  CHECK(t.skipped_steps() == 6);
  CHECK_THROWS_WITH(t.step(bad), Catch::Contains("step 7 (epoch 1): the gradients were not finite (the training loss is "
                                                 "NaN) in 7 steps in a row, and fp16 loss scaling skipped each"));
}

TEST_CASE("a checkpoint keeps the loss scaler's state: a resumed fp16 run is the uninterrupted one to the bit",
          "[precision][loss_scaling][checkpoint]") {
  std::mt19937_64 rng = seeded_rng("loss scaling checkpoint");
  std::vector<TensorMap> batches;
  for (int i = 0; i < 16; ++i) batches.push_back(random_batch(rng, 1000.0f));
  // from 2^119, grown every 2 clean steps, the scale overflows within the first 8 steps
  const std::string scaling = "{init_scale: " + std::to_string(static_cast<double>(std::ldexp(1.0f, 119))) +
                              ", growth_interval: 2}";
  const std::string path =
      (std::filesystem::temp_directory_path() / ("tandem-loss-scaling-" + std::to_string(getpid()) + ".safetensors"))
          .string();
  Model whole = load_model("fp16", scaling);
  Trainer uninterrupted(whole, whole.graph().training.value());
  for (int i = 0; i < 8; ++i) uninterrupted.step(batches[i]);
  REQUIRE(uninterrupted.skipped_steps() > 0);  // the state is worth keeping
  uninterrupted.save_checkpoint(path);
  for (int i = 8; i < 16; ++i) uninterrupted.step(batches[i]);

  Model resumed_model = load_model("fp16", scaling);
  Trainer resumed(resumed_model, resumed_model.graph().training.value());
  resumed.load_checkpoint(path);
  for (int i = 8; i < 16; ++i) resumed.step(batches[i]);
  CHECK(same_weights(whole, resumed_model));
  CHECK(resumed.loss_scale() == uninterrupted.loss_scale());
  CHECK(resumed.loss_scale_growth_tracker() == uninterrupted.loss_scale_growth_tracker());
  CHECK(resumed.skipped_steps() == uninterrupted.skipped_steps());

  // a run that does not scale the loss refuses the state, and one that does needs it
  Model fp32 = load_model("fp32");
  Trainer plain(fp32, fp32.graph().training.value());
  CHECK_THROWS_WITH(plain.load_checkpoint(path),
                    Catch::Contains(path + ": the checkpoint holds fp16 loss scaling state, and this run does not"));
  plain.save_checkpoint(path);
  Trainer scaled(resumed_model, resumed_model.graph().training.value());
  CHECK_THROWS_WITH(scaled.load_checkpoint(path),
                    Catch::Contains(path + ": the checkpoint holds no fp16 loss scaling state, and this run scales"));
  // --weights reads the weights alone
  uninterrupted.save_checkpoint(path);
  Model weights_only = load_model("fp32");
  weights_only.load_weights(path);
  CHECK(same_weights(weights_only, whole));
  std::filesystem::remove(path);
}

TEST_CASE("train: loss_scaling is checked where it is written", "[precision][loss_scaling][keys]") {
  auto error_of = [](const std::string& value) {
    try {
      load_graph_from_string(model_yaml("fp16", value), "scaled.yaml");
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // line 16 is loss_scaling's; its mapping starts at column 17
  CHECK_THAT(error_of("{growth_factor: 1}"),
             Catch::Contains("scaled.yaml:16:33") && Catch::Contains("growth_factor must be greater than 1"));
  CHECK_THAT(error_of("{backoff_factor: 1.5}"),
             Catch::Contains("scaled.yaml:16:34") && Catch::Contains("backoff_factor must lie strictly between 0 and 1"));
  CHECK_THAT(error_of("{init_scale: 0}"), Catch::Contains("scaled.yaml:16:30") && Catch::Contains("init_scale must be"));
  CHECK_THAT(error_of("{growth_interval: 0}"),
             Catch::Contains("scaled.yaml:16:35") && Catch::Contains("growth_interval must be a whole number"));
  CHECK_THAT(error_of("{growth_intervall: 10}"),
             Catch::Contains("scaled.yaml:16:") && Catch::Contains("growth_intervall") &&
                 Catch::Contains("growth_interval"));
  CHECK_THAT(error_of("2000"), Catch::Contains("scaled.yaml:16:17") && Catch::Contains("loss_scaling must be a mapping"));
  const Graph g = load_graph_from_string(
      model_yaml("fp16", "{init_scale: 1024, growth_factor: 4, backoff_factor: 0.25, growth_interval: 7}"), "s.yaml");
  const LossScalingConfig& c = g.training->loss_scaling;
  CHECK(c.enabled);
  CHECK(c.init_scale == 1024);
  CHECK(c.growth_factor == 4);
  CHECK(c.backoff_factor == 0.25);
  CHECK(c.growth_interval == 7);
}

TEST_CASE("tandem train reports the steps fp16 loss scaling skipped, in its lines and in --json",
          "[precision][loss_scaling][cli]") {
  std::mt19937_64 rng = seeded_rng("loss scaling report");
  const std::string base = (std::filesystem::temp_directory_path() / ("tandem-loss-scaling-cli-" + std::to_string(getpid())))
                               .string();
  {
    std::ofstream data(base + ".csv");
    for (int i = 0; i < 64; ++i) {
      TensorMap b = random_batch(rng, 1000.0f);
      for (int j = 0; j < 6; ++j) data << b.at("x").data<float>()[j] << ",";
      for (int j = 0; j < 3; ++j) data << b.at("y").data<float>()[j] << (j < 2 ? "," : "\n");
    }
  }
  // 2^126: the gradients (up to ~2^8) overflow until the scale has backed off to ~2^119
  std::ofstream(base + ".yaml") << model_yaml("fp16", "{init_scale: 8.507059173023462e+37}") << "  epochs: 2\n"
                                << "  data: {path: " << base << ".csv}\n";
  int code = 0;
  const std::string out = run_cli("train " + base + ".yaml --json", &code);
  INFO(out);
  REQUIRE(code == 0);
  const nlohmann::json j = nlohmann::json::parse(tandem::testing::json_summary(out));
  const int64_t skipped = j["skipped_steps"].get<int64_t>();
  CHECK(skipped >= 4);
  CHECK(skipped < j["steps"].get<int64_t>());
  CHECK(j["epochs"][0]["skipped_steps"].get<int64_t>() + j["epochs"][1]["skipped_steps"].get<int64_t>() == skipped);
  CHECK(j["loss_scale"].get<double>() <= std::ldexp(1.0, 122));
  const std::string lines = run_cli("train " + base + ".yaml", &code);
  CHECK(code == 0);
  CHECK_THAT(lines, Catch::Contains("skipped (loss scale") &&
                        Catch::Contains("(" + std::to_string(skipped) + " skipped by fp16 loss scaling, scale now"));
  // fp32 says nothing about it
  const std::string plain = run_cli("train " + base + ".yaml --json --precision fp32", &code);
  CHECK(code == 0);
  CHECK(plain.find("skipped") == std::string::npos);
  for (const char* ext : {".csv", ".yaml"}) std::filesystem::remove(base + ext);
}

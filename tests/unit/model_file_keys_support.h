// What the tests of a model file's train:, loss: and placement: keys share: a small
// classifier whose sections a test writes key by key, fresh random data, `tandem train` on
// the file, and the same training in process with the values set in code.
//
// How a key is checked (check_key): with two values, `tandem train` on the file must train
// exactly as the Trainer does with that value set in code, and the two values must train
// differently, so that a key the file or the command line drops fails; where a flag sets
// the key, the flag wins over the file, both ways.
#pragma once

#include <catch2/catch.hpp>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "graph/load_graph.h"
#include "runtime/io/safetensors.h"
#include "runtime/trainer.h"
#include "unit_test_support.h"

namespace tandem::testing {

inline std::string scratch_file(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("tandem-keys-" + std::to_string(getpid()) + "-" + name)).string();
}

/// 12 samples: x (4 floats, N(0, 1)), then label (1, 2, 0, 1, ...: ignore_index: 1 has
/// something to ignore, and no batch of the file's order is all ignored, whose mean loss
/// would be NaN) and other_label (classes 0..2, random), one sample a line.
inline std::string write_random_csv(const std::string& name, std::mt19937_64& rng, const std::string& header = "") {
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int> cls(0, 2);
  const std::string path = scratch_file(name);
  std::ofstream out(path);
  if (!header.empty()) out << header << "\n";
  for (int i = 0; i < 12; ++i) {
    for (int j = 0; j < 4; ++j) out << normal(rng) << ",";
    out << (i + 1) % 3 << "," << cls(rng) << "\n";
  }
  return path;
}

/// A model file's sections, key by key: each value is the YAML written after `key: `.
struct Sections {
  std::map<std::string, std::string> train;
  std::map<std::string, std::string> loss;
  std::string placement;  // the placement: value; empty: no placement: key
};

inline std::string flow_map(const std::map<std::string, std::string>& keys) {
  std::string s = "{";
  for (const auto& [key, value] : keys) s += (s.size() > 1 ? ", " : "") + key + ": " + value;
  return s + "}";
}

/// fc: linear(4, 3), then act: tanh; the loss scores fc against label unless told otherwise.
inline std::string model_yaml(const Sections& sections) {
  std::string yaml = R"(name: keys
inputs:
  x: {shape: [batch, 4]}
targets:
  label: {shape: [batch], dtype: int64}
  other_label: {shape: [batch], dtype: int64}
layers:
  - {name: fc, op: linear, in_features: 4, out_features: 3}
  - {name: act, op: tanh}
outputs: [fc, act]
)";
  yaml += "loss: " + flow_map(sections.loss) + "\n";
  if (!sections.train.empty()) yaml += "train: " + flow_map(sections.train) + "\n";
  if (!sections.placement.empty()) yaml += "placement: " + sections.placement + "\n";
  return yaml;
}

/// What a training run did, as far as a key can change it.
struct Outcome {
  int64_t steps = 0, train_samples = 0, validation_samples = 0;
  std::vector<double> step_losses;        // every epoch's, in order
  std::vector<double> validation_losses;  // one per epoch with a validation set
  std::vector<float> weights;             // fc.weight, then fc.bias, after training
  std::map<std::string, size_t> device_peaks;  // placed runs: peak bytes per device
};

inline std::vector<float> fc_weights(const TensorMap& weights) {
  std::vector<float> w = weights.at("fc.weight").to_vector<float>();
  std::vector<float> b = weights.at("fc.bias").to_vector<float>();
  w.insert(w.end(), b.begin(), b.end());
  return w;
}

/// `tandem train FILE --json FLAGS`; FAILs with its output unless it exits 0.
inline Outcome train_cli(const std::string& model_path, const std::string& flags) {
  const std::string weights = scratch_file("weights.safetensors");
  int code = -1;
  // TANDEM_SIM_GPUS would place every run: the tests say when they want GPUs
  const std::string out = run_cli("train " + model_path + " --json --save-weights " + weights + " " + flags, &code,
                                  "env -u TANDEM_SIM_GPUS ");
  INFO("tandem train " << model_path << " " << flags << "\n" << out);
  REQUIRE(code == 0);
  const nlohmann::json j = nlohmann::json::parse(json_summary(out));
  Outcome o;
  o.steps = j.at("steps");
  o.train_samples = j.at("train_samples");
  o.validation_samples = j.at("validation_samples");
  for (const auto& epoch : j.at("epochs")) {
    for (const auto& loss : epoch.at("step_losses")) o.step_losses.push_back(loss);
    if (epoch.contains("validation_loss")) o.validation_losses.push_back(epoch.at("validation_loss"));
  }
  if (j.contains("devices"))
    for (const auto& d : j.at("devices")) o.device_peaks[d.at("device")] = d.at("peak_bytes");
  o.weights = fc_weights(read_safetensors(weights));
  std::filesystem::remove(weights);
  return o;
}

/// What `tandem train` does, in process, with `spec` and the graph as given: the reference
/// a run from the file must equal.
inline Outcome train_in_process(const Graph& graph, const TrainingSpec& spec) {
  Model model(graph);
  model.init_parameters(spec.seed);
  const Dataset all = load_dataset(*spec.data, data_columns(model.graph()));
  auto [train, validation] = split_dataset(all, spec.validation_split, spec.seed);
  Trainer trainer(model, spec);
  Outcome o;
  trainer.fit(train, &validation, "", [&](const EpochReport& r) {
    o.step_losses.insert(o.step_losses.end(), r.step_losses.begin(), r.step_losses.end());
    if (r.validation) o.validation_losses.push_back(r.validation->loss);
  });
  o.steps = trainer.steps_done();
  o.train_samples = train.size();
  o.validation_samples = validation.size();
  o.weights = fc_weights(model.parameters());
  return o;
}

/// How far apart two runs are: the largest relative difference of a loss or weight, or
/// infinity when they took different steps or saw different samples.
inline double distance(const Outcome& a, const Outcome& b) {
  constexpr double apart = std::numeric_limits<double>::infinity();
  if (a.steps != b.steps || a.train_samples != b.train_samples || a.validation_samples != b.validation_samples ||
      a.step_losses.size() != b.step_losses.size() || a.validation_losses.size() != b.validation_losses.size() ||
      a.weights.size() != b.weights.size())
    return apart;
  double worst = 0;
  auto compare = [&](double x, double y) {
    worst = std::max(worst, std::fabs(x - y) / std::max(1.0, std::fabs(y)));
  };
  for (size_t i = 0; i < a.step_losses.size(); ++i) compare(a.step_losses[i], b.step_losses[i]);
  for (size_t i = 0; i < a.validation_losses.size(); ++i) compare(a.validation_losses[i], b.validation_losses[i]);
  for (size_t i = 0; i < a.weights.size(); ++i) compare(a.weights[i], b.weights[i]);
  return worst;
}

// The same computation in the CLI's process and in this one: equal but for float rounding.
inline constexpr double same_run = 1e-6;
// Two values of a key must move the run by far more than rounding.
inline constexpr double different_run = 1e-3;

/// One value of a key: as written in the file (empty: the key left out), as set in code,
/// and the flag that sets it on the command line (empty: none).
struct KeyValue {
  KeyValue(std::string yaml, std::function<void(TrainingSpec&, Graph&)> set, std::string flag = "")
      : yaml(std::move(yaml)), set(std::move(set)), flag(std::move(flag)) {}
  std::string yaml;
  std::function<void(TrainingSpec&, Graph&)> set;
  std::string flag;
};

/// The file every key test starts from, and the same in code. A test may change both
/// before it checks a key.
struct KeyFixture {
  std::mt19937_64 rng;
  std::string data;
  Sections base;
  TrainingSpec base_spec;
  explicit KeyFixture(const char* test) : rng(seeded_rng(test)) {
    data = write_random_csv("data.csv", rng);
    base.train = {{"epochs", "2"}, {"batch", "4"}, {"shuffle", "false"}, {"seed", "3"},
                  {"optimizer", "{name: sgd, lr: 0.1}"}, {"data", "{path: " + data + "}"}};
    base.loss = {{"op", "cross_entropy"}, {"input", "fc"}, {"target", "label"}};
    base_spec.epochs = 2;
    base_spec.batch = 4;
    base_spec.shuffle = false;
    base_spec.seed = 3;
    base_spec.optimizer.lr = 0.1;
    base_spec.data.emplace();
    base_spec.data->path = data;
  }
  ~KeyFixture() { std::filesystem::remove(data); }

  std::string write_model(const Sections& sections, const std::string& name) const {
    const std::string path = scratch_file(name + ".yaml");
    std::ofstream(path) << model_yaml(sections);
    return path;
  }

  /// The base graph with `value` set in code.
  Outcome reference(const KeyValue& value) const {
    Graph graph = load_graph_from_string(model_yaml(base), "keys.yaml");
    TrainingSpec spec = base_spec;
    value.set(spec, graph);
    return train_in_process(graph, spec);
  }

  /// Checks `key` of `section` ("train" or "loss") with values `a` and `b`, as the header
  /// says.
  void check_key(const std::string& section, const std::string& key, const KeyValue& a, const KeyValue& b) const {
    auto file_with = [&](const KeyValue& v, const std::string& name) {
      Sections s = base;
      auto& keys = section == "train" ? s.train : s.loss;
      if (v.yaml.empty()) keys.erase(key);
      else keys[key] = v.yaml;
      return write_model(s, name);
    };
    const Outcome ref_a = reference(a), ref_b = reference(b);
    INFO(section << ": " << key << ": " << (a.yaml.empty() ? "(left out)" : a.yaml) << " against "
                 << (b.yaml.empty() ? "(left out)" : b.yaml));
    REQUIRE(distance(ref_a, ref_b) > different_run);  // else this test could not tell them apart
    const std::string file_a = file_with(a, "a"), file_b = file_with(b, "b");
    CHECK(distance(train_cli(file_a, ""), ref_a) <= same_run);
    CHECK(distance(train_cli(file_b, ""), ref_b) <= same_run);
    if (!a.flag.empty() && !b.flag.empty()) {
      CHECK(distance(train_cli(file_a, b.flag), ref_b) <= same_run);
      CHECK(distance(train_cli(file_b, a.flag), ref_a) <= same_run);
    }
    std::filesystem::remove(file_a);
    std::filesystem::remove(file_b);
  }
};

}  // namespace tandem::testing

// Every key of a model file's loss: section takes effect in `tandem train`
// (model_file_keys_support.h says how); no flag overrides one.
#include "model_file_keys_support.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

void check_loss_key(const char* test, const std::string& key, const KeyValue& a, const KeyValue& b) {
  KeyFixture fixture(test);
  fixture.check_key("loss", key, a, b);
}

int value_named(const Graph& graph, const std::string& name) {
  for (size_t v = 0; v < graph.values.size(); ++v)
    if (graph.values[v].name == name) return static_cast<int>(v);
  FAIL("no value '" << name << "'");
  return -1;
}

}  // namespace

TEST_CASE("loss: op", "[loss][keys]") {
  check_loss_key("loss: op", "op", {"cross_entropy", [](TrainingSpec&, Graph& g) { g.loss->op = "cross_entropy"; }},
                 {"nll_loss", [](TrainingSpec&, Graph& g) { g.loss->op = "nll_loss"; }});
}

TEST_CASE("loss: input", "[loss][keys]") {
  check_loss_key("loss: input", "input", {"fc", [](TrainingSpec&, Graph& g) { g.loss->input = value_named(g, "fc"); }},
                 {"act", [](TrainingSpec&, Graph& g) { g.loss->input = value_named(g, "act"); }});
}

TEST_CASE("loss: target", "[loss][keys]") {
  check_loss_key("loss: target", "target",
                 {"label", [](TrainingSpec&, Graph& g) { g.loss->target = value_named(g, "label"); }},
                 {"other_label", [](TrainingSpec&, Graph& g) { g.loss->target = value_named(g, "other_label"); }});
}

TEST_CASE("loss: reduction", "[loss][keys]") {
  check_loss_key("loss: reduction", "reduction", {"", [](TrainingSpec&, Graph& g) { g.loss->reduction = "mean"; }},
                 {"sum", [](TrainingSpec&, Graph& g) { g.loss->reduction = "sum"; }});
}

TEST_CASE("loss: ignore_index", "[loss][keys]") {
  // the data's first label is 1
  check_loss_key("loss: ignore_index", "ignore_index",
                 {"", [](TrainingSpec&, Graph& g) { g.loss->ignore_index = -100; }},
                 {"1", [](TrainingSpec&, Graph& g) { g.loss->ignore_index = 1; }});
}

TEST_CASE("loss: label_smoothing", "[loss][keys]") {
  check_loss_key("loss: label_smoothing", "label_smoothing",
                 {"", [](TrainingSpec&, Graph& g) { g.loss->label_smoothing = 0; }},
                 {"0.3", [](TrainingSpec&, Graph& g) { g.loss->label_smoothing = 0.3; }});
}

TEST_CASE("loss: parallel scores each replica's chunk on its device", "[loss][keys]") {
  // The same losses either way; what changes is where the logits go: gathered onto the
  // output device (cuda:0 holds more than cuda:1) or scored where they are (the same).
  auto rng = seeded_rng("loss: parallel");
  const std::string data = scratch_file("parallel.csv");
  {
    std::normal_distribution<double> normal;
    std::ofstream out(data);
    for (int i = 0; i < 12; ++i) out << normal(rng) << "," << normal(rng) << "," << normal(rng) << ","
                                     << normal(rng) << "," << i % 3 << "\n";
  }
  auto model = [&](const std::string& parallel) {
    const std::string path = scratch_file("parallel_" + parallel + ".yaml");
    std::ofstream(path) << R"(name: keys_parallel
inputs:
  x: {shape: [batch, 4]}
targets:
  label: {shape: [batch], dtype: int64}
layers:
  - name: net
    data_parallel: {devices: [cuda:0, cuda:1]}
    layers:
      - {name: fc, op: linear, in_features: 4, out_features: 8192}
loss: {op: cross_entropy, input: net.fc, target: label)"
                        << (parallel.empty() ? "" : ", parallel: " + parallel) << R"(}
train: {batch: 4, shuffle: false, data: {path: )" << data << "}}\n";
    return path;
  };
  auto peaks = [](const std::string& file) {
    int code = 0;
    const std::string out = run_cli("train " + file + " --sim-gpus 2 --json", &code, "env -u TANDEM_SIM_GPUS ");
    INFO(out);
    REQUIRE(code == 0);
    const nlohmann::json j = nlohmann::json::parse(json_summary(out));
    std::map<std::string, size_t> peak;
    for (const auto& d : j.at("devices")) peak[d.at("device")] = d.at("peak_bytes");
    return std::make_pair(peak, j.at("epochs")[0].at("step_losses").get<std::vector<double>>());
  };
  const std::string gathered = model(""), parallel = model("true"), named_false = model("false");
  const auto [gathered_peak, gathered_losses] = peaks(gathered);
  const auto [parallel_peak, parallel_losses] = peaks(parallel);
  // Peaks move by a few small buffers with the lanes' timing (when a copy's source is
  // freed), so the logits are made large (a batch's: 4 x 8192 floats, 128 KiB; each
  // replica's half, 64 KiB) and the checks are on what they add: gathered, cuda:0 holds
  // the whole batch's logits and their gradient besides its half; scored in place, the
  // two devices hold the same.
  constexpr double kHalfLogits = 2 * 8192 * 4;
  auto excess = [](const std::map<std::string, size_t>& peak) {
    return static_cast<double>(peak.at("cuda:0")) - static_cast<double>(peak.at("cuda:1"));
  };
  INFO("gathered: cuda:0 " << gathered_peak.at("cuda:0") << ", cuda:1 " << gathered_peak.at("cuda:1")
                           << "; parallel: cuda:0 " << parallel_peak.at("cuda:0") << ", cuda:1 "
                           << parallel_peak.at("cuda:1"));
  CHECK(excess(gathered_peak) >= 2 * kHalfLogits);
  CHECK(std::fabs(excess(parallel_peak)) < kHalfLogits / 2);
  const auto [named_false_peak, named_false_losses] = peaks(named_false);
  CHECK(excess(named_false_peak) >= 2 * kHalfLogits);
  CHECK(named_false_losses == gathered_losses);
  REQUIRE(parallel_losses.size() == gathered_losses.size());
  for (size_t i = 0; i < gathered_losses.size(); ++i) CHECK(parallel_losses[i] == Approx(gathered_losses[i]).epsilon(1e-5));
  for (const std::string& f : {data, gathered, parallel, named_false}) std::filesystem::remove(f);
}

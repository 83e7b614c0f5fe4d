// Every key of a model file's placement: takes effect in `tandem train` and `tandem run`,
// and --placement and --max-memory override it, both ways. The model and data are the key
// tests' (model_file_keys_support.h); on two simulated GPUs, which devices a run used shows
// where its layers went, and placed or not it trains the same.
#include "model_file_keys_support.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

// The devices a run held memory on, the cpu included.
std::vector<std::string> devices_used(const Outcome& run) {
  std::vector<std::string> used;
  for (const auto& [device, peak] : run.device_peaks)
    if (peak > 0) used.push_back(device);
  return used;
}

using Devices = std::vector<std::string>;

// A placed run of the fixture's model with `placement`, over 2 simulated GPUs with `flags`:
// the devices it used, and the same training as the unplaced run in process.
Devices placed_devices(const KeyFixture& fixture, const std::string& placement, const std::string& flags) {
  Sections s = fixture.base;
  s.placement = placement;
  const std::string file = fixture.write_model(s, "placed");
  const Outcome run = train_cli(file, "--sim-gpus 2 " + flags);
  std::filesystem::remove(file);
  INFO("placement: " << placement << ", flags " << flags);
  CHECK(distance(run, fixture.reference({"", [](TrainingSpec&, Graph&) {}})) <= 1e-5);
  return devices_used(run);
}

}  // namespace

TEST_CASE("placement: policy from the file, or --placement over it", "[placement][keys]") {
  KeyFixture fixture("placement: policy");
  const Devices cpu_only{"cpu"}, on_cuda0{"cpu", "cuda:0"};
  CHECK(placed_devices(fixture, "annotations", "") == cpu_only);
  CHECK(placed_devices(fixture, "balanced", "") == on_cuda0);
  CHECK(placed_devices(fixture, "{policy: balanced}", "") == on_cuda0);
  CHECK(placed_devices(fixture, "annotations", "--placement balanced") == on_cuda0);
  CHECK(placed_devices(fixture, "balanced", "--placement annotations") == cpu_only);
}

TEST_CASE("placement: max_memory from the file, or --max-memory over it", "[placement][keys]") {
  // In training with plain sgd at batch 4, fc needs 448 bytes on its GPU (weights,
  // gradients, its input and output and their gradients, each rounded to the pool's size
  // classes) and the next batch's input uploaded during the step, act 128 more: 700 bytes a
  // GPU puts act on cuda:1, 1 KiB keeps both on cuda:0 (`tandem plan --train --batch 4
  // --placement balanced --max-memory 700` shows the sums).
  KeyFixture fixture("placement: max_memory");
  const Devices split{"cpu", "cuda:0", "cuda:1"}, on_cuda0{"cpu", "cuda:0"};
  CHECK(placed_devices(fixture, "{policy: balanced, max_memory: 700}", "") == split);
  CHECK(placed_devices(fixture, "{policy: balanced, max_memory: 1KiB}", "") == on_cuda0);
  CHECK(placed_devices(fixture, "{policy: balanced, max_memory: 700}", "--max-memory 1KiB") == on_cuda0);
  CHECK(placed_devices(fixture, "{policy: balanced, max_memory: 1KiB}", "--max-memory 700") == split);
}

TEST_CASE("placement: in the file places tandem train and run with no device flag", "[placement][keys]") {
  // With no GPU every layer stays on the cpu, but through the placed executors, whose report
  // lists the devices: a file's placement: is not read only when a flag places the run.
  KeyFixture fixture("placement: places the run");
  Sections plain = fixture.base, placed = fixture.base;
  placed.placement = "balanced";
  const std::string plain_file = fixture.write_model(plain, "plain"), placed_file = fixture.write_model(placed, "placed");
  CHECK(train_cli(plain_file, "").device_peaks.empty());
  const Outcome run = train_cli(placed_file, "");
  CHECK(devices_used(run) == Devices{"cpu"});
  CHECK(distance(run, fixture.reference({"", [](TrainingSpec&, Graph&) {}})) <= same_run);
  int code = 0;
  const std::string env = "env -u TANDEM_SIM_GPUS ";
  CHECK_FALSE(nlohmann::json::parse(run_cli("run " + plain_file + " --json", &code, env)).contains("devices"));
  CHECK(code == 0);
  CHECK(nlohmann::json::parse(run_cli("run " + placed_file + " --json", &code, env)).contains("devices"));
  CHECK(code == 0);
  std::filesystem::remove(plain_file);
  std::filesystem::remove(placed_file);
}

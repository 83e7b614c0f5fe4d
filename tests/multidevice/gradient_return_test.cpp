// Gradients the host holds are announced to data parallelism over processes (GradientReady)
// as each completes, on a placed plan too, not once backward is over: so a bucket of the
// ranks' all-reduce starts while the devices still run the rest of backward
// (runtime/exec/gradient_return.h).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/host_lanes.h"
#include "placement/place.h"
#include "runtime/devices/device_registry.h"
#include "runtime/exec/training_executor.h"
#include "runtime/model.h"
#include "runtime/params/device_parameter_cache.h"

using namespace tandem;

namespace {

// A layer on the cpu after one on cuda:0 after one on the cpu: backward runs fc_c (cpu),
// then fc_b (cuda:0), then fc_a (cpu), whose input gradient comes down from the GPU.
std::string sandwich_yaml() {
  std::string path =
      (std::filesystem::temp_directory_path() / ("tandem_gradient_return_" + std::to_string(getpid()) + ".yaml")).string();
  std::ofstream(path) << R"(name: sandwich
inputs:
  x: {shape: [batch, 16]}
targets:
  y: {shape: [batch, 4]}
layers:
  - {name: fc_a, op: linear, in_features: 16, out_features: 16, device: cpu}
  - {name: fc_b, op: linear, in_features: 16, out_features: 16, device: "cuda:0"}
  - {name: fc_c, op: linear, in_features: 16, out_features: 4, device: cpu}
loss: {op: mse_loss, input: fc_c, target: y}
)";
  return path;
}

/// A gate on a lane: reached by open(), or by itself after `limit` so that a failing test
/// cannot hang.
class Gate {
 public:
  explicit Gate(std::chrono::seconds limit)
      : event_(std::make_shared<HostLaneEvent>()), watchdog_([this, limit] {
          std::unique_lock lock(mutex_);
          if (!cv_.wait_for(lock, limit, [this] { return opened_; })) timed_out_ = true;
          lock.unlock();
          open();
        }) {}
  ~Gate() {
    open();
    watchdog_.join();
  }
  DeviceEvent event() const { return DeviceEvent(event_); }
  void open() {
    {
      std::lock_guard lock(mutex_);
      opened_ = true;
    }
    cv_.notify_all();
    if (!reached_.exchange(true)) HostLaneEngine::shared().reach(*event_);
  }
  bool is_open() {
    std::lock_guard lock(mutex_);
    return opened_;
  }
  bool timed_out() {
    std::lock_guard lock(mutex_);
    return timed_out_;
  }

 private:
  std::shared_ptr<HostLaneEvent> event_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool opened_ = false, timed_out_ = false;
  std::atomic<bool> reached_{false};
  std::thread watchdog_;
};

}  // namespace

TEST_CASE("a host gradient is announced while the GPU's backward is still held up", "[multidevice][train][ddp]") {
  const std::string yaml = sandwich_yaml();
  Model model = Model::load(yaml);
  std::filesystem::remove(yaml);
  DeviceRegistry registry(DeviceOptions{.sim_gpus = 1});
  const Bindings bindings{{"batch", 8}};
  PlacementPolicy policy;
  policy.training = true;
  policy.batch = 8;
  policy.bindings = bindings;
  const Plan plan = place(model.graph(), registry.inventory(), policy);
  TensorMap params = model.parameters();
  TensorMap grads = model.gradients();
  DeviceParameterCache cache(params, grads, model.gradient_rows(), registry);
  const LossSpec& loss = *model.graph().loss;
  // masters on the host: fc_b's gradient comes back in a bucket, as under mpirun
  TrainingExecutor training(model.graph(), plan, bindings, cache, registry, false, {loss.input},
                            /*hold_parameters=*/false);
  const TensorMap batch = [&] {
    TensorMap b = model.random_inputs(bindings, 7);
    b.merge(model.random_targets(bindings, 8));
    return b;
  }();
  // The first step runs in lockstep (it measures the memory later ones may run ahead in):
  // one without the gate first.
  training.forward({batch.at("x")}, 1, 1);
  training.loss(loss, batch.at("y"), true);
  training.backward(training.loss_seeds());
  training.forward({batch.at("x")}, 2, 1);
  training.loss(loss, batch.at("y"), true);

  Gate gate(std::chrono::seconds(20));
  registry.backend(Device::cuda(0)).lane(LaneKind::compute).wait(gate.event());  // fc_b's backward waits
  std::vector<std::string> announced;
  std::vector<bool> while_held;
  GradientReady ready = [&](const std::string& name) {
    announced.push_back(name);
    while_held.push_back(!gate.is_open());
    if (name == "fc_c.bias") gate.open();  // the rest of backward may go on now
  };
  training.backward(training.loss_seeds(), &ready);

  INFO("announced in this order: " << Catch::Detail::stringify(announced));
  REQUIRE_FALSE(gate.timed_out());
  REQUIRE(announced.size() == 6);
  // fc_c's gradients were complete, and announced, before the GPU ran fc_b's backward
  CHECK(announced[0] == "fc_c.weight");
  CHECK(announced[1] == "fc_c.bias");
  CHECK(while_held[0]);
  CHECK(while_held[1]);
  // and every other gradient after it had
  for (size_t i = 2; i < announced.size(); ++i) CHECK_FALSE(while_held[i]);
  std::vector<std::string> sorted = announced;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == std::vector<std::string>{"fc_a.bias", "fc_a.weight", "fc_b.bias", "fc_b.weight", "fc_c.bias",
                                           "fc_c.weight"});
}

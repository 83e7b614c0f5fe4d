// Whole models on real GPUs through the runtime: the registry opens the CUDA backend's
// module, placement plans the layers, the placed executors run them on CUDA streams. Each
// run is compared with the same model on the cpu (Model::to), forward, gradients and
// training steps. A plan for more GPUs than the machine has runs on logical GPUs that
// share the real ones (DeviceOptions::logical_gpus). Without a GPU, gpu_main skips these.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include "backends/backend.h"
#include "runtime/devices/device_registry.h"
#include "runtime/model.h"
#include "runtime/trainer.h"

using namespace tandem;

namespace {

/// The repository's configs: TANDEM_SOURCE_DIR in the environment (a GPU machine that got
/// a bundle of this build and a copy of the repository, scripts/gpu_check.sh), else where
/// this build's sources were.
std::string config(const std::string& name) {
  const char* root = std::getenv("TANDEM_SOURCE_DIR");
  return std::string(root && *root ? root : TANDEM_SOURCE_DIR) + "/configs/" + name;
}

/// Real GPUs as cuda:0..n-1 (logical ones sharing the machine's when it has fewer).
std::shared_ptr<DeviceRegistry> real_gpus(int n) {
  return std::make_shared<DeviceRegistry>(DeviceOptions{.sim_gpus = 0, .sim_gpu_memory = std::nullopt, .logical_gpus = n});
}

/// How many cuda:N a model file names: one more than the highest index.
int gpus_named(const Graph& g) {
  int n = 1;
  auto count = [&](Device d) {
    if (d.kind == DeviceKind::cuda) n = std::max(n, d.index + 1);
  };
  for (const Node& node : g.nodes)
    if (node.device) count(*node.device);
  for (const Block& b : g.blocks)
    if (b.data_parallel) {
      for (Device d : b.data_parallel->devices) count(d);
      count(b.data_parallel->output_device);
    }
  return n;
}

/// max |a - b| / max(max |b|, 1) over the float tensors both maps hold.
double max_error(const TensorMap& a, const TensorMap& b) {
  double worst = 0;
  for (const auto& [name, t] : b) {
    INFO("tensor " << name);
    REQUIRE(a.count(name) == 1);
    const Tensor& u = a.at(name);
    REQUIRE(u.shape() == t.shape());
    REQUIRE(u.device() == Device::cpu());
    if (t.dtype() != DType::float32) continue;
    double scale = 1;
    for (float v : t.span<float>()) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    auto x = u.span<float>(), y = t.span<float>();
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]) / scale);
  }
  return worst;
}

/// A model on the cpu and the same one (weights from `seed`) on real GPUs: placed as its
/// file says, or, when the file names no GPU, every layer on cuda:0.
struct Pair {
  Model cpu, gpu;
  Pair(const std::string& path, uint64_t seed) : cpu(Model::load(path)), gpu(Model::load(path)) {
    cpu.to(Device::cpu());
    cpu.init_parameters(seed);
    gpu.init_parameters(seed);
    PlacementPolicy policy;
    if (gpu.graph().placement) apply_placement_spec(*gpu.graph().placement, policy);
    if (!names_a_gpu(gpu.graph())) policy.place_overrides = {{"*", Device::cuda(0)}};
    gpu.use_devices(real_gpus(gpus_named(gpu.graph())), policy);
  }
  static bool names_a_gpu(const Graph& g) {
    for (const Node& n : g.nodes)
      if (n.device && n.device->kind == DeviceKind::cuda) return true;
    return std::any_of(g.blocks.begin(), g.blocks.end(), [](const Block& b) { return b.data_parallel.has_value(); });
  }
};

Bindings bindings_for(const Graph& g, int64_t batch) {
  Bindings b{{"batch", batch}};
  for (const std::string& s : g.symbols())
    if (!b.count(s)) b[s] = 3;
  return b;
}

}  // namespace

TEST_CASE("the seeds' mixed model runs on a real GPU as on the cpu, forward and backward", "[runtime][gpu_runtime]") {
  Pair p(config("seed_mixed.yaml"), 11);
  const TensorMap inputs = p.cpu.random_inputs(bindings_for(p.cpu.graph(), 6), 12);
  CHECK(max_error(p.gpu.forward(inputs), p.cpu.forward(inputs)) < 1e-5);
  // the GRU ran on the GPU, timed there, and its input went up and its output came down
  bool gpu_seen = false;
  for (const DeviceReport& r : p.gpu.device_report())
    if (r.device == Device::cuda(0)) {
      gpu_seen = true;
      CHECK(r.busy_seconds > 0);
      CHECK(r.copies_in >= 1);
      CHECK(r.copies_out >= 1);
    }
  CHECK(gpu_seen);

  TensorMap grad_out;
  for (const auto& [name, t] : p.cpu.forward(inputs)) {
    Tensor g = Tensor::empty(t.shape(), DType::float32);
    for (size_t i = 0; i < static_cast<size_t>(g.numel()); ++i) g.data<float>()[i] = std::sin(0.37f * static_cast<float>(i));
    grad_out.emplace(name, g);
  }
  p.cpu.zero_gradients();
  p.gpu.zero_gradients();
  p.cpu.backward(inputs, grad_out, /*training=*/false);
  p.gpu.backward(inputs, grad_out, /*training=*/false);
  CHECK(max_error(p.gpu.gradients(), p.cpu.gradients()) < 1e-4);
}

TEST_CASE("every data-parallel config runs on real GPUs as on the cpu, and a training step too", "[runtime][gpu_runtime]") {
  for (const char* name : {"seed_nested_dp.yaml", "dp_tutorial.yaml", "dp_choose_devices.yaml", "dp_classifier.yaml"}) {
    DYNAMIC_SECTION(name) {
      Pair p(config(name), 21);
      const Bindings b = bindings_for(p.cpu.graph(), 10);
      const TensorMap inputs = p.cpu.random_inputs(b, 22);
      CHECK(max_error(p.gpu.forward(inputs), p.cpu.forward(inputs)) < 1e-5);
      if (!p.cpu.graph().loss) continue;
      TensorMap batch = inputs;
      for (auto& [k, t] : p.cpu.random_targets(b, 23)) batch.emplace(k, t);
      p.cpu.zero_gradients();
      p.gpu.zero_gradients();
      const double cpu_loss = p.cpu.loss_and_backward(batch, 5).loss;
      const double gpu_loss = p.gpu.loss_and_backward(batch, 5).loss;
      CHECK(gpu_loss == Approx(cpu_loss).epsilon(1e-5));
      CHECK(max_error(p.gpu.gradients(), p.cpu.gradients()) < 1e-4);
    }
  }
}

TEST_CASE("one training step of every zoo model on real GPUs matches the cpu's", "[runtime][gpu_runtime][zoo]") {
  for (const char* name : {"digits_cnn.yaml", "char_gru.yaml", "bert_mini.yaml", "dlrm.yaml"}) {
    DYNAMIC_SECTION(name) {
      Pair p(config(name), 31);  // digits_cnn names no GPU: all of it on cuda:0
      TrainingSpec spec = *p.cpu.graph().training;
      const Bindings b = bindings_for(p.cpu.graph(), 8);
      TensorMap batch = p.cpu.random_inputs(b, 32);
      for (auto& [k, t] : p.cpu.random_targets(b, 33)) batch.emplace(k, t);
      Trainer on_cpu(p.cpu, spec), on_gpu(p.gpu, spec);
      on_cpu.set_total_steps(10);
      on_gpu.set_total_steps(10);
      const double cpu_loss = on_cpu.step(batch);
      const double gpu_loss = on_gpu.step(batch);
      CHECK(gpu_loss == Approx(cpu_loss).epsilon(1e-4));
      CHECK(max_error(p.gpu.parameters(), p.cpu.parameters()) < 1e-4);
    }
  }
}

TEST_CASE("a checkpoint saved from a GPU run resumes there as one continuous run", "[runtime][gpu_runtime][checkpoint]") {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("tandem_gpu_ckpt_" + std::to_string(getpid()) + ".safetensors")).string();
  Pair continuous(config("dp_classifier.yaml"), 41);
  TrainingSpec spec = *continuous.gpu.graph().training;
  spec.optimizer.name = "adam";  // state to carry over
  const Bindings b = bindings_for(continuous.gpu.graph(), 12);
  std::vector<TensorMap> batches;
  for (uint64_t k = 0; k < 4; ++k) {
    TensorMap batch = continuous.gpu.random_inputs(b, 50 + k);
    for (auto& [name, t] : continuous.gpu.random_targets(b, 60 + k)) batch.emplace(name, t);
    batches.push_back(batch);
  }
  Trainer whole(continuous.gpu, spec);
  whole.set_total_steps(4);
  for (const TensorMap& batch : batches) whole.step(batch);

  Pair first(config("dp_classifier.yaml"), 41);
  Trainer before(first.gpu, spec);
  before.set_total_steps(4);
  before.step(batches[0]);
  before.step(batches[1]);
  before.save_checkpoint(path);
  Pair second(config("dp_classifier.yaml"), 99);  // other weights: the checkpoint replaces them
  Trainer after(second.gpu, spec);
  after.load_checkpoint(path);
  after.step(batches[2]);
  after.step(batches[3]);
  CHECK(max_error(second.gpu.parameters(), continuous.gpu.parameters()) < 1e-6);
  std::filesystem::remove(path);
}

TEST_CASE("all-reduce and broadcast among logical GPUs that share one stay on it and sum exactly", "[runtime][gpu_runtime][collectives]") {
  auto registry = real_gpus(2);
  Backend& a = registry->backend(Device::cuda(0));
  Backend& b = registry->backend(Device::cuda(1));
  const int64_t n = 1000;
  std::vector<float> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) x[i] = 0.5f * static_cast<float>(i), y[i] = -0.25f * static_cast<float>(i) + 1;
  auto upload = [&](Backend& backend, const std::vector<float>& v) {
    Tensor host = Tensor::from_vector<float>({n}, v);
    Tensor dev = Tensor::empty({n}, DType::float32, backend.allocator());
    Lane& lane = backend.lane(LaneKind::copy_in);
    backend.copy(lane, buffer_of(dev), buffer_of(host), host.nbytes());
    backend.lane(LaneKind::compute).wait(lane.record());
    return dev;
  };
  auto download = [&](Backend& backend, const Tensor& dev) {
    Tensor host = Tensor::empty({n}, DType::float32);
    Lane& lane = backend.lane(LaneKind::copy_out);
    lane.wait(backend.lane(LaneKind::compute).record());
    backend.copy(lane, buffer_of(host), buffer_of(dev), dev.nbytes());
    backend.synchronize();
    return host.to_vector<float>();
  };
  Tensor ta = upload(a, x), tb = upload(b, y);
  std::vector<CollectiveMember> members{{&a, ta}, {&b, tb}};
  REQUIRE(a.all_reduce_sum(members));
  std::vector<float> sum_a = download(a, ta), sum_b = download(b, tb);
  for (int64_t i = 0; i < n; ++i) {
    CHECK(sum_a[i] == x[i] + y[i]);
    CHECK(sum_b[i] == x[i] + y[i]);
  }
  Tensor tb2 = upload(b, y);
  std::vector<CollectiveMember> again{{&a, ta}, {&b, tb2}};
  REQUIRE(a.broadcast(again, 1));
  CHECK(download(a, ta) == y);
}

// PyTorch's data parallelism tutorial, in Tandem: the model is declared in YAML with a
// data_parallel block (configs/dp_tutorial.yaml); a forward hook prints what each replica
// sees, as the tutorial's print inside Model.forward does, and the loop prints what the
// caller sees.
//
//   build/examples/data_parallel_tutorial [MODEL.yaml] [--sim-gpus N]   (from any directory)
//
// With no GPU and no TANDEM_SIM_GPUS, it simulates two. 100 random samples of 5 features
// in batches of 30: each batch splits 15 + 15 over two devices, the last one of 10 splits
// 5 + 5.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/random.h"
#include "find_config.h"
#include "runtime/devices/device_registry.h"
#include "runtime/model.h"

int main(int argc, char** argv) {
  CLI::App app("PyTorch's data parallelism tutorial: a data_parallel block, and what each replica sees",
               "data_parallel_tutorial");
  std::string path = "configs/dp_tutorial.yaml";
  tandem::DeviceOptions devices;
  app.add_option("model", path, "the model's YAML file (also found in the source tree's configs/)")
      ->capture_default_str();
  app.add_option("--sim-gpus", devices.sim_gpus, "simulate N GPUs (default: the real ones, else two simulated)")
      ->check(CLI::Range(0, 64));
  CLI11_PARSE(app, argc, argv);
  path = find_config(path);
  try {
    auto registry = std::make_shared<tandem::DeviceRegistry>(devices);
    if (registry->inventory().devices.size() == 1 && devices.sim_gpus < 0)  // no GPU: simulate two
      registry = std::make_shared<tandem::DeviceRegistry>(tandem::DeviceOptions{.sim_gpus = 2, .sim_gpu_memory = std::nullopt});
    const int gpus = static_cast<int>(registry->inventory().devices.size()) - 1;

    tandem::Model model = tandem::Model::load(path);
    // What the model's data_parallel block really uses: its devices, or every GPU with
    // devices: all (as nn.DataParallel(model)); the tutorial says so, and of how many.
    int used = gpus;
    for (const tandem::Block& b : model.graph().blocks)
      if (b.data_parallel && !b.data_parallel->all_devices) {
        used = static_cast<int>(b.data_parallel->devices.size());
        break;
      }
    std::string note;  // " (simulated)", " (simulated, 2 of the 8 as the model file lists them)"
    if (registry->sim_gpu_count() > 0) note = "simulated";
    if (used < gpus)
      note += (note.empty() ? "" : ", ") + std::to_string(used) + " of the " + std::to_string(gpus) +
              " as the model file lists them";
    std::printf("Let's use %d GPUs!%s\n", used, note.empty() ? "" : (" (" + note + ")").c_str());
    model.init_parameters(/*seed=*/0);
    model.use_devices(registry, tandem::PlacementPolicy{});
    model.set_forward_hook([](const tandem::LayerCall& call) {
      if (!call.node->replica || call.node->replica->kind != tandem::ReplicaRole::Kind::replica) return;
      std::printf("\tIn Model: input size %s output size %s\n", tandem::shape_str(call.input_shapes.at(0)).c_str(),
                  tandem::shape_str(call.output_shape).c_str());
    });

    // 100 samples of 5 features, as the tutorial's RandomDataset(5, 100)
    const int64_t samples = 100, features = 5, batch = 30;
    tandem::Tensor data = tandem::Tensor::empty({samples, features}, tandem::DType::float32);
    tandem::Rng rng(/*seed=*/1, "tutorial data");
    for (float& v : data.span<float>()) v = static_cast<float>(rng.normal());
    const std::string& input = model.graph().inputs.at(0).name;
    for (int64_t start = 0; start < samples; start += batch) {
      const int64_t rows = std::min(batch, samples - start);
      tandem::Tensor x = tandem::Tensor::empty({rows, features}, tandem::DType::float32);
      std::copy_n(data.data<float>() + start * features, rows * features, x.data<float>());
      tandem::TensorMap out = model.forward({{input, x}});
      std::printf("Outside: input size %s output size %s\n", tandem::shape_str(x.shape()).c_str(),
                  tandem::shape_str(out.begin()->second.shape()).c_str());
    }
    return 0;
  } catch (const tandem::UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}

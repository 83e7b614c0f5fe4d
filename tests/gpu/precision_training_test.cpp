// Training in half precision on a real GPU reaches fp32's accuracy, as on the cpu
// (tests/unit/precision_training_test.cpp): the digits MLP and CNN (configs/), all of each
// on cuda:0, trained in fp32, bf16 and fp16 (dynamic loss scaling) on the same split and
// seed, end within half a point of fp32's validation accuracy. The MLP is averaged over
// three seeds, the CNN over two (one digit of 359 is 0.28 points: a single run leaves one
// digit of slack).
//
// The digits are scikit-learn's CSV, which the configs name where Debian installs it; on a
// GPU machine gpu_check.sh finds scikit-learn's copy and passes it as TANDEM_DIGITS_CSV.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "runtime/data/dataset.h"
#include "runtime/devices/device_registry.h"
#include "runtime/model.h"
#include "runtime/trainer.h"

using namespace tandem;

namespace {

std::string config(const std::string& name) {
  const char* root = std::getenv("TANDEM_SOURCE_DIR");
  return std::string(root && *root ? root : TANDEM_SOURCE_DIR) + "/configs/" + name;
}

/// The validation accuracy after training `name` on cuda:0 in `precision`, from `seed`.
double accuracy_on_gpu(const std::string& name, Precision precision, uint64_t seed) {
  Model model = Model::load(config(name));
  model.set_precision(precision);
  TrainingSpec spec = *model.graph().training;
  spec.seed = seed;
  model.init_parameters(seed);
  PlacementPolicy all_on_gpu;
  all_on_gpu.place_overrides = {{"*", Device::cuda(0)}};
  model.use_devices(std::make_shared<DeviceRegistry>(), all_on_gpu);
  DataSpec data = *spec.data;
  if (const char* csv = std::getenv("TANDEM_DIGITS_CSV"); csv && *csv) data.path = csv;
  INFO("the digits: " << data.path << " (TANDEM_DIGITS_CSV names another copy)");
  REQUIRE(std::filesystem::exists(data.path));
  Dataset all = load_dataset(data, data_columns(model.graph()));
  auto [train, validation] = split_dataset(all, spec.validation_split, spec.seed);
  Trainer trainer(model, spec);
  double accuracy = 0;
  trainer.fit(train, &validation, "", [&](const EpochReport& r) { accuracy = r.validation->accuracy.value(); });
  return accuracy;
}

}  // namespace

TEST_CASE("the digits MLP and CNN trained in bf16 and fp16 on a GPU reach fp32's accuracy within half a point",
          "[runtime][gpu_runtime][precision]") {
  struct Run {
    const char* config;
    std::vector<uint64_t> seeds;
    double floor;  // fp32's accuracy is at least this
  };
  for (const Run& run : {Run{"digits_mlp.yaml", {0, 1, 2}, 0.95}, Run{"digits_cnn.yaml", {0, 1}, 0.97}}) {
    double fp32 = 0, bf16 = 0, fp16 = 0;
    for (uint64_t seed : run.seeds) {
      const double a = accuracy_on_gpu(run.config, Precision::fp32, seed),
                   b = accuracy_on_gpu(run.config, Precision::bf16, seed),
                   c = accuracy_on_gpu(run.config, Precision::fp16, seed);
      std::printf("%s seed %llu on a GPU: validation accuracy fp32 %.2f%%, bf16 %.2f%%, fp16 %.2f%%\n", run.config,
                  static_cast<unsigned long long>(seed), 100 * a, 100 * b, 100 * c);
      fp32 += a / run.seeds.size();
      bf16 += b / run.seeds.size();
      fp16 += c / run.seeds.size();
    }
    INFO(run.config << ": fp32 " << fp32 << ", bf16 " << bf16 << ", fp16 " << fp16);
    CHECK(fp32 > run.floor);
    CHECK(bf16 >= fp32 - 0.005);
    CHECK(fp16 >= fp32 - 0.005);
  }
}

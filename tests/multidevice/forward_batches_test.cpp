// Model::forward_batches: prediction over many samples a batch at a time, the next batch
// submitted while the devices still work on this one. Its outputs must be the bits of
// forward() run batch by batch (each batch's executor computes exactly what it would
// alone), on split and data-parallel plans, with flat bags cut by bag and a short last
// batch; its report must count every batch's copies once.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "multidevice_support.h"
#include "runtime/micro_batches.h"
#include "runtime/model.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

/// A copy: Model::device_report() returns its vector by value.
DeviceReport report_of(const std::vector<DeviceReport>& reports, Device device) {
  for (const DeviceReport& r : reports)
    if (r.device == device) return r;
  FAIL("no report for " << device.str());
  return {};
}

/// forward_batches(inputs, size) against forward() of each batch, on a model placed by
/// `place`: the same bits, and the copies to `gpu` counted once each.
void check_against_serial(const std::string& yaml, int gpus, const std::string& placement, const TensorMap& inputs,
                          int64_t size, Device gpu) {
  Model batched = Model::load(yaml), serial = Model::load(yaml);
  serial.set_weights(batched.parameters());
  batched.use_devices(sim_gpus(gpus), policy(placement));
  serial.use_devices(sim_gpus(gpus), policy(placement));
  const TensorMap outputs = batched.forward_batches(inputs, size);
  const std::vector<TensorMap> batches = split_batches(inputs, size, serial.graph());
  std::vector<TensorMap> expected;
  for (const TensorMap& batch : batches) expected.push_back(serial.forward(batch));
  for (const GraphOutput& out : serial.graph().outputs) {
    // the batch by batch outputs, joined along dimension 0 (these models' outputs' batch)
    size_t at = 0;
    const Tensor& got = outputs.at(out.name);
    int64_t rows = 0;
    for (const TensorMap& e : expected) rows += e.at(out.name).size(0);
    REQUIRE(got.size(0) == rows);
    bool equal = true;
    for (const TensorMap& e : expected) {
      const Tensor& part = e.at(out.name);
      equal = equal && std::memcmp(static_cast<const char*>(got.raw_data()) + at, part.raw_data(), part.nbytes()) == 0;
      at += part.nbytes();
    }
    CHECK(equal);
  }
  const DeviceReport b = report_of(batched.device_report(), gpu);
  const DeviceReport s = report_of(serial.device_totals(), gpu);
  CHECK(b.bytes_in == s.bytes_in);
  CHECK(b.copies_in == s.copies_in);
  CHECK(b.bytes_in > 0);
}

}  // namespace

TEST_CASE("forward_batches gives forward()'s bits batch by batch on a split plan, flat bags cut by bag",
          "[multidevice][batches]") {
  // the bench recommender: its tables on the cpu, the MLP on a simulated GPU; 103 samples in
  // batches of 16: six full and a short one of 7
  const std::string yaml = std::string(TANDEM_SOURCE_DIR) + "/bench/configs/gpu_recommender_train.yaml";
  Model model = Model::load(yaml);
  const TensorMap inputs = model.random_inputs({{"batch", 103}, {"tags", 700}}, 31);
  check_against_serial(yaml, 1, "embeddings-on-cpu", inputs, 16, Device::cuda(0));
  check_against_serial(yaml, 1, "embeddings-on-cpu", inputs, 103, Device::cuda(0));  // one batch
}

TEST_CASE("forward_batches gives forward()'s bits batch by batch through a data_parallel block", "[multidevice][batches]") {
  const std::string yaml = std::string(TANDEM_SOURCE_DIR) + "/configs/dp_tutorial.yaml";
  Model model = Model::load(yaml);
  const TensorMap inputs = model.random_inputs({{"batch", 100}}, 32);
  check_against_serial(yaml, 2, "annotations", inputs, 30, Device::cuda(1));  // 30, 30, 30, 10, as the tutorial
}

TEST_CASE("forward_batches on the cpu alone equals forward() batch by batch", "[multidevice][batches]") {
  Model model = Model::load(std::string(TANDEM_SOURCE_DIR) + "/configs/digits_mlp.yaml");
  const TensorMap inputs = model.random_inputs({{"batch", 50}}, 33);
  const TensorMap outputs = model.forward_batches(inputs, 20);
  const std::vector<TensorMap> batches = split_batches(inputs, 20, model.graph());
  REQUIRE(batches.size() == 3);
  const std::string name = model.graph().outputs.front().name;
  std::vector<Tensor> parts;
  for (const TensorMap& batch : batches) parts.push_back(model.forward(batch).at(name));
  Tensor joined = Tensor::empty(outputs.at(name).shape(), DType::float32);
  size_t at = 0;
  for (const Tensor& p : parts) {
    std::memcpy(static_cast<char*>(joined.raw_data()) + at, p.raw_data(), p.nbytes());
    at += p.nbytes();
  }
  CHECK(same_bits(outputs.at(name), joined));
}

TEST_CASE("forward_batches refuses a batch size under 1", "[multidevice][batches]") {
  Model model = Model::load(std::string(TANDEM_SOURCE_DIR) + "/configs/digits_mlp.yaml");
  const TensorMap inputs = model.random_inputs({{"batch", 5}}, 34);
  CHECK_THROWS_AS(model.forward_batches(inputs, 0), UserError);
  CHECK_THROWS_WITH(model.forward_batches(inputs, 0), Catch::Contains("batch size must be at least 1, got 0"));
}

// The C++ API: loading, initialising, binding inputs, running, weights in and out.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "graph/load_graph.h"
#include "runtime/io/safetensors.h"
#include "runtime/model.h"

using namespace tandem;

namespace {

std::string config(const std::string& name) { return std::string(TANDEM_SOURCE_DIR) + "/configs/" + name; }

Tensor random_tensor(Shape shape, std::mt19937& rng) {
  Tensor t = Tensor::empty(std::move(shape), DType::float32);
  std::normal_distribution<float> normal;
  for (float& x : t.span<float>()) x = normal(rng);
  return t;
}

}  // namespace

TEST_CASE("a linear model computes x W^T + b", "[model]") {
  Model model = Model::load(config("seed_mlp.yaml"));
  std::mt19937 rng(std::random_device{}());
  TensorMap weights;
  for (const auto& [name, p] : model.parameters()) weights[name] = random_tensor(p.shape(), rng);
  model.set_weights(weights);
  Tensor x = random_tensor({5, 10}, rng);
  Tensor y = model.forward({{"x", x}}).at("block3");
  REQUIRE(y.shape() == Shape{5, 20});
  // the same three layers by hand, in double precision
  std::vector<double> h(x.span<float>().begin(), x.span<float>().end());
  int64_t in = 10;
  for (std::string layer : {"block1", "block2", "block3"}) {
    const Tensor& w = weights[layer + ".weight"];
    const Tensor& b = weights[layer + ".bias"];
    int64_t out = w.size(0);
    std::vector<double> next(5 * out);
    for (int64_t r = 0; r < 5; ++r)
      for (int64_t o = 0; o < out; ++o) {
        double acc = b.data<float>()[o];
        for (int64_t k = 0; k < in; ++k) acc += h[r * in + k] * w.data<float>()[o * in + k];
        next[r * out + o] = acc;
      }
    h = next;
    in = out;
  }
  // float32 against double: the error relative to the output's scale, as the oracle measures it
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    diff = std::max(diff, std::abs(y.data<float>()[i] - h[i]));
    scale = std::max(scale, std::abs(h[i]));
  }
  CHECK(diff / scale <= 1e-5);
}

TEST_CASE("a model keeps working after it is moved", "[model]") {
  Model first = Model::load(config("mlp_4x1024.yaml"));
  TensorMap in = first.random_inputs({{"batch", 4}}, 1);
  std::vector<float> before = first.forward(in).at("head").to_vector<float>();  // compiles
  Model moved = std::move(first);
  CHECK(moved.forward(in).at("head").to_vector<float>() == before);
  Model assigned = Model::load(config("seed_mlp.yaml"));
  assigned = std::move(moved);
  CHECK(assigned.forward(in).at("head").to_vector<float>() == before);
}

TEST_CASE("initialisation follows PyTorch's distributions and depends on the seed", "[model]") {
  Model model = Model::load(config("recommender.yaml"));
  model.init_parameters(7);
  const Tensor& w = model.parameters().at("bottom.fc1.weight");  // in_features 13: U(-1/sqrt(13), 1/sqrt(13))
  double bound = 1 / std::sqrt(13.0), lo = 1, hi = -1;
  for (float v : w.span<float>()) lo = std::min<double>(lo, v), hi = std::max<double>(hi, v);
  CHECK(lo >= -bound);
  CHECK(hi <= bound);
  CHECK(hi - lo > 1.5 * bound);
  const Tensor& table = model.parameters().at("items.weight");  // N(0, 1)
  double sum = 0, sq = 0;
  for (float v : table.span<float>()) sum += v, sq += double(v) * v;
  double n = static_cast<double>(table.numel()), mean = sum / n;
  CHECK(std::abs(mean) < 0.01);
  CHECK(std::abs(std::sqrt(sq / n - mean * mean) - 1.0) < 0.01);
  CHECK(model.parameters().at("top.norm.weight").to_vector<float>() == std::vector<float>(64, 1.0f));
  std::vector<float> first = w.to_vector<float>();
  model.init_parameters(7);
  CHECK(w.to_vector<float>() == first);
  model.init_parameters(8);
  CHECK(w.to_vector<float>() != first);
}

TEST_CASE("a layer's init: draws the parameters it names from torch.nn.init's distributions", "[model][init]") {
  // DLRM's tables: U(-sqrt(1/rows), sqrt(1/rows)) in place of nn.Embedding's N(0, 1)
  Model model(load_graph_from_string(
      "name: m\ninputs:\n  ids: {shape: [batch], dtype: int64}\nlayers:\n"
      "  - {name: table, op: embedding, num_embeddings: 20000, embedding_dim: 8, padding_idx: 0,\n"
      "     init: {weight: {uniform: [-0.001, 0.002]}}}\n"
      "  - {name: fc, op: linear, in_features: 8, out_features: 300, init: {weight: {normal: [0.5, 0.1]}, bias: ones}}\n",
      "init.yaml"));
  model.init_parameters(std::random_device{}() % 1000);
  const Tensor& table = model.parameters().at("table.weight");
  double lo = 1, hi = -1, sum = 0;
  for (float v : table.span<float>()) lo = std::min<double>(lo, v), hi = std::max<double>(hi, v), sum += v;
  CHECK(lo >= -0.001);
  CHECK(hi <= 0.002);
  CHECK(hi - lo > 0.0029);
  CHECK(sum / static_cast<double>(table.numel()) == Approx(0.0005).margin(2e-5));
  // as torch's in-place init after construction: the padding row is drawn too
  std::vector<float> padding(table.data<float>(), table.data<float>() + 8);
  CHECK(padding != std::vector<float>(8, 0.0f));
  const Tensor& w = model.parameters().at("fc.weight");
  double mean = 0, sq = 0;
  for (float v : w.span<float>()) mean += v, sq += double(v) * v;
  const double n = static_cast<double>(w.numel());
  mean /= n;
  CHECK(mean == Approx(0.5).margin(0.01));
  CHECK(std::sqrt(sq / n - mean * mean) == Approx(0.1).epsilon(0.05));
  CHECK(model.parameters().at("fc.bias").to_vector<float>() == std::vector<float>(300, 1.0f));
}

TEST_CASE("weights round-trip through safetensors and bad weights are named", "[model][weights]") {
  Model model = Model::load(config("seed_mlp.yaml"));
  model.init_parameters(3);
  auto path = std::filesystem::temp_directory_path() / ("tandem-weights-" + std::to_string(getpid()) + ".safetensors");
  model.save_weights(path.string());
  Model other = Model::load(config("seed_mlp.yaml"));
  other.init_parameters(4);
  other.load_weights(path.string());
  for (const auto& [name, t] : model.parameters()) CHECK(other.parameters().at(name).to_vector<float>() == t.to_vector<float>());

  TensorMap w = read_safetensors(path.string());
  TensorMap missing = w;
  missing.erase("block2.bias");
  REQUIRE_THROWS_WITH(other.set_weights(missing), Catch::Contains("1 parameter(s) missing") && Catch::Contains("'block2.bias'"));
  TensorMap extra = w;
  extra["block4.weight"] = Tensor::zeros({2, 2}, DType::float32);
  REQUIRE_THROWS_WITH(other.set_weights(extra), Catch::Contains("'block4.weight'"));
  TensorMap wrong = w;
  wrong["block1.weight"] = Tensor::zeros({20, 11}, DType::float32);
  REQUIRE_THROWS_WITH(other.set_weights(wrong), Catch::Contains("1 of the wrong shape: 'block1.weight' is [20, 11], "
                                                                  "the model's [20, 10]"));
  // all at once: a missing, an unknown and a mis-shaped tensor in one message
  wrong.erase("block2.bias");
  wrong["block4.weight"] = Tensor::zeros({2, 2}, DType::float32);
  REQUIRE_THROWS_WITH(other.set_weights(wrong), Catch::Contains("1 parameter(s) missing: 'block2.bias'; 1 tensor(s) the "
                                                                  "model does not have: 'block4.weight'") &&
                                                    Catch::Contains("; 1 of the wrong shape: 'block1.weight'"));

  // saved through torch's nn.DataParallel: every name under "module."
  TensorMap wrapped;
  for (const auto& [name, t] : w) wrapped.emplace("module." + name, t);
  write_safetensors(path.string(), wrapped);
  std::vector<std::string> notes = other.load_weights(path.string());
  REQUIRE(notes.size() == 1);
  CHECK_THAT(notes[0], Catch::Contains("every name began with 'module.'"));
  CHECK(other.parameters().at("block1.weight").to_vector<float>() == w.at("block1.weight").to_vector<float>());
  wrapped.emplace("block1.weight", w.at("block1.weight"));  // not all prefixed: not guessed
  write_safetensors(path.string(), wrapped);
  REQUIRE_THROWS_WITH(other.load_weights(path.string()), Catch::Contains("strip the prefix"));
  std::filesystem::remove(path);
}

TEST_CASE("inputs are checked against the declared shapes", "[model][inputs]") {
  Model model = Model::load(config("recommender.yaml"));
  TensorMap good = model.random_inputs({{"batch", 4}, {"tags", 9}}, 1);
  CHECK(model.bind(good) == Bindings{{"batch", 4}, {"tags", 9}});
  CHECK(model.forward(good).at("top").shape() == Shape{4, 1});

  TensorMap missing = good;
  missing.erase("dense");
  REQUIRE_THROWS_WITH(model.forward(missing), Catch::Contains("input 'dense'") && Catch::Contains("missing"));
  TensorMap misspelt = good;
  misspelt["densee"] = misspelt["dense"];
  REQUIRE_THROWS_WITH(model.forward(misspelt), Catch::Contains("no input 'densee'"));
  TensorMap wrong_width = good;
  wrong_width["dense"] = Tensor::zeros({4, 12}, DType::float32);
  REQUIRE_THROWS_WITH(model.forward(wrong_width), Catch::Contains("expected float32 [batch, 13], got float32 [4, 12]"));
  TensorMap wrong_batch = good;
  wrong_batch["dense"] = Tensor::zeros({5, 13}, DType::float32);
  REQUIRE_THROWS_WITH(model.forward(wrong_batch), Catch::Contains("batch is"));
  TensorMap wrong_dtype = good;
  wrong_dtype["item_ids"] = Tensor::zeros({4, 8}, DType::float32);
  REQUIRE_THROWS_WITH(model.forward(wrong_dtype), Catch::Contains("expected int64"));
  TensorMap bad_index = good;
  bad_index["item_ids"] = Tensor::from_vector<int64_t>({4, 8}, std::vector<int64_t>(32, 100000));
  REQUIRE_THROWS_WITH(model.forward(bad_index), Catch::Contains("layer 'items'") && Catch::Contains("100000"));
}

TEST_CASE("a repeated forward builds no new primitive and reuses buffers", "[model][cache]") {
  Model model = Model::load(config("mlp_4x1024.yaml"));
  TensorMap in = model.random_inputs({{"batch", 16}}, 2);
  Tensor first = model.forward(in).at("head").clone();
  int64_t built = model.primitives_created();
  CHECK(built > 0);
  for (int i = 0; i < 3; ++i) CHECK(model.forward(in).at("head").to_vector<float>() == first.to_vector<float>());
  CHECK(model.primitives_created() == built);
  // another batch size compiles once, then is cached too
  model.forward(model.random_inputs({{"batch", 3}}, 2));
  int64_t after = model.primitives_created();
  model.forward(model.random_inputs({{"batch", 3}}, 5));
  CHECK(model.primitives_created() == after);
}

TEST_CASE("buffers are saved and loaded but get no gradient", "[model][weights][buffers]") {
  auto yaml = std::filesystem::temp_directory_path() / ("tandem-bn-" + std::to_string(getpid()) + ".yaml");
  {
    std::ofstream out(yaml);
    out << "name: bn\ninputs:\n  x: {shape: [batch, 3, 5, 4]}\nlayers:\n"
           "  - {name: conv, op: conv2d, in_channels: 3, out_channels: 2, kernel_size: 3, padding: 1}\n"
           "  - {name: bn, op: batch_norm2d, num_features: 2}\n";
  }
  Model model = Model::load(yaml.string());
  std::filesystem::remove(yaml);
  // torch's parameters() of Conv2d(3, 2, 3) + BatchNorm2d(2): 54 + 2 + 2 + 2
  CHECK(model.graph().parameter_count() == 60);
  for (const char* name : {"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"}) {
    INFO(name);
    CHECK(model.parameters().count(name) == 1);
    CHECK(model.gradients().count(name) == 0);
  }
  const Tensor& tracked = model.parameters().at("bn.num_batches_tracked");
  CHECK(tracked.dtype() == DType::int64);
  CHECK(tracked.shape().empty());
  CHECK(model.gradients().count("bn.weight") == 1);

  std::mt19937 rng(7);
  TensorMap inputs{{"x", random_tensor({4, 3, 5, 4}, rng)}};
  const std::vector<float> mean0 = model.parameters().at("bn.running_mean").to_vector<float>();
  model.forward(inputs);  // inference reads the running statistics and leaves them
  CHECK(model.parameters().at("bn.running_mean").to_vector<float>() == mean0);
  CHECK(tracked.to_vector<int64_t>() == std::vector<int64_t>{0});
  model.backward(inputs, {{"bn", random_tensor({4, 2, 5, 4}, rng)}}, /*training=*/true);
  CHECK(tracked.to_vector<int64_t>() == std::vector<int64_t>{1});
  CHECK(model.parameters().at("bn.running_mean").to_vector<float>() != mean0);

  auto path = std::filesystem::temp_directory_path() / ("tandem-bn-" + std::to_string(getpid()) + ".safetensors");
  model.save_weights(path.string());
  TensorMap saved = read_safetensors(path.string());
  std::filesystem::remove(path);
  CHECK(saved.at("bn.num_batches_tracked").dtype() == DType::int64);
  Model again = std::move(model);
  again.set_weights(saved);
  CHECK(again.parameters().at("bn.running_var").to_vector<float>() == saved.at("bn.running_var").to_vector<float>());
  TensorMap as_float = saved;
  as_float["bn.num_batches_tracked"] = Tensor::zeros({}, DType::float32);
  REQUIRE_THROWS_WITH(again.set_weights(as_float),
                      Catch::Contains("'bn.num_batches_tracked' is float32, the model's int64"));
}

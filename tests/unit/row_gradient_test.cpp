// Row gradients (core/touched_rows.h, Note [row gradient]): a `sparse: true` table keeps its
// gradient as the rows its batches looked up, with no dense buffer the table's size, and
// trains to the dense table's weights bit for bit, also where plain SGD steps the table in
// its backward and keeps no gradient (Note [a table stepped in its backward] in
// runtime/exec/table_updates.h); what cannot update such a gradient (an
// optimizer that moves every row, a placement on a GPU) is refused with a message.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <set>

#include "graph/load_graph.h"
#include "runtime/devices/device_registry.h"
#include "runtime/io/safetensors.h"
#include "runtime/trainer.h"
#include "unit_test_support.h"

using namespace tandem;
using tandem::testing::run_cli;
using tandem::testing::seeded_rng;

namespace {

/// Three tables, each `sparse` or not: a summed bag with padding row 0, a max bag (whose
/// backward picks one entry per column), a plain embedding; and a dense branch. `table_device`
/// places the tables; the dense layers sit on `head_device`. `by_freq` sets
/// scale_grad_by_freq on the summed bag and the embedding (a max bag refuses it);
/// `bag_mode` is the first bag's (sum or mean).
std::string tables_yaml(int64_t rows, bool sparse, const std::string& table_device = "cpu",
                        const std::string& head_device = "cpu", bool by_freq = false,
                        const std::string& bag_mode = "sum") {
  const std::string flag = std::string(sparse ? "true" : "false") + (by_freq ? ", scale_grad_by_freq: true" : "");
  const std::string rows_str = std::to_string(rows);
  return "name: row_gradients\n"
         "inputs:\n"
         "  dense: {shape: [batch, 5]}\n"
         "  ids: {shape: [batch, 3], dtype: int64}\n"
         "  word: {shape: [batch], dtype: int64}\n"
         "targets:\n"
         "  y: {shape: [batch, 1]}\n"
         "layers:\n"
         "  - name: tables\n"
         "    device: " + table_device + "\n"
         "    layers:\n"
         "      - {name: bag, op: embedding_bag, inputs: ids, num_embeddings: " + rows_str +
         ", embedding_dim: 8, mode: " + bag_mode + ", padding_idx: 0, sparse: " + flag + "}\n"
         "      - {name: top, op: embedding_bag, inputs: ids, num_embeddings: " + rows_str +
         ", embedding_dim: 8, mode: max, sparse: " + std::string(sparse ? "true" : "false") + "}\n"
         "      - {name: emb, op: embedding, inputs: word, num_embeddings: 50, embedding_dim: 8, sparse: " + flag + "}\n"
         "  - name: head\n"
         "    device: " + head_device + "\n"
         "    layers:\n"
         "      - {name: fc_in, op: linear, in_features: 5, out_features: 8, inputs: dense}\n"
         "      - {name: act, op: relu}\n"
         "      - {name: both, op: cat, inputs: [tables.bag, tables.top, tables.emb, act], dim: 1}\n"
         "      - {name: out, op: linear, in_features: 32, out_features: 1}\n"
         "loss: {op: binary_cross_entropy_with_logits, input: head.out, target: y}\n";
}

Model load(int64_t rows, bool sparse, const std::string& table_device = "cpu", const std::string& head_device = "cpu",
           bool by_freq = false, const std::string& bag_mode = "sum") {
  return Model(
      load_graph_from_string(tables_yaml(rows, sparse, table_device, head_device, by_freq, bag_mode), "row_gradients.yaml"));
}

TensorMap random_batch(int64_t batch, int64_t table_rows, std::mt19937_64& rng) {
  Tensor dense = Tensor::empty({batch, 5}, DType::float32), ids = Tensor::empty({batch, 3}, DType::int64);
  Tensor word = Tensor::empty({batch}, DType::int64), y = Tensor::empty({batch, 1}, DType::float32);
  std::normal_distribution<float> normal(0, 1);
  for (float& x : dense.span<float>()) x = normal(rng);
  // some padding entries (row 0) and repeats, the rest anywhere in the table
  for (int64_t& i : ids.span<int64_t>()) i = rng() % 6 == 0 ? 0 : static_cast<int64_t>(rng() % table_rows);
  ids.data<int64_t>()[1] = ids.data<int64_t>()[4];
  for (int64_t& i : word.span<int64_t>()) i = static_cast<int64_t>(rng() % 50);
  for (float& x : y.span<float>()) x = static_cast<float>(rng() % 2);
  return {{"dense", dense}, {"ids", ids}, {"word", word}, {"y", y}};
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

const char* kTables[] = {"tables.bag.weight", "tables.top.weight", "tables.emb.weight"};

std::shared_ptr<DeviceRegistry> sim_gpus(int n) {
  return std::make_shared<DeviceRegistry>(DeviceOptions{.sim_gpus = n, .sim_gpu_memory = size_t{256} << 20},
                                          std::vector<CudaDeviceInfo>{});
}

PlacementPolicy annotations() {
  PlacementPolicy p;
  p.name = "annotations";
  return p;
}

/// Trains `rows_model` (sparse: true) and `dense_model` (the same, sparse: false, same
/// weights) `steps` steps on the same batches; their weights after each step must match bit
/// for bit, and so must the gradients of the last one, where they were kept: a table plain
/// SGD stepped in its backward keeps none, and says so when asked.
void train_side_by_side(Model& rows_model, Model& dense_model, const TrainingSpec& spec, int64_t table_rows,
                        std::mt19937_64& rng, int steps) {
  Trainer with_rows(rows_model, spec), with_dense(dense_model, spec);
  for (int step = 0; step < steps; ++step) {
    INFO("step " << step);
    TensorMap batch = random_batch(3 + static_cast<int64_t>(rng() % 20), table_rows, rng);
    const double a = with_rows.step(batch), b = with_dense.step(batch);
    CHECK(a == b);
    for (const auto& [name, p] : dense_model.parameters()) {
      INFO(name);
      REQUIRE(same_bits(rows_model.parameters().at(name), p));
    }
  }
  const bool steps_tables = spec.update_tables_in_backward && !spec.clip_grad_norm && spec.optimizer.name == "sgd";
  for (const char* name : kTables) {
    INFO(name);
    CHECK(rows_model.gradients().count(name) == 0);  // no dense buffer
    const TouchedRows& rows = rows_model.gradient_rows().at(name);
    CHECK(rows.holds_values());
    // the max bag reads its table in backward: updated after it, from its row gradient
    CHECK(rows.stepped() == (steps_tables && std::string(name) != "tables.top.weight"));
    if (rows.stepped()) {
      CHECK_THROWS_WITH(rows_model.gradient(name), Catch::Contains("went into the table in its backward"));
      const TouchedRows& dense_rows = dense_model.gradient_rows().at(name);
      CHECK(std::vector<int64_t>(rows.list().begin(), rows.list().end()) ==
            std::vector<int64_t>(dense_rows.list().begin(), dense_rows.list().end()));
    } else {
      CHECK(same_bits(rows_model.gradient(name), dense_model.gradients().at(name)));
    }
  }
}

}  // namespace

TEST_CASE("a sparse: true table keeps its gradient as rows and trains to the dense table's bits",
          "[train][touched_rows][row_gradient]") {
  auto rng = seeded_rng("row gradients");
  const int64_t rows = 20000;
  OptimizerConfig sgd;
  sgd.lr = 0.4;
  for (const std::string bag_mode : {"sum", "mean"})
    for (std::optional<double> clip : {std::optional<double>(), std::optional<double>(0.05)}) {
      // not clipped: plain SGD steps the tables in their backward, with no row gradient
      INFO((clip ? "clipped to 0.05" : "not clipped") << ", a " << bag_mode << " bag");
      Model rows_model = load(rows, true, "cpu", "cpu", false, bag_mode),
            dense_model = load(rows, false, "cpu", "cpu", false, bag_mode);
      const uint64_t seed = rng() % 1000;
      rows_model.init_parameters(seed);
      dense_model.init_parameters(seed);
      TrainingSpec spec;
      spec.optimizer = sgd;
      spec.clip_grad_norm = clip;  // 0.05 clips every step: the norm over held rows is the dense one to the bit
      train_side_by_side(rows_model, dense_model, spec, rows, rng, 6);
    }
}

TEST_CASE("a sparse: true table with scale_grad_by_freq trains to the dense table's bits",
          "[train][touched_rows][row_gradient]") {
  // torch refuses scale_grad_by_freq on sparse=True tables; here the rows hold the dense
  // gradient's values, so the scaled gradient is the dense scaled one (the oracle checks
  // that one against torch: tests/oracle/cases/op_embedding_freq.yaml)
  auto rng = seeded_rng("row gradients by frequency");
  const int64_t rows = 300;  // few rows: the batches repeat indices
  Model rows_model = load(rows, true, "cpu", "cpu", true), dense_model = load(rows, false, "cpu", "cpu", true);
  const uint64_t seed = rng() % 1000;
  rows_model.init_parameters(seed);
  dense_model.init_parameters(seed);
  TrainingSpec spec;
  spec.optimizer.lr = 0.4;
  train_side_by_side(rows_model, dense_model, spec, rows, rng, 5);
  // and the scaling happened: a model without it ends elsewhere
  Model unscaled = load(rows, false);
  unscaled.init_parameters(seed);
  Trainer trainer(unscaled, spec);
  const TensorMap batch = random_batch(12, rows, rng);
  batch.at("word").data<int64_t>()[0] = batch.at("word").data<int64_t>()[1];  // a word looked up twice
  Trainer scaled_trainer(dense_model, spec);
  const Tensor before = dense_model.parameters().at("tables.emb.weight").clone();
  unscaled.set_weights(dense_model.parameters(), "the scaled model's weights");
  trainer.step(batch);
  scaled_trainer.step(batch);
  CHECK_FALSE(same_bits(unscaled.gradients().at("tables.emb.weight"), dense_model.gradients().at("tables.emb.weight")));
  CHECK_FALSE(same_bits(before, dense_model.parameters().at("tables.emb.weight")));
}

TEST_CASE("a sparse: true table's gradient holds the rows looked up, zeroes by forgetting them, and takes no "
          "table-sized buffer",
          "[train][touched_rows][row_gradient]") {
  auto rng = seeded_rng("row gradient memory");
  const int64_t rows = 1'000'000;
  Allocator& host = cpu_allocator();
  const size_t before = host.current_bytes();
  Model model = load(rows, true);
  const size_t table_bytes = size_t{rows} * 8 * sizeof(float);
  // the two big tables' weights, no gradient buffers: a dense model holds twice this
  CHECK(host.current_bytes() - before < 2 * table_bytes + (size_t{1} << 20));
  TrainingSpec spec;
  spec.optimizer.lr = 0.5;
  spec.update_tables_in_backward = false;  // else plain SGD steps the tables in backward and keeps no gradient
  Trainer trainer(model, spec);
  TensorMap batch = random_batch(16, rows, rng);
  std::set<int64_t> looked_up;
  for (int64_t id : batch.at("ids").span<int64_t>())
    if (id != 0) looked_up.insert(id);
  const Tensor before_step = model.parameters().at("tables.bag.weight").clone();
  host.reset_peak();
  const size_t at_start = host.current_bytes();
  trainer.step(batch);
  CHECK(host.peak_bytes() - at_start < (size_t{1} << 20));  // the step's rows, not a table's 32 MiB

  const TouchedRows& bag = model.gradient_rows().at("tables.bag.weight");
  CHECK(bag.count() == static_cast<int64_t>(looked_up.size()));  // padding row 0 gets nothing
  CHECK(std::set<int64_t>(bag.list().begin(), bag.list().end()) == looked_up);
  CHECK(bag.values_bytes() < size_t{1} << 16);
  const Tensor& weight = model.parameters().at("tables.bag.weight");
  for (int64_t r : looked_up) {  // each row looked up moved by -lr times its held gradient
    INFO("row " << r);
    const float* g = bag.values_of(r);
    REQUIRE(g != nullptr);
    for (int64_t d = 0; d < 8; ++d)
      CHECK(weight.data<float>()[r * 8 + d] == std::fma(g[d], -0.5f, before_step.data<float>()[r * 8 + d]));
  }
  CHECK(std::memcmp(weight.data<float>(), before_step.data<float>(), 8 * sizeof(float)) == 0);  // padding row
  model.zero_gradients();
  CHECK(bag.count() == 0);
  CHECK(bag.values_of(*looked_up.begin()) == nullptr);
  const Tensor dense = model.gradient("tables.bag.weight");  // torch's to_dense(): all zero now
  for (float v : dense.span<float>()) REQUIRE(v == 0.0f);
}

TEST_CASE("placed training keeps a cpu table's row gradient while the head trains on a simulated GPU",
          "[multidevice][train][row_gradient]") {
  auto rng = seeded_rng("placed row gradients");
  const int64_t rows = 5000;
  Model rows_model = load(rows, true, "cpu", "cuda:0"), dense_model = load(rows, false, "cpu", "cuda:0");
  const uint64_t seed = rng() % 1000;
  rows_model.init_parameters(seed);
  dense_model.init_parameters(seed);
  rows_model.use_devices(sim_gpus(1), annotations());
  dense_model.use_devices(sim_gpus(1), annotations());
  TrainingSpec spec;
  spec.optimizer.lr = 0.3;
  spec.clip_grad_norm = 0.1;
  train_side_by_side(rows_model, dense_model, spec, rows, rng, 4);
}

TEST_CASE("what cannot update a row gradient is refused with a message: other optimizers, a table on a GPU",
          "[train][errors][row_gradient]") {
  auto rng = seeded_rng("row gradient refusals");
  struct Case {
    std::string optimizer;
    double momentum, weight_decay;
    std::string says;
  } cases[] = {{"adam", 0, 0, "trains with adam"},
               {"adamw", 0, 0, "trains with adamw"},
               {"sgd", 0.9, 0, "trains with sgd with momentum or weight_decay"},
               {"sgd", 0, 1e-4, "trains with sgd with momentum or weight_decay"}};
  for (const Case& c : cases) {
    INFO(c.optimizer << " momentum " << c.momentum << " weight_decay " << c.weight_decay);
    Model model = load(100, true);
    TrainingSpec spec;
    spec.optimizer.name = c.optimizer;
    spec.optimizer.momentum = c.momentum;
    spec.optimizer.weight_decay = c.weight_decay;
    CHECK_THROWS_WITH(Trainer(model, spec), Catch::Contains("'tables.bag.weight' belongs to a table declared sparse: "
                                                            "true") &&
                                                Catch::Contains(c.says) && Catch::Contains("Drop sparse: true"));
    Model dense = load(100, false);  // the same without sparse: true trains
    Trainer trainer(dense, spec);
    CHECK(std::isfinite(trainer.step(random_batch(4, 100, rng))));
  }

  // on a (simulated) GPU the table's gradient would come back dense: refused, naming the layer
  Model on_gpu = load(100, true, "cuda:0", "cuda:0");
  on_gpu.use_devices(sim_gpus(1), annotations());
  TrainingSpec spec;
  Trainer trainer(on_gpu, spec);
  CHECK_THROWS_WITH(trainer.step(random_batch(4, 100, rng)),
                    Catch::Contains("layer 'tables.bag' (embedding_bag)") && Catch::Contains("sparse: true") &&
                        Catch::Contains("on cuda:0") && Catch::Contains("(device: cpu)"));
  // inference on the GPU is fine: only the gradient is kept as rows
  TensorMap inputs = random_batch(4, 100, rng);
  inputs.erase("y");
  const TensorMap outputs = on_gpu.forward(inputs);
  REQUIRE(outputs.size() == 1);
  CHECK(outputs.begin()->second.size(0) == 4);
}

TEST_CASE("tandem train exits with 2 and says why when a sparse: true table meets adam", "[train][errors][cli]") {
  auto rng = seeded_rng("row gradient cli");
  const std::string dir = (std::filesystem::temp_directory_path() / ("tandem-rowgrad-" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/model.yaml") << tables_yaml(100, true)
                                     << "train: {epochs: 1, batch: 8, optimizer: {name: sgd, lr: 0.1}}\n";
  TensorMap data = random_batch(32, 100, rng);
  write_safetensors(dir + "/data.safetensors", data);
  auto run = [&](const std::string& extra, int* code) {
    return run_cli("train " + dir + "/model.yaml --data " + dir + "/data.safetensors" + extra, code);
  };
  int code = 0;
  std::string out = run(" --optimizer adam", &code);
  INFO(out);
  CHECK(code == 2);
  CHECK_THAT(out, Catch::Contains("sparse: true") && Catch::Contains("trains with adam"));
  out = run("", &code);  // plain sgd trains
  CHECK(code == 0);
  std::filesystem::remove_all(dir);
}

// ----------------------------------------------------------------------------------------
// Optimizers made for tables (adagrad, rowwise_adagrad, sparse_adam) and optimizer groups.

namespace {

/// The tables with `table_optimizer`, everything else with adam (lr 0.01).
TrainingSpec tables_apart(const std::string& table_optimizer, double lr) {
  TrainingSpec spec;
  spec.optimizer = optimizer_defaults("adam");
  spec.optimizer.lr = 0.01;
  OptimizerGroup tables;
  tables.params = {"tables.*"};
  tables.optimizer = optimizer_defaults(table_optimizer);
  tables.optimizer.lr = lr;
  spec.optimizer_groups.push_back(tables);
  return spec;
}

double largest_difference(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  double worst = 0;
  const float* x = a.data<float>();
  const float* y = b.data<float>();
  for (int64_t i = 0; i < a.numel(); ++i) worst = std::max(worst, std::abs(double(x[i]) - double(y[i])));
  return worst;
}

}  // namespace

TEST_CASE("rowwise_adagrad and adagrad on sparse: true tables train as on dense tables, adam trains the rest",
          "[train][row_gradient][optimizer_groups]") {
  auto rng = seeded_rng("table optimizers");
  const int64_t rows = 3000;
  SECTION("rowwise_adagrad: to the dense table's bits") {
    Model rows_model = load(rows, true), dense_model = load(rows, false);
    const uint64_t seed = rng() % 1000;
    rows_model.init_parameters(seed);
    dense_model.init_parameters(seed);
    train_side_by_side(rows_model, dense_model, tables_apart("rowwise_adagrad", 0.05), rows, rng, 5);
  }
  SECTION("adagrad: torch's sparse and dense paths round apart (g / std * -lr against -lr * g / std)") {
    Model rows_model = load(rows, true), dense_model = load(rows, false);
    const uint64_t seed = rng() % 1000;
    rows_model.init_parameters(seed);
    dense_model.init_parameters(seed);
    TrainingSpec spec = tables_apart("adagrad", 0.05);
    spec.optimizer_groups[0].optimizer.lr_decay = 0.01;
    spec.optimizer_groups[0].optimizer.initial_accumulator_value = 0.1;
    Trainer a(rows_model, spec), b(dense_model, spec);
    for (int step = 0; step < 5; ++step) {
      TensorMap batch = random_batch(3 + static_cast<int64_t>(rng() % 20), rows, rng);
      a.step(batch);
      b.step(batch);
    }
    for (const auto& [name, p] : dense_model.parameters()) {
      INFO(name);
      CHECK(largest_difference(rows_model.parameters().at(name), p) <= 1e-5);
    }
  }
}

TEST_CASE("sparse_adam moves only the rows a batch looked up, and takes row gradients only",
          "[train][row_gradient][optimizer_groups]") {
  auto rng = seeded_rng("sparse adam");
  const int64_t rows = 500;
  Model model = load(rows, true);
  model.init_parameters(3);
  const Tensor before = model.parameters().at("tables.bag.weight").clone();
  Trainer trainer(model, tables_apart("sparse_adam", 0.01));
  TensorMap batch = random_batch(6, rows, rng);
  trainer.step(batch);
  std::set<int64_t> looked_up;
  for (int64_t id : batch.at("ids").span<int64_t>())
    if (id != 0) looked_up.insert(id);  // padding_idx 0 gets no gradient
  const Tensor& after = model.parameters().at("tables.bag.weight");
  for (int64_t r = 0; r < rows; ++r) {
    const bool same = std::memcmp(before.data<float>() + r * 8, after.data<float>() + r * 8, 8 * sizeof(float)) == 0;
    INFO("row " << r);
    CHECK(same == !looked_up.count(r));
  }
  Model dense = load(rows, false);
  CHECK_THROWS_WITH(Trainer(dense, tables_apart("sparse_adam", 0.01)),
                    Catch::Contains("'tables.bag.weight' has a dense gradient") && Catch::Contains("SparseAdam"));
  TrainingSpec everything;
  everything.optimizer = optimizer_defaults("sparse_adam");
  CHECK_THROWS_WITH(Trainer(model, everything), Catch::Contains("'head.fc_in.bias' has a dense gradient"));
}

TEST_CASE("a run with table optimizers resumed from its checkpoint ends with the same bits",
          "[train][row_gradient][optimizer_groups][checkpoint]") {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("tandem-table-opt-" + std::to_string(getpid()) + ".safetensors")).string();
  for (const std::string optimizer : {"rowwise_adagrad", "adagrad", "sparse_adam"}) {
    INFO(optimizer);
    auto rng = seeded_rng(("table optimizer resume " + optimizer).c_str());
    const int64_t rows = 400;
    std::vector<TensorMap> batches;
    for (int k = 0; k < 6; ++k) batches.push_back(random_batch(7, rows, rng));
    TrainingSpec spec = tables_apart(optimizer, 0.05);
    Model whole = load(rows, true);
    whole.init_parameters(11);
    Trainer uninterrupted(whole, spec);
    for (int k = 0; k < 3; ++k) uninterrupted.step(batches[k]);
    uninterrupted.save_checkpoint(path);
    for (int k = 3; k < 6; ++k) uninterrupted.step(batches[k]);

    Model again = load(rows, true);
    again.init_parameters(99);  // the checkpoint's weights replace these
    Trainer resumed(again, spec);
    resumed.load_checkpoint(path);
    for (int k = 3; k < 6; ++k) resumed.step(batches[k]);
    for (const auto& [name, p] : whole.parameters()) {
      INFO(name);
      CHECK(same_bits(again.parameters().at(name), p));
    }
    const TensorMap state = read_safetensors(path);
    CHECK(state.count("optimizer.head.out.weight.exp_avg"));  // adam's, beside the tables'
    if (optimizer == "rowwise_adagrad") CHECK(state.at("optimizer.tables.bag.weight.sum").shape() == Shape{rows});
    if (optimizer == "sparse_adam") CHECK(state.count("optimizer.tables.emb.weight.exp_avg_sq"));
  }
  std::filesystem::remove(path);
}

TEST_CASE("table optimizers with the head data-parallel on 2 simulated GPUs train as the cpu alone",
          "[multidevice][train][row_gradient][optimizer_groups]") {
  auto rng = seeded_rng("table optimizers placed");
  const int64_t rows = 2000;
  for (const std::string optimizer : {"rowwise_adagrad", "sparse_adam"}) {
    INFO(optimizer);
    Model placed = load(rows, true, "cpu",
                        "cuda:0\n    data_parallel: {devices: [cuda:0, cuda:1], output_device: cuda:0, dim: 0}");
    Model alone = load(rows, true);
    placed.init_parameters(5);
    alone.init_parameters(5);
    placed.use_devices(sim_gpus(2), annotations());
    const TrainingSpec spec = tables_apart(optimizer, 0.05);
    Trainer a(placed, spec), b(alone, spec);
    for (int step = 0; step < 4; ++step) {
      TensorMap batch = random_batch(8 + 2 * static_cast<int64_t>(rng() % 8), rows, rng);
      const double la = a.step(batch), lb = b.step(batch);
      CHECK(std::abs(la - lb) <= 1e-5 * std::max(1.0, std::abs(lb)));
    }
    for (const auto& [name, p] : alone.parameters()) {
      INFO(name);
      CHECK(largest_difference(placed.parameters().at(name), p) <= 1e-5);
    }
  }
}

TEST_CASE("train: optimizer_groups in YAML: groups by pattern, inherited hyperparameters, errors at file:line",
          "[train][keys][optimizer_groups]") {
  const std::string model = tables_yaml(100, true);
  auto spec_of = [&](const std::string& train) {
    return load_graph_from_string(model + train, "groups.yaml").training.value();
  };
  TrainingSpec t = spec_of(
      "train:\n"
      "  optimizer: {name: adam, lr: 0.002, betas: [0.8, 0.9]}\n"
      "  optimizer_groups:\n"
      "    - {params: [tables.bag, 'tables.e*.weight'], name: rowwise_adagrad, lr: 0.05, eps: 1e-8}\n"
      "    - {params: head.out, lr: 0.01}\n");
  REQUIRE(t.optimizer_groups.size() == 2);
  CHECK(t.optimizer_groups[0].optimizer.name == "rowwise_adagrad");
  CHECK(t.optimizer_groups[0].optimizer.lr == 0.05);
  CHECK(t.optimizer_groups[0].optimizer.eps == 1e-8);
  CHECK(t.optimizer_groups[0].params == std::vector<std::string>{"tables.bag", "tables.e*.weight"});
  CHECK(t.optimizer_groups[0].params_at[0] == "groups.yaml:26:17");
  // no name: the default optimizer's kind and hyperparameters, lr overridden (torch's param_groups)
  CHECK(t.optimizer_groups[1].optimizer.name == "adam");
  CHECK(t.optimizer_groups[1].optimizer.beta1 == 0.8);
  CHECK(t.optimizer_groups[1].optimizer.lr == 0.01);

  struct Bad {
    std::string train, says;
  } bad[] = {
      {"train:\n  optimizer_groups:\n    - {params: [tables.*], name: rowwise_adagrad, betas: [0.9, 0.99]}\n",
       "groups.yaml:25:51: unknown key of the rowwise_adagrad optimizer group 'betas'"},
      {"train:\n  optimizer_groups:\n    - {params: [tables.*], name: rowwise_adagard}\n",
       "groups.yaml:25:34: unknown optimizer 'rowwise_adagard' (did you mean 'rowwise_adagrad'?)"},
      {"train:\n  optimizer_groups:\n    - {name: adagrad}\n", "groups.yaml:25:7: missing required key 'params'"},
      {"train:\n  optimizer_groups: {params: x}\n", "groups.yaml:24:21: optimizer_groups must be a list"},
      {"train:\n  optimizer_groups:\n    - {params: [tables.*], name: adagrad, lr: -1}\n",
       "groups.yaml:25:47: lr must not be negative"},
  };
  for (const Bad& b : bad) {
    INFO(b.train);
    CHECK_THROWS_WITH(spec_of(b.train), Catch::Contains(b.says));
  }
  // a pattern that matches no trained parameter: named where it stands, when training starts
  Model m(load_graph_from_string(model + "train:\n  optimizer_groups:\n    - {params: [tables.*, tabels.*], name: "
                                         "rowwise_adagrad}\n",
                                 "groups.yaml"));
  CHECK_THROWS_WITH(Trainer(m, m.graph().training.value()),
                    Catch::Contains("groups.yaml:25:27: train: optimizer_groups: params pattern 'tabels.*' matches no "
                                    "trained parameter"));
}

TEST_CASE("tandem train exits with 2 naming file:line for a bad optimizer group, and trains a good one",
          "[train][errors][cli][optimizer_groups]") {
  auto rng = seeded_rng("optimizer groups cli");
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("tandem-groups-" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  TensorMap data = random_batch(32, 100, rng);
  write_safetensors(dir + "/data.safetensors", data);
  auto run = [&](const std::string& groups, int* code) {
    std::ofstream(dir + "/model.yaml") << tables_yaml(100, true)
                                       << "train:\n  epochs: 2\n  batch: 8\n  optimizer: {name: adam, lr: 0.01}\n"
                                       << "  optimizer_groups:\n" << groups;
    return run_cli("train " + dir + "/model.yaml --data " + dir + "/data.safetensors", code);
  };
  int code = 0;
  std::string out = run("    - {params: tables.*, name: rowwise_adagrad, momentum: 0.9}\n", &code);
  INFO(out);
  CHECK(code == 2);
  CHECK_THAT(out, Catch::Contains("model.yaml:28:49: unknown key of the rowwise_adagrad optimizer group 'momentum'"));
  out = run("    - {params: tables.*, name: sgd, momentum: 0.9}\n", &code);
  CHECK(code == 2);
  CHECK_THAT(out, Catch::Contains("belongs to a table declared sparse: true"));
  out = run("    - {params: tables.*, name: rowwise_adagrad, lr: 0.05}\n", &code);
  CHECK(code == 0);
  std::filesystem::remove_all(dir);
}

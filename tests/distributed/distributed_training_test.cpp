// Training over the ranks of a job through the C++ API (Trainer::distribute), run by ctest
// under `mpirun --oversubscribe -np N` with the collectives' tests. The oracle is the same
// model trained by one process on the whole global batch, which every rank also trains
// itself: N ranks at batch B must end with its weights.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "../multidevice/multidevice_support.h"
#include "runtime/data/dataset.h"
#include "runtime/distributed/broadcast_tensors.h"
#include "runtime/distributed/gpu_assignment.h"
#include "runtime/distributed/process_group.h"
#include "runtime/micro_batches.h"
#include "runtime/trainer.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

std::shared_ptr<ProcessGroup> job() {
  static std::shared_ptr<ProcessGroup> g = ProcessGroup::from_environment(std::chrono::seconds(60));
  return g;
}

/// A seed every rank shares, fresh for each run (rank 0's draw), printed for a replay:
/// TANDEM_TEST_SEED=N repeats a run.
uint64_t shared_seed(const char* test) {
  uint64_t seed = std::random_device{}() % 100000;
  if (const char* s = std::getenv("TANDEM_TEST_SEED")) seed = std::stoull(s);
  job()->broadcast(&seed, sizeof seed, 0, "the test's seed");
  if (job()->rank() == 0) std::cout << test << ": seed " << seed << " (TANDEM_TEST_SEED=" << seed << " repeats it)\n";
  return seed;
}

/// A file under the temp directory that every rank names alike (rank 0's pid in it).
std::string shared_path(const std::string& name) {
  int64_t pid = getpid();
  job()->broadcast(&pid, sizeof pid, 0, "the scratch files' pid");
  return (std::filesystem::temp_directory_path() / ("tandem-ddp-" + std::to_string(pid) + "-" + name)).string();
}

/// `yaml` in a file every rank reads, once every rank is done with the file's last text.
std::string write_model(const std::string& name, const std::string& yaml) {
  const std::string path = shared_path(name + ".yaml");
  job()->barrier("the model file read");
  if (job()->rank() == 0) std::ofstream(path) << yaml;
  job()->barrier("the model file written");
  return path;
}

// The models' activations are GELU, not ReLU: N ranks sum the same terms in another order
// than one process does, and a ReLU whose input lies within that rounding of 0 takes the
// other branch in one of the runs (seed 10349: one hidden unit of the MLP, 2.8e-4 of the
// model's scale after 20 sgd steps). A smooth activation keeps the difference at rounding's.
const char* kMlp = R"(name: ddp_mlp
inputs:
  x: {shape: [batch, 12]}
targets:
  label: {shape: [batch], dtype: int64}
layers:
  - {name: fc1, op: linear, in_features: 12, out_features: 32}
  - {name: act, op: gelu}
  - {name: fc2, op: linear, in_features: 32, out_features: 5}
loss: {op: cross_entropy, input: fc2, target: label}
)";

// embeddings on the cpu, the MLP over two simulated GPUs
const char* kMixed = R"(name: ddp_mixed
inputs:
  ids: {shape: [batch, 3], dtype: int64}
targets:
  y: {shape: [batch, 1]}
layers:
  - {name: table, op: embedding_bag, inputs: ids, num_embeddings: 500, embedding_dim: 8, mode: sum, device: cpu}
  - {name: fc1, op: linear, in_features: 8, out_features: 16, device: cuda:0}
  - {name: act, op: gelu, device: cuda:0}
  - {name: fc2, op: linear, in_features: 16, out_features: 1, device: cuda:1}
loss: {op: mse_loss, input: fc2, target: y}
)";

// an in-process data_parallel block inside each rank
const char* kBlock = R"(name: ddp_block
inputs:
  x: {shape: [batch, 12]}
targets:
  label: {shape: [batch], dtype: int64}
layers:
  - {name: fc0, op: linear, in_features: 12, out_features: 16, device: cpu}
  - name: block
    data_parallel: {devices: [cuda:0, cuda:1], output_device: cuda:0, dim: 0}
    layers:
      - {name: fc1, op: linear, in_features: 16, out_features: 16}
      - {name: act, op: gelu}
      - {name: fc2, op: linear, in_features: 16, out_features: 5}
loss: {op: cross_entropy, input: block.fc2, target: label}
)";

// batch norm's running statistics are buffers; conv and norm on simulated GPUs
const char* kNorm = R"(name: ddp_norm
inputs:
  x: {shape: [batch, 2, 4, 4]}
targets:
  label: {shape: [batch], dtype: int64}
layers:
  - {name: conv, op: conv2d, in_channels: 2, out_channels: 3, kernel_size: 3, padding: 1, bias: false, device: cuda:0}
  - {name: bn, op: batch_norm2d, num_features: 3, device: cuda:1}
  - {name: act, op: gelu, device: cuda:1}
  - {name: flat, op: flatten, device: cpu}
  - {name: fc, op: linear, in_features: 48, out_features: 5, device: cpu}
loss: {op: cross_entropy, input: fc, target: label}
)";

TrainingSpec spec_with(const std::string& optimizer, int64_t accumulate = 1) {
  TrainingSpec spec;
  spec.optimizer.name = optimizer;
  // rates at which 20 steps learn without diverging (which would grow rounding's 1e-7 past
  // any tolerance)
  spec.optimizer.lr = optimizer == "sgd" ? 0.02 : 0.001;
  spec.optimizer.momentum = optimizer == "sgd" ? 0.5 : 0;
  // Adam divides each gradient by its own running magnitude: a gradient that sums terms
  // which nearly cancel (1e-3 terms to 1e-9), whose value is then rounding noise that
  // differs between a sum over N ranks and one over the whole batch, moves its weight by
  // up to lr either way (seen: 1.1e-4 of the model's scale, seed 99367 at 3 ranks). An eps
  // of 1e-4, below the 1e-2-1e-1 gradients that train, damps such noise to 1e-3 lr.
  if (optimizer == "adam") spec.optimizer.eps = 1e-4;
  spec.accumulate = accumulate;
  return spec;
}

/// The message of the JobError `body` throws (every rank throws it alike); "" when it
/// throws none.
std::string job_error(const std::function<void()>& body) {
  try {
    body();
  } catch (const JobError& e) {
    return e.what();
  }
  return "";
}

struct Run {
  TensorMap weights;
  std::vector<double> losses;  // each step's loss over the whole global batch
  size_t state_bytes = 0;      // this rank's optimizer state
  // distributed: which way the gradients went, by the reducer's count and the GPUs'
  // communicators' own
  bool on_devices = false;
  GradientReducer::Traffic traffic;
  InterProcessCommunicator::Counters device_collectives;
};

struct RunOptions {
  bool distributed = true;
  bool placed = false;
  int steps = 20;
  int64_t global_batch = 0;  // default: 4 per rank
  DistributedOptions ddp = {};
};

TensorMap global_batch(const Model& model, int64_t size, uint64_t seed) {
  TensorMap batch = model.random_inputs({{"batch", size}}, seed);
  batch.merge(model.random_targets({{"batch", size}}, seed + 7));
  return batch;
}

/// `steps` steps of `yaml` on the batches of `seed`: distributed, each rank on its share of
/// every global batch (as many samples each), or alone on the whole of it.
Run train(const std::string& yaml, const TrainingSpec& spec, uint64_t seed, RunOptions o) {
  const int rank = job()->rank(), ranks = job()->size();
  if (o.global_batch == 0) o.global_batch = 4 * ranks;
  Model model = Model::load(yaml);
  if (o.placed) model.use_devices(sim_gpus(2), policy());
  // the ranks start from other weights: distribute() gives them rank 0's, the oracle's
  model.init_parameters(o.distributed ? seed + static_cast<uint64_t>(rank) : seed);
  Trainer trainer(model, spec);
  if (o.distributed) trainer.distribute(job(), o.ddp);
  Run run;
  for (int step = 0; step < o.steps; ++step) {
    TensorMap batch = global_batch(model, o.global_batch, seed * 1000 + static_cast<uint64_t>(step));
    if (!o.distributed) {
      run.losses.push_back(trainer.step(batch));
      continue;
    }
    // rank r takes the r-th of N equal parts, as DistributedSampler's shards are equal
    std::vector<MicroBatch> parts = split_micro_batches(batch, ranks, model.graph());
    double loss = trainer.step(parts[static_cast<size_t>(rank)].batch);
    job()->all_reduce_sum(&loss, 1, "the test's losses");
    run.losses.push_back(loss / ranks);
  }
  for (const auto& [name, t] : model.parameters()) run.weights.emplace(name, t.clone());
  run.state_bytes = trainer.optimizer_state_bytes();
  if (const DistributedDataParallel* ddp = trainer.distributed()) {
    run.on_devices = ddp->reduces_on_devices();
    run.traffic = ddp->gradient_traffic();
    run.device_collectives = ddp->device_collective_counters();
  }
  return run;
}

/// Bytes of the parameters in `names` (float32).
size_t bytes_of(const TensorMap& weights, std::initializer_list<const char*> names) {
  size_t n = 0;
  for (const char* name : names) n += weights.at(name).nbytes();
  return n;
}

/// max |a - b| over every float tensor, relative to the largest |b| in the whole model. One
/// scale for all: a bias that training brings near zero (1e-3, from sums of terms 10x larger)
/// carries the rounding of those terms, and against its own size that rounding reads as 1e-5
/// where the rest of the model agrees to 1e-7.
double max_error_at_model_scale(const TensorMap& a, const TensorMap& b) {
  double scale = 1e-6, worst = 0;
  for (const auto& [name, t] : b)
    if (t.dtype() == DType::float32)
      for (float v : t.span<float>()) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  for (const auto& [name, t] : b) {
    if (t.dtype() != DType::float32) continue;
    auto x = a.at(name).span<float>();
    auto y = t.span<float>();
    REQUIRE(x.size() == y.size());
    for (size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(x[i]) - y[i]));
  }
  return worst / scale;
}

void check_same_training(const Run& got, const Run& want, double tolerance = 1e-5) {
  REQUIRE(got.losses.size() == want.losses.size());
  for (size_t i = 0; i < got.losses.size(); ++i) {
    INFO("step " << i);
    CHECK(got.losses[i] == Approx(want.losses[i]).epsilon(tolerance));
  }
  CHECK(max_error_at_model_scale(got.weights, want.weights) <= tolerance);
  CHECK(any_nonzero(got.weights));
}

/// |a - b| / |b| over every float tensor together (Euclidean norms).
double relative_distance(const TensorMap& a, const TensorMap& b) {
  double diff = 0, norm = 0;
  for (const auto& [name, t] : b) {
    if (t.dtype() != DType::float32) continue;
    auto x = a.at(name).span<float>();
    auto y = t.span<float>();
    for (size_t i = 0; i < y.size(); ++i) {
      diff += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
      norm += static_cast<double>(y[i]) * y[i];
    }
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

/// Whether every rank holds rank 0's `tensors`, to the bit.
bool same_on_every_rank(const TensorMap& tensors) {
  TensorMap rank0;
  for (const auto& [name, t] : tensors) rank0.emplace(name, t.clone());
  broadcast_tensors(*job(), rank0, 0, "the test's weights of rank 0");
  double differ = max_relative_error(tensors, rank0) == 0 ? 0 : 1;
  job()->all_reduce_sum(&differ, 1, "the test's count of differing ranks");
  return differ == 0;
}

}  // namespace

TEST_CASE("N ranks at batch B train as one process at N x B", "[distributed][train]") {
  const uint64_t seed = shared_seed("N ranks at batch B");
  struct Case {
    const char* name;
    const char* yaml;
    const char* optimizer;
    bool placed;
  };
  for (const Case& c : {Case{"cpu mlp, sgd with momentum", kMlp, "sgd", false}, Case{"cpu mlp, adam", kMlp, "adam", false},
                        Case{"embeddings on the cpu, mlp on two simulated GPUs, sgd", kMixed, "sgd", true},
                        Case{"mixed, adam", kMixed, "adam", true},
                        Case{"a data_parallel block in each rank, sgd", kBlock, "sgd", true},
                        Case{"data_parallel block, adam", kBlock, "adam", true}}) {
    INFO(c.name);
    const std::string yaml = write_model("same", c.yaml);
    const TrainingSpec spec = spec_with(c.optimizer);
    const Run want = train(yaml, spec, seed, {.distributed = false, .placed = c.placed, .global_batch = 4 * job()->size()});
    const Run got = train(yaml, spec, seed, {.placed = c.placed});
    check_same_training(got, want);
  }
}

// tables with row gradients (`sparse: true`), ids repeating within and across the ranks'
// shares (60 rows, 12 ids a sample) and a padding row, beside an MLP
const char* kTables = R"(name: ddp_tables
inputs:
  ids: {shape: [batch, 12], dtype: int64}
  x: {shape: [batch, 6]}
targets:
  y: {shape: [batch, 1]}
layers:
  - {name: table, op: embedding_bag, inputs: ids, num_embeddings: 60, embedding_dim: 8, mode: sum, sparse: true,
     padding_idx: 3, device: cpu}
  - {name: fc0, op: linear, inputs: x, in_features: 6, out_features: 8}
  - {name: both, op: add, inputs: [table, fc0]}
  - {name: act, op: gelu}
  - {name: fc1, op: linear, in_features: 8, out_features: 1}
loss: {op: mse_loss, input: fc1, target: y}
)";

TEST_CASE("the table optimizers update the rows summed over the ranks, as one process at N x B",
          "[distributed][train][tables]") {
  const uint64_t seed = shared_seed("table optimizers");
  const std::string yaml = write_model("tables", kTables);
  for (const char* table_optimizer : {"rowwise_adagrad", "sparse_adam", "adagrad", "sgd"}) {
    for (bool placed : {false, true}) {
      INFO(table_optimizer << (placed ? ", the MLP on two simulated GPUs" : ", on the cpu"));
      TrainingSpec spec = spec_with("adam");
      OptimizerGroup tables;
      tables.params = {"table"};
      tables.optimizer.name = table_optimizer;
      tables.optimizer.lr = 0.05;
      // Adagrad's and Adam's first step moves a row by about lr whatever its gradient's size:
      // a row whose terms nearly cancel, whose value is then rounding noise that differs
      // between N ranks' sum and one process's, would move by noise (3e-5 of the model's
      // scale, sparse_adam at 3 ranks). An eps of 1e-4, below the gradients that train, damps
      // it, as spec_with does for adam.
      tables.optimizer.eps = 1e-4;
      spec.optimizer_groups.push_back(tables);
      const Run want = train(yaml, spec, seed, {.distributed = false, .placed = placed, .global_batch = 4 * job()->size()});
      const Run got = train(yaml, spec, seed, {.placed = placed});
      check_same_training(got, want);
      // the padding row gets no gradient: it stays where the (shared) initialisation put it
      const auto got_table = got.weights.at("table.weight").span<float>();
      const auto want_table = want.weights.at("table.weight").span<float>();
      for (size_t k = 3 * 8; k < 4 * 8; ++k) CHECK(got_table[k] == want_table[k]);
    }
  }
}

TEST_CASE("bucket sizes from one parameter per bucket to one bucket give the same weights", "[distributed][train]") {
  const uint64_t seed = shared_seed("bucket sizes");
  const std::string yaml = write_model("buckets", kMlp);
  const TrainingSpec spec = spec_with("adam");
  const Run want = train(yaml, spec, seed, {.distributed = false});
  std::vector<Run> runs;
  for (size_t cap : {size_t{4}, size_t{600}, size_t{2048}, size_t{1} << 30}) {
    INFO("bucket cap " << cap << " bytes");
    RunOptions o;
    o.ddp.bucket_cap_bytes = cap;
    runs.push_back(train(yaml, spec, seed, o));
    check_same_training(runs.back(), want);
  }
  // a sum's order does not depend on the buckets: the same bits
  for (const Run& r : runs) CHECK(max_relative_error(r.weights, runs.front().weights) == 0);
}

TEST_CASE("a sharded optimizer state (ZeRO stage 1) trains as the plain one, each rank holding its share",
          "[distributed][train]") {
  const uint64_t seed = shared_seed("sharded optimizer state");
  const int ranks = job()->size();
  for (const char* model : {kMlp, kMixed, kBlock}) {
    const std::string yaml = write_model("sharded", model);
    const bool placed = model != kMlp;
    const TrainingSpec spec = spec_with("adam");
    // the plain path that sharding keeps: every gradient over MPI (the GPUs' own sum adds
    // in another order)
    RunOptions host{.placed = placed};
    host.ddp.device_collectives = false;
    const Run plain = train(yaml, spec, seed, host);
    RunOptions o{.placed = placed};
    o.ddp.shard_optimizer_state = true;
    const Run sharded = train(yaml, spec, seed, o);
    CHECK_FALSE(sharded.on_devices);
    CHECK(sharded.traffic.on_devices == 0);
    // the same arithmetic on the same numbers: the same bits
    CHECK(max_relative_error(sharded.weights, plain.weights) == 0);
    CHECK(sharded.losses == plain.losses);
    // Adam's two moments of every parameter, shared out: all of them over the ranks, and
    // each rank near its 1/N (within the largest parameter)
    double total = static_cast<double>(sharded.state_bytes);
    job()->all_reduce_sum(&total, 1, "the test's state bytes");
    CHECK(total == static_cast<double>(plain.state_bytes));
    size_t largest = 0;
    for (const auto& [name, t] : plain.weights) largest = std::max(largest, 2 * t.nbytes());
    CHECK(static_cast<double>(sharded.state_bytes) <= static_cast<double>(plain.state_bytes) / ranks + largest);
    CHECK(sharded.state_bytes < plain.state_bytes);
  }
}

TEST_CASE("accumulating k micro-batches trains as the k times larger batch", "[distributed][train]") {
  const uint64_t seed = shared_seed("accumulation");
  for (const char* model : {kMlp, kMixed}) {
    const std::string yaml = write_model("accumulate", model);
    const bool placed = model == kMixed;
    INFO((placed ? "the mixed model, placed" : "the mlp"));
    const int ranks = job()->size();
    // over the ranks: each rank 2 micro-batches of 3
    const Run want = train(yaml, spec_with("sgd"), seed, {.distributed = false, .placed = placed, .global_batch = 6 * ranks});
    {
      INFO("sgd, 2 micro-batches of 3 on each of " << ranks << " ranks");
      check_same_training(train(yaml, spec_with("sgd", 2), seed, {.placed = placed, .global_batch = 6 * ranks}), want);
    }
    INFO("adam, one process, 3 micro-batches of 4, 3 and 3");
    // one process, a batch of 10 in 3 unequal parts (4, 3, 3): each weighted by its share
    const Run alone = train(yaml, spec_with("adam"), seed, {.distributed = false, .placed = placed, .global_batch = 10});
    check_same_training(
        train(yaml, spec_with("adam", 3), seed, {.distributed = false, .placed = placed, .global_batch = 10}), alone);
  }
}

TEST_CASE("a checkpoint rank 0 writes resumes every rank where the run left off", "[distributed][train]") {
  const uint64_t seed = shared_seed("resume");
  const std::string yaml = write_model("resume", kMlp), checkpoint = shared_path("resume.safetensors");
  const TrainingSpec spec = spec_with("adam");
  DistributedOptions options;
  options.shard_optimizer_state = GENERATE(false, true);  // the shares gathered into one file, and cut again
  INFO("sharded optimizer state: " << options.shard_optimizer_state);
  const int rank = job()->rank(), ranks = job()->size();
  auto shard = [&](const Model& model, int step) {
    TensorMap batch = global_batch(model, 4 * ranks, seed * 1000 + static_cast<uint64_t>(step));
    return split_micro_batches(batch, ranks, model.graph())[static_cast<size_t>(rank)].batch;
  };
  Model whole = Model::load(yaml);
  whole.init_parameters(seed);
  Trainer uninterrupted(whole, spec);
  uninterrupted.distribute(job(), options);
  for (int step = 0; step < 12; ++step) uninterrupted.step(shard(whole, step));
  {
    Model first = Model::load(yaml);
    first.init_parameters(seed);
    Trainer trainer(first, spec);
    trainer.distribute(job(), options);
    for (int step = 0; step < 6; ++step) trainer.step(shard(first, step));
    trainer.save_checkpoint(checkpoint);
    job()->barrier("the checkpoint written");
    // rank 0 alone wrote it
    CHECK(std::filesystem::exists(checkpoint));
  }
  Model resumed = Model::load(yaml);
  resumed.init_parameters(seed + 99);  // other weights and no optimizer state until it loads
  Trainer trainer(resumed, spec);
  trainer.distribute(job(), options);
  trainer.load_checkpoint(checkpoint);
  CHECK(trainer.steps_done() == 6);
  for (int step = 6; step < 12; ++step) trainer.step(shard(resumed, step));
  CHECK(max_relative_error(resumed.parameters(), whole.parameters()) == 0);
  job()->barrier("the checkpoint read");
  if (rank == 0) std::filesystem::remove(checkpoint);

  // a file rank 0 cannot read ends every rank alike, with rank 0's reason
  Model again = Model::load(yaml);
  Trainer missing(again, spec);
  missing.distribute(job());
  CHECK_THAT(job_error([&] { missing.load_checkpoint(checkpoint + ".missing"); }), Catch::Matchers::Contains("resume.safetensors.missing"));
}

TEST_CASE("a rank that loaded another model is refused at the start, named", "[distributed][train]") {
  const int last = job()->size() - 1;
  std::string other = kMlp;
  other.replace(other.find("out_features: 32"), 16, "out_features: 33");
  other.replace(other.find("in_features: 32"), 15, "in_features: 33");
  const std::string mine = write_model("mine", kMlp), theirs = write_model("theirs", other);
  Model model = Model::load(job()->rank() == last ? theirs : mine);
  Trainer trainer(model, spec_with("sgd"));
  CHECK_THAT(job_error([&] { trainer.distribute(job()); }), Catch::Matchers::Contains("rank " + std::to_string(last) + " loaded another model") &&
                           Catch::Matchers::Contains("'fc1.bias'"));
  // settings count too: another learning rate
  TrainingSpec spec = spec_with("sgd");
  if (job()->rank() == last) spec.optimizer.lr = 0.2;
  Model same = Model::load(mine);
  Trainer other_lr(same, spec);
  CHECK_THAT(job_error([&] { other_lr.distribute(job()); }), Catch::Matchers::Contains("lr 0.2"));
}

TEST_CASE("a parameter the loss does not reach is refused, unless unused parameters are asked for",
          "[distributed][train]") {
  // a head that only an output reads
  std::string text = std::string(kMlp);
  text.insert(text.find("loss:"), "  - {name: side, op: linear, inputs: act, in_features: 32, out_features: 2}\noutputs: [fc2, side]\n");
  const std::string with_side = write_model("with_side", text);
  Model model = Model::load(with_side);
  Trainer trainer(model, spec_with("sgd"));
  CHECK_THAT(job_error([&] { trainer.distribute(job()); }), Catch::Matchers::Contains("'side.weight'") && Catch::Matchers::Contains("--find-unused-parameters"));
  const uint64_t seed = shared_seed("unused parameters");
  RunOptions o;
  o.ddp.find_unused_parameters = true;
  const Run got = train(with_side, spec_with("sgd"), seed, o);
  const Run want = train(with_side, spec_with("sgd"), seed, {.distributed = false});
  check_same_training(got, want);

  // the same head on a simulated GPU: it stays as it is, the others' gradients go between
  // the GPUs
  std::string mixed = std::string(kMixed);
  mixed.insert(mixed.find("loss:"),
               "  - {name: side, op: linear, inputs: act, in_features: 16, out_features: 2, device: cuda:1}\n"
               "outputs: [fc2, side]\n");
  const std::string placed_side = write_model("placed_side", mixed);
  RunOptions on_gpus{.placed = true};
  on_gpus.ddp.find_unused_parameters = true;
  const Run held = train(placed_side, spec_with("adam"), seed, on_gpus);
  check_same_training(held, train(placed_side, spec_with("adam"), seed,
                                  {.distributed = false, .placed = true, .global_batch = 4 * job()->size()}));
  CHECK(held.on_devices);
  CHECK(held.traffic.on_devices == bytes_of(held.weights, {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}) * 20);
}

TEST_CASE("validation over the ranks gives the whole set's loss, accuracy and AUC", "[distributed][train]") {
  const uint64_t seed = shared_seed("validation");
  for (const char* model_yaml : {kMlp, R"(name: ddp_binary
inputs:
  x: {shape: [batch, 12]}
targets:
  y: {shape: [batch, 1]}
layers:
  - {name: fc1, op: linear, in_features: 12, out_features: 8}
  - {name: act, op: tanh}
  - {name: fc2, op: linear, in_features: 8, out_features: 1}
loss: {op: binary_cross_entropy_with_logits, input: fc2, target: y}
)"}) {
    const std::string yaml = write_model("validation", model_yaml);
    Model model = Model::load(yaml);
    model.init_parameters(seed);
    // 37 samples: no rank count divides it, and no sample may count twice
    TensorMap samples = model.random_inputs({{"batch", 37}}, seed);
    samples.merge(model.random_targets({{"batch", 37}}, seed + 1));
    if (samples.count("y"))  // binary targets: 0 or 1
      for (float& v : samples.at("y").span<float>()) v = v > 0.5f ? 1.0f : 0.0f;
    const Dataset data(samples);
    TrainingSpec spec = spec_with("sgd");
    spec.batch = 5;
    Trainer alone(model, spec);
    const EvalResult want = alone.evaluate(data);
    Model copy = Model::load(yaml);
    copy.init_parameters(seed);
    Trainer together(copy, spec);
    together.distribute(job());
    const EvalResult got = together.evaluate(data);
    CHECK(got.samples == 37);
    CHECK(got.loss == Approx(want.loss).epsilon(1e-6));
    CHECK(got.accuracy.has_value() == want.accuracy.has_value());
    if (want.accuracy) CHECK(*got.accuracy == *want.accuracy);
    if (want.auc) {
      REQUIRE(got.auc);
      REQUIRE(want.auc->value);
      CHECK(*got.auc->value == Approx(*want.auc->value).epsilon(1e-9));
    }
  }
}

TEST_CASE("each rank takes its share of its host's GPUs, and two ranks never one GPU", "[distributed][gpus]") {
  const int rank = job()->rank(), ranks = job()->size();  // all on this host
  auto bus = [](int count) {
    std::vector<std::string> ids;
    for (int i = 0; i < count; ++i) ids.push_back("0000:" + std::to_string(10 + i) + ":00.0");
    return ids;
  };
  // as many GPUs as ranks: one each, by local rank; twice as many: two each
  auto one = assign_gpus(*job(), std::nullopt, bus(ranks));
  REQUIRE(one);
  CHECK(one->visible_devices == std::to_string(rank));
  CHECK(one->bus_ids == std::vector<std::string>{bus(ranks)[static_cast<size_t>(rank)]});
  auto two = assign_gpus(*job(), std::nullopt, bus(2 * ranks));
  REQUIRE(two);
  CHECK(two->visible_devices == std::to_string(2 * rank) + "," + std::to_string(2 * rank + 1));
  // a CUDA_VISIBLE_DEVICES every rank shares is cut the same way, in its own terms
  const std::vector<std::string> listed_order{"5", "3", "4"};
  auto listed = assign_gpus(*job(), std::string("5, 3,4").substr(0, ranks == 2 ? 4 : 6), bus(6));
  REQUIRE(listed);
  CHECK(listed->visible_devices == listed_order[static_cast<size_t>(rank)]);
  CHECK(listed->bus_ids == std::vector<std::string>{bus(6)[std::stoul(listed_order[static_cast<size_t>(rank)])]});
  // no GPU: the ranks run on the cpu or simulated GPUs
  CHECK_FALSE(assign_gpus(*job(), std::nullopt, {}));

  // fewer GPUs than ranks: refused on every rank, naming the host and the way out
  CHECK_THAT(job_error([&] { assign_gpus(*job(), std::nullopt, bus(ranks - 1)); }),
             Catch::Matchers::Contains("host " + job()->host() + " has " + std::to_string(ranks - 1) + " GPU(s) visible") &&
                 Catch::Matchers::Contains("each rank needs a GPU of its own"));
  // every rank told to use GPU 0 alike: the same
  CHECK_THAT(job_error([&] { assign_gpus(*job(), std::string("0"), bus(ranks)); }),
             Catch::Matchers::Contains("has 1 GPU(s) visible (CUDA_VISIBLE_DEVICES=0)"));
  // a launcher's per-rank choice is kept ...
  auto own = assign_gpus(*job(), std::to_string(ranks - 1 - rank), bus(ranks));
  REQUIRE(own);
  CHECK(own->visible_devices == std::to_string(ranks - 1 - rank));
  // ... unless two choices overlap: ranks 0 and 1 both hold GPU 1
  const std::string overlapping = rank == 0 ? "0,1" : std::to_string(rank);
  CHECK_THAT(job_error([&] { assign_gpus(*job(), overlapping, bus(ranks)); }),
             Catch::Matchers::Contains("ranks 0 and 1 on host " + job()->host() + " would both use GPU " + bus(ranks)[1]));

  // the driver's list: a folder per GPU, in bus order
  const std::string dir = shared_path("gpus" + std::to_string(rank));
  for (const char* id : {"0000:3b:00.0", "0000:1a:00.0"}) std::filesystem::create_directories(dir + "/" + id);
  CHECK(driver_gpus(dir) == std::vector<std::string>{"0000:1a:00.0", "0000:3b:00.0"});
  CHECK(driver_gpus(dir + "/none").empty());
  std::filesystem::remove_all(dir);
}

TEST_CASE("bf16-compressed gradients train as the plain path within bf16's rounding, every rank alike",
          "[distributed][train]") {
  const uint64_t seed = shared_seed("bf16 compression");
  for (const char* optimizer : {"sgd", "adam"})
    for (const char* model : {kMlp, kMixed, kBlock}) {
      INFO(optimizer << " on " << model);
      const std::string yaml = write_model("compressed", model);
      const bool placed = model != kMlp;
      const TrainingSpec spec = spec_with(optimizer);
      const Run plain = train(yaml, spec, seed, {.placed = placed});
      RunOptions o{.placed = placed};
      o.ddp.gradient_compression = GradientCompression::bf16;
      const Run compressed = train(yaml, spec, seed, o);
      // each gradient off by about 2^-8 of itself: over 20 steps every loss stays within
      // 1e-2 and the weights within 1e-2 of the plain path's, as a whole (a tensor of one
      // element near zero, such as a bias, may differ by more relative to itself), yet not
      // the plain path's bits (the gradients did travel in bf16)
      REQUIRE(compressed.losses.size() == plain.losses.size());
      for (size_t i = 0; i < plain.losses.size(); ++i) CHECK(compressed.losses[i] == Approx(plain.losses[i]).epsilon(1e-2));
      CHECK(relative_distance(compressed.weights, plain.weights) <= 1e-2);
      CHECK(max_relative_error(compressed.weights, plain.weights) > 0);
      CHECK(same_on_every_rank(compressed.weights));
    }
}

TEST_CASE("rank 0's buffers reach every rank after each step, unless broadcast_buffers is off",
          "[distributed][train]") {
  const uint64_t seed = shared_seed("broadcast buffers");
  const std::string yaml = write_model("buffers", kNorm);
  const TrainingSpec spec = spec_with("sgd");
  RunOptions o{.placed = true, .steps = 5};
  const Run shared = train(yaml, spec, seed, o);
  CHECK(same_on_every_rank(shared.weights));  // running statistics included
  CHECK(shared.weights.at("bn.running_mean").span<float>()[0] != 0);
  o.ddp.broadcast_buffers = false;
  const Run own = train(yaml, spec, seed, o);
  // each rank's statistics follow its own batches; the trained weights are the same
  CHECK_FALSE(same_on_every_rank(own.weights));
  TensorMap trained = own.weights;
  for (const char* buffer : {"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"}) trained.erase(buffer);
  CHECK(same_on_every_rank(trained));
  // the weights do not depend on the buffers (batch norm trains on batch statistics)
  TensorMap shared_trained = shared.weights;
  for (const char* buffer : {"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"}) shared_trained.erase(buffer);
  CHECK(max_relative_error(trained, shared_trained) == 0);
}

TEST_CASE("gradients that simulated GPUs hold are summed between the ranks' GPUs and never cross MPI",
          "[distributed][train][device]") {
  const uint64_t seed = shared_seed("device collectives");
  const int steps = 20;
  for (const char* optimizer : {"sgd", "adam"})
    for (const char* model : {kMixed, kBlock}) {
      INFO(optimizer << " on " << model);
      const std::string yaml = write_model("device", model);
      const TrainingSpec spec = spec_with(optimizer);
      const Run want =
          train(yaml, spec, seed, {.distributed = false, .placed = true, .global_batch = 4 * job()->size()});
      const Run got = train(yaml, spec, seed, {.placed = true, .steps = steps});
      check_same_training(got, want);
      CHECK(same_on_every_rank(got.weights));
      REQUIRE(got.on_devices);
      // what the GPUs hold went between them, each replica with its counterparts; the cpu's
      // parameters (the table, fc0) alone crossed MPI
      const bool block = model == kBlock;
      const size_t held = block ? 2 * bytes_of(got.weights, {"block.fc1.weight", "block.fc1.bias", "block.fc2.weight",
                                                             "block.fc2.bias"})
                                : bytes_of(got.weights, {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"});
      const size_t hosted = block ? bytes_of(got.weights, {"fc0.weight", "fc0.bias"}) : bytes_of(got.weights, {"table.weight"});
      CHECK(got.traffic.on_devices == held * steps);
      CHECK(got.traffic.over_mpi == hosted * steps);
      // the communicators say so too: they ran, and summed those bytes
      CHECK(got.device_collectives.bytes == held * steps);
      CHECK(got.device_collectives.collectives >= steps);

      // the knob: everything over MPI, the same training within rounding
      RunOptions off{.placed = true, .steps = steps};
      off.ddp.device_collectives = false;
      const Run host = train(yaml, spec, seed, off);
      CHECK_FALSE(host.on_devices);
      CHECK(host.traffic.on_devices == 0);
      CHECK(host.device_collectives.collectives == 0);
      CHECK(host.traffic.over_mpi == (hosted + (block ? held / 2 : held)) * steps);
      check_same_training(host, got);
    }
}

TEST_CASE("device buckets follow the caps and train alike from a parameter per bucket to one bucket",
          "[distributed][train][device]") {
  const uint64_t seed = shared_seed("device bucket caps");
  const std::string yaml = write_model("device_caps", kMixed);
  const TrainingSpec spec = spec_with("adam");
  const Run want = train(yaml, spec, seed, {.distributed = false, .placed = true, .global_batch = 4 * job()->size()});
  std::vector<Run> runs;
  for (size_t cap : {size_t{4}, size_t{1} << 30}) {
    INFO("bucket cap " << cap << " bytes");
    RunOptions o{.placed = true};
    o.ddp.bucket_cap_bytes = cap;
    runs.push_back(train(yaml, spec, seed, o));
    check_same_training(runs.back(), want);
    CHECK(runs.back().on_devices);
  }
  // fc1 and fc2 are on two GPUs: at least a bucket each per step; a parameter a bucket: four
  CHECK(runs[0].device_collectives.collectives == 4 * 20);
  CHECK(runs[1].device_collectives.collectives == 2 * 20);
  // a sum's order does not depend on the buckets: the same bits
  CHECK(max_relative_error(runs[0].weights, runs[1].weights) == 0);
}

TEST_CASE("ranks with other GPUs than rank 0's all keep the host path, and train alike", "[distributed][train][device]") {
  const uint64_t seed = shared_seed("ranks with other GPUs");
  const std::string yaml = write_model("other_gpus", kMlp);
  const int rank = job()->rank(), ranks = job()->size();
  Model model = Model::load(yaml);
  // rank 0 alone has simulated GPUs (its layers stay on the cpu: the file names none)
  if (rank == 0) model.use_devices(sim_gpus(2), policy());
  model.init_parameters(seed + static_cast<uint64_t>(rank));
  Trainer trainer(model, spec_with("sgd"));
  trainer.distribute(job());
  REQUIRE(trainer.distributed() != nullptr);
  CHECK_FALSE(trainer.distributed()->reduces_on_devices());
  const int steps = 3;
  for (int step = 0; step < steps; ++step) {
    TensorMap batch = global_batch(model, 4 * ranks, seed * 1000 + static_cast<uint64_t>(step));
    std::vector<MicroBatch> parts = split_micro_batches(batch, ranks, model.graph());
    trainer.step(parts[static_cast<size_t>(rank)].batch);
  }
  size_t all = 0;
  for (const auto& [name, t] : model.parameters()) all += t.nbytes();
  CHECK(trainer.distributed()->gradient_traffic().over_mpi == all * steps);
  CHECK(trainer.distributed()->gradient_traffic().on_devices == 0);
  TensorMap weights;
  for (const auto& [name, t] : model.parameters()) weights.emplace(name, t.clone());
  CHECK(same_on_every_rank(weights));
}

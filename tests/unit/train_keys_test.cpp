// Every key of a model file's train: section takes effect in `tandem train`, and a flag
// given on the command line overrides it, both ways (model_file_keys_support.h says how).
#include "model_file_keys_support.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

using Set = std::function<void(TrainingSpec&, Graph&)>;

void check_train_key(const char* test, const std::string& key, const KeyValue& a, const KeyValue& b) {
  KeyFixture fixture(test);
  fixture.check_key("train", key, a, b);
}

OptimizerConfig adam() {
  OptimizerConfig o;
  o.name = "adam";
  o.lr = 0.001;
  return o;
}

}  // namespace

TEST_CASE("train: epochs from the file, or --epochs over it", "[train][keys]") {
  check_train_key("train: epochs", "epochs", {"2", [](TrainingSpec& s, Graph&) { s.epochs = 2; }, "--epochs 2"},
                  {"3", [](TrainingSpec& s, Graph&) { s.epochs = 3; }, "--epochs 3"});
}

TEST_CASE("train: batch from the file, or --batch over it", "[train][keys]") {
  check_train_key("train: batch", "batch", {"4", [](TrainingSpec& s, Graph&) { s.batch = 4; }, "--batch 4"},
                  {"5", [](TrainingSpec& s, Graph&) { s.batch = 5; }, "--batch 5"});
}

TEST_CASE("train: accumulate from the file, or --accumulate over it", "[train][keys]") {
  // a step takes accumulate x batch samples: fewer steps, other weights
  check_train_key("train: accumulate", "accumulate",
                  {"2", [](TrainingSpec& s, Graph&) { s.accumulate = 2; }, "--accumulate 2"},
                  {"3", [](TrainingSpec& s, Graph&) { s.accumulate = 3; }, "--accumulate 3"});
}

TEST_CASE("train: shuffle from the file, or --shuffle / --no-shuffle over it", "[train][keys]") {
  check_train_key("train: shuffle", "shuffle", {"true", [](TrainingSpec& s, Graph&) { s.shuffle = true; }, "--shuffle"},
                  {"false", [](TrainingSpec& s, Graph&) { s.shuffle = false; }, "--no-shuffle"});
}

TEST_CASE("train: shuffle left out shuffles, as documented", "[train][keys]") {
  check_train_key("train: shuffle left out", "shuffle",
                  {"", [](TrainingSpec& s, Graph&) { s.shuffle = true; }, "--shuffle"},
                  {"false", [](TrainingSpec& s, Graph&) { s.shuffle = false; }, "--no-shuffle"});
}

TEST_CASE("train: drop_last from the file, or --drop-last / --keep-last over it", "[train][keys]") {
  KeyFixture fixture("train: drop_last");
  fixture.base.train["batch"] = "5";  // of 12 samples: the last batch has 2
  fixture.base_spec.batch = 5;
  fixture.check_key("train", "drop_last",
                    {"true", [](TrainingSpec& s, Graph&) { s.drop_last = true; }, "--drop-last"},
                    {"false", [](TrainingSpec& s, Graph&) { s.drop_last = false; }, "--keep-last"});
}

TEST_CASE("train: seed from the file, or --seed over it", "[train][keys]") {
  check_train_key("train: seed", "seed", {"3", [](TrainingSpec& s, Graph&) { s.seed = 3; }, "--seed 3"},
                  {"4", [](TrainingSpec& s, Graph&) { s.seed = 4; }, "--seed 4"});
}

TEST_CASE("train: validation_split from the file, or --validation-split over it", "[train][keys]") {
  check_train_key("train: validation_split", "validation_split",
                  {"", [](TrainingSpec& s, Graph&) { s.validation_split = 0; }, "--validation-split 0"},
                  {"0.25", [](TrainingSpec& s, Graph&) { s.validation_split = 0.25; }, "--validation-split 0.25"});
}

TEST_CASE("train: optimizer name from the file, or --optimizer over it", "[train][keys]") {
  // each with its own defaults, as --optimizer takes them
  check_train_key("train: optimizer name", "optimizer",
                  {"{name: sgd}", [](TrainingSpec& s, Graph&) { s.optimizer = OptimizerConfig{}; }, "--optimizer sgd"},
                  {"{name: adam}", [](TrainingSpec& s, Graph&) { s.optimizer = adam(); }, "--optimizer adam"});
}

TEST_CASE("train: optimizer lr from the file, or --lr over it", "[train][keys]") {
  check_train_key("train: optimizer lr", "optimizer",
                  {"{name: sgd, lr: 0.1}", [](TrainingSpec& s, Graph&) { s.optimizer.lr = 0.1; }, "--lr 0.1"},
                  {"{name: sgd, lr: 0.3}", [](TrainingSpec& s, Graph&) { s.optimizer.lr = 0.3; }, "--lr 0.3"});
}

TEST_CASE("train: optimizer momentum", "[train][keys]") {
  check_train_key("train: optimizer momentum", "optimizer",
                  {"{name: sgd, lr: 0.1}", [](TrainingSpec& s, Graph&) { s.optimizer.momentum = 0; }},
                  {"{name: sgd, lr: 0.1, momentum: 0.9}", [](TrainingSpec& s, Graph&) { s.optimizer.momentum = 0.9; }});
}

TEST_CASE("train: optimizer dampening", "[train][keys]") {
  auto with = [](double dampening) {
    return [dampening](TrainingSpec& s, Graph&) {
      s.optimizer.momentum = 0.9;
      s.optimizer.dampening = dampening;
    };
  };
  check_train_key("train: optimizer dampening", "optimizer", {"{name: sgd, lr: 0.1, momentum: 0.9}", with(0)},
                  {"{name: sgd, lr: 0.1, momentum: 0.9, dampening: 0.5}", with(0.5)});
}

TEST_CASE("train: optimizer nesterov", "[train][keys]") {
  auto with = [](bool nesterov) {
    return [nesterov](TrainingSpec& s, Graph&) {
      s.optimizer.momentum = 0.9;
      s.optimizer.nesterov = nesterov;
    };
  };
  check_train_key("train: optimizer nesterov", "optimizer", {"{name: sgd, lr: 0.1, momentum: 0.9}", with(false)},
                  {"{name: sgd, lr: 0.1, momentum: 0.9, nesterov: true}", with(true)});
}

TEST_CASE("train: optimizer weight_decay of sgd, adam and adamw", "[train][keys]") {
  check_train_key("train: sgd weight_decay", "optimizer",
                  {"{name: sgd, lr: 0.1}", [](TrainingSpec& s, Graph&) { s.optimizer.weight_decay = 0; }},
                  {"{name: sgd, lr: 0.1, weight_decay: 0.5}",
                   [](TrainingSpec& s, Graph&) { s.optimizer.weight_decay = 0.5; }});
  check_train_key("train: adam weight_decay", "optimizer",
                  {"{name: adam, lr: 0.1}",
                   [](TrainingSpec& s, Graph&) {
                     s.optimizer = adam();
                     s.optimizer.lr = 0.1;
                   }},
                  {"{name: adam, lr: 0.1, weight_decay: 0.5}", [](TrainingSpec& s, Graph&) {
                     s.optimizer = adam();
                     s.optimizer.lr = 0.1;
                     s.optimizer.weight_decay = 0.5;
                   }});
  auto adamw = [](double weight_decay) {
    return [weight_decay](TrainingSpec& s, Graph&) {
      s.optimizer = adam();
      s.optimizer.name = "adamw";
      s.optimizer.lr = 0.1;
      s.optimizer.weight_decay = weight_decay;
    };
  };
  check_train_key("train: adamw weight_decay", "optimizer", {"{name: adamw, lr: 0.1}", adamw(0.01)},
                  {"{name: adamw, lr: 0.1, weight_decay: 0.5}", adamw(0.5)});
}

TEST_CASE("train: optimizer betas", "[train][keys]") {
  auto with = [](double beta1, double beta2) {
    return [beta1, beta2](TrainingSpec& s, Graph&) {
      s.optimizer = adam();
      s.optimizer.lr = 0.1;
      s.optimizer.beta1 = beta1;
      s.optimizer.beta2 = beta2;
    };
  };
  check_train_key("train: optimizer betas", "optimizer", {"{name: adam, lr: 0.1}", with(0.9, 0.999)},
                  {"{name: adam, lr: 0.1, betas: [0.5, 0.9]}", with(0.5, 0.9)});
}

TEST_CASE("train: optimizer eps", "[train][keys]") {
  auto with = [](double eps) {
    return [eps](TrainingSpec& s, Graph&) {
      s.optimizer = adam();
      s.optimizer.lr = 0.1;
      s.optimizer.eps = eps;
    };
  };
  check_train_key("train: optimizer eps", "optimizer", {"{name: adam, lr: 0.1}", with(1e-8)},
                  {"{name: adam, lr: 0.1, eps: 0.5}", with(0.5)});
}

TEST_CASE("train: schedule name", "[train][keys]") {
  check_train_key("train: schedule name", "schedule",
                  {"", [](TrainingSpec& s, Graph&) { s.schedule = ScheduleConfig{}; }},
                  {"{name: cosine}", [](TrainingSpec& s, Graph&) { s.schedule.name = "cosine"; }});
}

TEST_CASE("train: schedule step_size and gamma", "[train][keys]") {
  auto step = [](int64_t step_size, double gamma) {
    return [step_size, gamma](TrainingSpec& s, Graph&) {
      s.schedule.name = "step";
      s.schedule.step_size = step_size;
      s.schedule.gamma = gamma;
    };
  };
  check_train_key("train: schedule step_size", "schedule", {"{name: step, step_size: 1, gamma: 0.5}", step(1, 0.5)},
                  {"{name: step, step_size: 3, gamma: 0.5}", step(3, 0.5)});
  check_train_key("train: schedule gamma", "schedule", {"{name: step, step_size: 1}", step(1, 0.1)},
                  {"{name: step, step_size: 1, gamma: 0.5}", step(1, 0.5)});
}

TEST_CASE("train: schedule warmup_steps, total_steps and min_lr", "[train][keys]") {
  auto cosine = [](int64_t warmup, int64_t total, double min_lr) {
    return [warmup, total, min_lr](TrainingSpec& s, Graph&) {
      s.schedule.name = "cosine";
      s.schedule.warmup_steps = warmup;
      s.schedule.total_steps = total;
      s.schedule.min_lr = min_lr;
    };
  };
  check_train_key("train: schedule warmup_steps", "schedule", {"{name: cosine}", cosine(0, 0, 0)},
                  {"{name: cosine, warmup_steps: 3}", cosine(3, 0, 0)});
  check_train_key("train: schedule total_steps", "schedule", {"{name: cosine}", cosine(0, 0, 0)},
                  {"{name: cosine, total_steps: 30}", cosine(0, 30, 0)});
  check_train_key("train: schedule min_lr", "schedule", {"{name: cosine}", cosine(0, 0, 0)},
                  {"{name: cosine, min_lr: 0.08}", cosine(0, 0, 0.08)});
}

TEST_CASE("train: clip_grad_norm", "[train][keys]") {
  check_train_key("train: clip_grad_norm", "clip_grad_norm",
                  {"", [](TrainingSpec& s, Graph&) { s.clip_grad_norm.reset(); }},
                  {"0.01", [](TrainingSpec& s, Graph&) { s.clip_grad_norm = 0.01; }});
}

TEST_CASE("train: data path from the file, or --data over it", "[train][keys]") {
  KeyFixture fixture("train: data path");
  const std::string other = write_random_csv("other.csv", fixture.rng);
  fixture.check_key("train", "data",
                    {"{path: " + fixture.data + "}", [&](TrainingSpec& s, Graph&) { s.data->path = fixture.data; },
                     "--data " + fixture.data},
                    {"{path: " + other + "}", [&](TrainingSpec& s, Graph&) { s.data->path = other; }, "--data " + other});
  std::filesystem::remove(other);
}

TEST_CASE("train: data header and columns", "[train][keys]") {
  KeyFixture fixture("train: data header and columns");
  const std::string d = fixture.data;
  // with header: true the columns are read by the header's names: here the two labels swapped
  const std::string headed = scratch_file("headed.csv");
  {
    std::ifstream in(d);
    std::ofstream out(headed);
    out << "x_0,x_1,x_2,x_3,other_label,label\n" << in.rdbuf();
  }
  fixture.check_key("train", "data", {"{path: " + d + "}", [](TrainingSpec& s, Graph&) { s.data->header = false; }},
                    {"{path: " + headed + ", header: true}", [&](TrainingSpec& s, Graph&) {
                       s.data->path = headed;
                       s.data->header = true;
                     }});
  std::filesystem::remove(headed);
  // the two label columns swapped
  fixture.check_key("train", "data", {"{path: " + d + "}", [](TrainingSpec& s, Graph&) { s.data->columns.clear(); }},
                    {"{path: " + d + ", columns: {x: \"0:4\", label: \"5\", other_label: \"4\"}}",
                     [](TrainingSpec& s, Graph&) {
                       s.data->columns = {{"x", "0:4"}, {"label", "5"}, {"other_label", "4"}};
                     }});
}

TEST_CASE("train: data format reads a file whatever its name", "[train][keys]") {
  KeyFixture fixture("train: data format");
  const std::string text = scratch_file("data.txt");
  std::filesystem::copy_file(fixture.data, text);
  Sections s = fixture.base;
  s.train["data"] = "{path: " + text + ", format: csv}";
  const std::string as_csv = fixture.write_model(s, "csv");
  CHECK(distance(train_cli(as_csv, ""), fixture.reference({"", [](TrainingSpec&, Graph&) {}})) <= same_run);
  s.train["data"] = "{path: " + text + ", format: safetensors}";
  const std::string as_safetensors = fixture.write_model(s, "safetensors");
  int code = 0;
  const std::string out = run_cli("train " + as_safetensors, &code, "env -u TANDEM_SIM_GPUS ");
  CHECK(code == 2);
  CHECK_THAT(out, Catch::Contains(text) && Catch::Contains("safetensors"));
  for (const std::string& f : {text, as_csv, as_safetensors}) std::filesystem::remove(f);
}

TEST_CASE("train: accumulate below 1 is refused at its line, and so is --accumulate 0", "[train][keys]") {
  const std::string path = scratch_file("accumulate0.yaml");
  std::ofstream(path) << "name: acc\ninputs:\n  x: {shape: [batch, 4]}\ntargets:\n  y: {shape: [batch, 2]}\nlayers:\n"
                         "  - {name: fc, op: linear, in_features: 4, out_features: 2}\n"
                         "loss: {op: mse_loss, input: fc, target: y}\ntrain: {batch: 4, accumulate: 0}\n";
  int code = 0;
  std::string out = run_cli("check " + path, &code);
  CHECK(code == 2);
  CHECK_THAT(out, Catch::Contains("accumulate0.yaml:9:") && Catch::Contains("train accumulate must be at least 1"));
  std::ofstream(path) << "name: acc\ninputs:\n  x: {shape: [batch, 4]}\ntargets:\n  y: {shape: [batch, 2]}\nlayers:\n"
                         "  - {name: fc, op: linear, in_features: 4, out_features: 2}\n"
                         "loss: {op: mse_loss, input: fc, target: y}\n";
  out = run_cli("train " + path + " --accumulate 0 --bench-steps 1", &code);
  CHECK(code == 2);
  CHECK_THAT(out, Catch::Contains("--accumulate must be at least 1"));
  std::filesystem::remove(path);
}

TEST_CASE("train: --micro-batches below 1, or over a batch norm, is refused with exit code 2, the header says the micro-batches",
          "[train][keys]") {
  const std::string path = scratch_file("micro_batches.yaml");
  std::ofstream(path) << "name: mb\ninputs:\n  x: {shape: [batch, 4]}\ntargets:\n  y: {shape: [batch, 2]}\nlayers:\n"
                         "  - {name: fc, op: linear, in_features: 4, out_features: 2}\n"
                         "loss: {op: mse_loss, input: fc, target: y}\ntrain: {batch: 6}\n";
  int code = 0;
  std::string out = run_cli("train " + path + " --micro-batches 0 --bench-steps 1", &code);
  CHECK(code == 2);
  CHECK_THAT(out, Catch::Contains("--micro-batches must be at least 1"));
  out = run_cli("train " + path + " --micro-batches 3 --bench-steps 2", &code);
  CHECK(code == 0);
  CHECK_THAT(out, Catch::Contains("batch 6 in 3 pipelined micro-batches"));
  std::ofstream(path) << "name: mb\ninputs:\n  x: {shape: [batch, 2, 2, 2]}\ntargets:\n  y: {shape: [batch, 8]}\nlayers:\n"
                         "  - {name: norm, op: batch_norm2d, num_features: 2}\n  - {name: flat, op: flatten}\n"
                         "loss: {op: mse_loss, input: flat, target: y}\ntrain: {batch: 6}\n";
  out = run_cli("train " + path + " --micro-batches 2 --bench-steps 1", &code);
  CHECK(code == 2);
  CHECK_THAT(out, Catch::Contains("--micro-batches 2") && Catch::Contains("layer 'norm' (batch_norm2d"));
  std::filesystem::remove(path);
}

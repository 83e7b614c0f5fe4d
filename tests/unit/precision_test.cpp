// precision: declared once on the model, overridden by blocks and layers and by
// --precision; only matrix work takes it; plan shows it; bad values are refused with their
// line; the cpu's bf16 results are fp32's to bf16's rounding, follow weights that change,
// and fall back to fp32 (with a note) where the CPU lacks avx512_bf16 or for fp16.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_precision.h"
#include "graph/load_graph.h"
#include "runtime/model.h"
#include "unit_test_support.h"

using namespace tandem;
using tandem::testing::run_cli;

namespace {

const char* kMixed = R"(name: mixed
precision: bf16
inputs:
  x: {shape: [batch, 64]}
layers:
  - {name: fc1, op: linear, in_features: 64, out_features: 64}
  - {name: act, op: relu}
  - name: head
    precision: fp32
    layers:
      - {name: fc, op: linear, in_features: 64, out_features: 64}
      - {name: half, op: linear, in_features: 64, out_features: 64, precision: bf16}
  - {name: probs, op: softmax, dim: -1}
)";

Precision precision_of(const Graph& g, const std::string& path) {
  for (const Node& n : g.nodes)
    if (n.path == path) return layer_precision(g, n);
  FAIL("no layer " << path);
  return Precision::fp32;
}

std::string write_temp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / (std::to_string(getpid()) + "-" + name);
  std::ofstream(path) << text;
  return path.string();
}

/// max |a - b| / max |b|.
double relative_error(const Tensor& a, const Tensor& b) {
  double diff = 0, scale = 0;
  auto x = a.span<float>(), y = b.span<float>();
  REQUIRE(x.size() == y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::abs(double(x[i]) - y[i]));
    scale = std::max(scale, std::abs(double(y[i])));
  }
  return diff / scale;
}

Tensor run(const std::string& config, Precision precision, const Bindings& bindings, uint64_t seed = 0) {
  Model model = Model::load(config);
  model.set_precision(precision);
  TensorMap out = model.forward(model.random_inputs(bindings, seed));
  return out.begin()->second;
}

const std::string kMlp = std::string(TANDEM_SOURCE_DIR) + "/configs/mlp_4x1024.yaml";

}  // namespace

TEST_CASE("a layer's precision is its own, else its block's, else the model's, and only matrix work takes it",
          "[precision]") {
  Graph g = load_graph_from_string(kMixed, "mixed.yaml");
  CHECK(g.precision == Precision::bf16);
  CHECK(precision_of(g, "fc1") == Precision::bf16);     // the model's
  CHECK(precision_of(g, "act") == Precision::fp32);     // not matrix work
  CHECK(precision_of(g, "head.fc") == Precision::fp32);  // its block's
  CHECK(precision_of(g, "head.half") == Precision::bf16);  // its own
  CHECK(precision_of(g, "probs") == Precision::fp32);   // softmax stays fp32
  // --precision replaces the model's, not what a block or layer declares
  g.precision = Precision::fp16;
  CHECK(precision_of(g, "fc1") == Precision::fp16);
  CHECK(precision_of(g, "head.fc") == Precision::fp32);
  CHECK(precision_of(g, "head.half") == Precision::bf16);
  // a model without the key is fp32
  CHECK(load_graph(kMlp).precision == Precision::fp32);
  CHECK(parse_precision("bfloat16") == Precision::bf16);
  CHECK_FALSE(parse_precision("half").has_value());
}

TEST_CASE("tandem plan shows each layer's precision, and --precision sets the model's", "[precision][cli]") {
  const std::string file = write_temp("mixed.yaml", kMixed);
  int code = 0;
  std::string out = run_cli("plan " + file + " --json", &code);
  REQUIRE(code == 0);
  nlohmann::json plan = nlohmann::json::parse(out);
  std::map<std::string, std::string> precision;
  for (const auto& l : plan["layers"]) precision[l["path"]] = l["precision"];
  // what runs: bf16 where the CPU has avx512_bf16, else fp32 (with the reason)
  const std::string bf16 = cpu::cpu_has_bf16() ? "bf16" : "fp32";
  CHECK(precision["fc1"] == bf16);
  CHECK(precision["act"] == "fp32");
  CHECK(precision["head.fc"] == "fp32");
  CHECK(precision["head.half"] == bf16);
  out = run_cli("plan " + file + " --precision fp32", &code);
  REQUIRE(code == 0);
  CHECK_THAT(out, Catch::Contains("precision"));
  CHECK_THAT(out, Catch::Matches("(.|\n)*fc1 +linear +cpu +fp32(.|\n)*"));
  CHECK_THAT(out, Catch::Matches("(.|\n)*head.half +linear +cpu +" + bf16 + "(.|\n)*"));
  std::filesystem::remove(file);
}

TEST_CASE("a precision that is not one is refused with exit code 2", "[precision][cli][errors]") {
  for (const char* command : {"run", "train", "plan"}) {
    int code = 0;
    const std::string out = run_cli(std::string(command) + " " + kMlp + " --precision half", &code);
    INFO(command << ": " << out);
    CHECK(code == 2);
    CHECK_THAT(out, Catch::Contains("--precision 'half' is not a precision; use fp32, bf16 or fp16"));
  }
  const std::string file = write_temp("bad_precision.yaml", "name: m\nprecision: bf17\ninputs:\n  x: {shape: [batch, 4]}\n"
                                                            "layers:\n  - {op: relu}\n");
  int code = 0;
  const std::string out = run_cli("run " + file, &code);
  CHECK(code == 2);
  CHECK_THAT(out, Catch::Contains("bad_precision.yaml:2:12: unknown precision 'bf17'; use fp32, bf16 or fp16"));
  std::filesystem::remove(file);
}

TEST_CASE("the precision is set before the first pass", "[precision][errors]") {
  Model model = Model::load(kMlp);
  model.forward(model.random_inputs({{"batch", 2}}, 0));
  CHECK_THROWS_WITH(model.set_precision(Precision::bf16), Catch::Contains("before its first pass"));
  model.set_precision(Precision::fp32);  // what it already is: nothing to do
}

TEST_CASE("bf16 on the cpu is fp32 to bf16's rounding and follows changed weights", "[precision]") {
  if (!cpu::cpu_has_bf16()) {
    WARN("this CPU lacks avx512_bf16: bf16 runs in fp32 (tested below); nothing to compare");
    return;
  }
  for (int64_t batch : {1, 32}) {
    INFO("batch " << batch);
    const Tensor fp32 = run(kMlp, Precision::fp32, {{"batch", batch}});
    const Tensor bf16 = run(kMlp, Precision::bf16, {{"batch", batch}});
    const double err = relative_error(bf16, fp32);
    CHECK(err > 0);  // it did run in bf16
    CHECK(err <= 1e-2);
  }
  // new weights: the cached bf16 copies are rebuilt (inference reorders a weight read twice)
  Model model = Model::load(kMlp);
  model.set_precision(Precision::bf16);
  const TensorMap x = model.random_inputs({{"batch", 8}}, 1);
  for (int i = 0; i < 3; ++i) model.forward(x);
  Model other = Model::load(kMlp);
  other.init_parameters(7);
  model.set_weights(other.parameters());
  other.set_precision(Precision::bf16);
  CHECK(relative_error(model.forward(x).at("head"), other.forward(x).at("head")) == 0);
}

TEST_CASE("without avx512_bf16, and for fp16, the cpu runs fp32 and says so", "[precision][cli]") {
  int code = 0;
  const std::string fp32 = run_cli("run " + kMlp + " --batch 2 --json", &code);
  REQUIRE(code == 0);
  const std::string values = nlohmann::json::parse(fp32)["outputs"]["head"]["values"].dump();
  // ONEDNN_MAX_CPU_ISA lowers what oneDNN may use below avx512_bf16, as an older CPU has
  for (const std::string& how : {std::string("ONEDNN_MAX_CPU_ISA=AVX512_CORE ") + TANDEM_CLI + " run " + kMlp +
                                     " --precision bf16",
                                 std::string(TANDEM_CLI) + " run " + kMlp + " --precision fp16"}) {
    INFO(how);
    const std::string cmd = how + " --batch 2 --json 2>&1";
    FILE* pipe = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
    CHECK(pclose(pipe) == 0);
    const size_t json_start = out.find('{');
    REQUIRE(json_start != std::string::npos);
    CHECK_THAT(out.substr(0, json_start), Catch::Contains("tandem: note:") && Catch::Contains("run in fp32"));
    CHECK(nlohmann::json::parse(out.substr(json_start))["outputs"]["head"]["values"].dump() == values);
  }
}

TEST_CASE("a bf16 model placed on a simulated GPU computes what it computes on the cpu", "[precision][cli]") {
  // a simulated GPU computes with the cpu's kernels, precision included: the same bits
  int code = 0;
  const std::string on_cpu = run_cli("run " + kMlp + " --batch 4 --precision bf16 --json", &code);
  REQUIRE(code == 0);
  const std::string placed =
      run_cli("run " + kMlp + " --batch 4 --precision bf16 --sim-gpus 1 --place '*=cuda:0' --json", &code);
  REQUIRE(code == 0);
  auto values = [](const std::string& out) {
    return nlohmann::json::parse(out.substr(out.find('{')))["outputs"]["head"]["values"].dump();
  };
  CHECK(values(placed) == values(on_cpu));
  // and it ran bf16 where the CPU has it (without avx512_bf16 it runs fp32: the same bits)
  const std::string fp32 = run_cli("run " + kMlp + " --batch 4 --json", &code);
  if (cpu::cpu_has_bf16())
    CHECK(values(fp32) != values(on_cpu));
  else
    CHECK(values(fp32) == values(on_cpu));
}

// A linear or matmul of at most 2048 multiply-adds runs as the cpu's plain fp32 loop under
// bf16 (cpu::kernel_precision, the one rule the kernels follow): `tandem plan` shows the
// precision that runs, with the reason, and the kernel's output is fp32's to the bit.
TEST_CASE("tandem plan shows the precision each layer's kernel runs in, and why a small layer keeps fp32",
          "[precision][cli]") {
  const std::string file = write_temp("small_head.yaml", R"(name: small_head
inputs:
  x: {shape: [batch, 64]}
layers:
  - {name: body, op: linear, in_features: 64, out_features: 64}
  - {name: act, op: relu}
  - {name: head, op: linear, in_features: 64, out_features: 2}
)");
  const std::string big = cpu::cpu_has_bf16() ? "bf16" : "fp32";
  for (const std::string& where : {std::string(""), std::string(" --sim-gpus 1 --place '*=cuda:0'")}) {
    INFO("plan" << where);
    int code = 0;
    // batch 4: the head is 4*2*64 = 512 multiply-adds, the body 16384
    nlohmann::json plan = nlohmann::json::parse(run_cli("plan " + file + " --precision bf16 --batch 4 --json" + where, &code));
    REQUIRE(code == 0);
    std::map<std::string, nlohmann::json> layer;
    for (const auto& l : plan["layers"]) layer[l["path"]] = l;
    CHECK(layer["body"]["precision"] == big);
    CHECK(layer["act"]["precision"] == "fp32");
    CHECK(layer["head"]["precision"] == "fp32");
    if (cpu::cpu_has_bf16()) {
      CHECK(layer["body"]["precision_reason"] == "");
      CHECK(layer["head"]["precision_reason"] == "512 multiply-adds: small enough for the fp32 loop");
    }
    // batch 32: 4096 multiply-adds, past the loop's 2048: the head runs bf16 too
    plan = nlohmann::json::parse(run_cli("plan " + file + " --precision bf16 --batch 32 --json" + where, &code));
    REQUIRE(code == 0);
    for (const auto& l : plan["layers"])
      if (l["path"] == "head") CHECK(l["precision"] == big);
    // the table says it too
    const std::string table = run_cli("plan " + file + " --precision bf16 --batch 4" + where, &code);
    REQUIRE(code == 0);
    // without avx512_bf16 the reason is the CPU's, for every layer (checked below)
    if (cpu::cpu_has_bf16())
      CHECK_THAT(table, Catch::Matches("(.|\n)*\nhead +linear +cu?[a-z]+:?[0-9]* +fp32 .*fp32: 512 multiply-adds: "
                                       "small enough for the fp32 loop\n(.|\n)*"));
    else
      CHECK_THAT(table, Catch::Matches("(.|\n)*\nhead +linear +cu?[a-z]+:?[0-9]* +fp32 .*fp32: (.|\n)*"));
  }
  // the kernel runs what the plan says: the small head's bf16 output is its fp32 output to
  // the bit; at batch 32 it runs bf16, and differs where the CPU has bf16
  const std::string head_only = write_temp("head_only.yaml", R"(name: head_only
inputs:
  x: {shape: [batch, 64]}
layers:
  - {name: head, op: linear, in_features: 64, out_features: 2}
)");
  CHECK(relative_error(run(head_only, Precision::bf16, {{"batch", 4}}, 3), run(head_only, Precision::fp32, {{"batch", 4}}, 3)) == 0);
  const double at_32 =
      relative_error(run(head_only, Precision::bf16, {{"batch", 32}}, 3), run(head_only, Precision::fp32, {{"batch", 32}}, 3));
  if (cpu::cpu_has_bf16()) CHECK(at_32 > 0);
  CHECK(at_32 <= 1e-2);
  // without avx512_bf16 every layer runs fp32, and the plan says why
  int code = 0;
  const std::string out =
      run_cli("plan " + file + " --precision bf16 --batch 32 --json", &code, "ONEDNN_MAX_CPU_ISA=AVX512_CORE ");
  const nlohmann::json plan = nlohmann::json::parse(out.substr(out.find('{')));
  REQUIRE(code == 0);
  for (const auto& l : plan["layers"]) {
    INFO(l["path"]);
    CHECK(l["precision"] == "fp32");
    if (l["op"] == "linear") CHECK(l["precision_reason"] == "this CPU lacks avx512_bf16");
  }
  std::filesystem::remove(file);
  std::filesystem::remove(head_only);
}

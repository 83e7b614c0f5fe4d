// place(): every policy, --place precedence, inheritance, copies, estimates and errors,
// on graphs loaded from YAML strings and simulated inventories. No hardware.
#include <catch2/catch.hpp>

#include "core/error.h"
#include "graph/load_graph.h"
#include "core/memory_size.h"
#include "placement/place.h"
#include "placement/replicate.h"
#include "placement/plan_dot.h"

using namespace tandem;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

constexpr size_t GiB = size_t{1} << 30;

DeviceInventory inventory(int gpus, size_t gpu_bytes = 16 * GiB) {
  DeviceInventory inv;
  inv.devices[0].memory_bytes = 64 * GiB;
  for (int i = 0; i < gpus; ++i) inv.devices.push_back({Device::cuda(i), gpu_bytes, true, "simulated GPU"});
  return inv;
}

Graph load(const std::string& yaml) { return load_graph_from_string(yaml, "test.yaml"); }

const OpStep& step_of(const Graph& g, const Plan& p, const std::string& path) {
  for (const OpStep& s : p.steps)
    if (g.nodes[s.node].path == path) return s;
  FAIL("no layer " << path);
  return p.steps.front();
}

std::vector<CopyStep> copies_of(const Graph& g, const Plan& p, const std::string& value, bool forward) {
  std::vector<CopyStep> out;
  for (const CopyStep& c : p.copies)
    if (g.values[c.value].name == value && c.forward == forward) out.push_back(c);
  return out;
}

const DeviceEstimate& estimate_of(const Plan& p, Device d) {
  for (const DeviceEstimate& e : p.estimates)
    if (e.device == d) return e;
  FAIL("no estimate for " << d.str());
  return p.estimates.front();
}

const char* kMixed = R"(
name: seed_mixed
inputs:
  tokens: {shape: [batch], dtype: int64}
layers:
  - {name: embedding, op: embedding, num_embeddings: 1000, embedding_dim: 10, device: cpu}
  - {name: rnn, op: linear, in_features: 10, out_features: 10, device: cuda:0}
)";

const char* kPlainMixed = R"(
name: plain_mixed
inputs:
  tokens: {shape: [batch], dtype: int64}
layers:
  - {name: embedding, op: embedding, num_embeddings: 1000, embedding_dim: 10}
  - {name: fc, op: linear, in_features: 10, out_features: 10}
)";

// Six linear layers of 100x100: 40400 parameter bytes each, 400 activation bytes at batch 1.
const char* kMlp6 = R"(
name: mlp6
inputs:
  x: {shape: [batch, 100]}
layers:
  - {name: l0, op: linear, in_features: 100, out_features: 100}
  - {name: l1, op: linear, in_features: 100, out_features: 100}
  - {name: l2, op: linear, in_features: 100, out_features: 100}
  - {name: l3, op: linear, in_features: 100, out_features: 100}
  - {name: l4, op: linear, in_features: 100, out_features: 100}
  - {name: l5, op: linear, in_features: 100, out_features: 100}
)";

const char* kBlocks = R"(
name: blocks
inputs:
  x: {shape: [batch, 8]}
layers:
  - name: enc
    device: cuda:1
    layers:
      - {name: fc1, op: linear, in_features: 8, out_features: 8}
      - {name: fc2, op: linear, in_features: 8, out_features: 8}
  - {name: head, op: linear, in_features: 8, out_features: 4}
)";

}  // namespace

TEST_CASE("the seeds' mixed model gets one forward copy cpu to cuda:0 and its gradient backward") {
  Graph g = load(kMixed);
  PlacementPolicy policy;
  policy.batch = 8;
  policy.training = true;
  Plan p = place(g, inventory(1), policy);
  CHECK(step_of(g, p, "embedding").device == Device::cpu());
  CHECK(step_of(g, p, "embedding").reason == "device: cpu on the layer");
  CHECK(step_of(g, p, "rnn").device == Device::cuda(0));
  CHECK(step_of(g, p, "rnn").reason == "device: cuda:0 on the layer");

  int forward_to_gpu = 0;
  for (const CopyStep& c : p.copies)
    if (c.forward && c.from == Device::cpu() && c.to == Device::cuda(0)) ++forward_to_gpu;
  CHECK(forward_to_gpu == 1);
  auto fwd = copies_of(g, p, "embedding", true);
  REQUIRE(fwd.size() == 1);
  CHECK(fwd[0].bytes == 8 * 10 * 4);
  CHECK(fwd[0].before_step == 1);
  auto bwd = copies_of(g, p, "embedding", false);
  REQUIRE(bwd.size() == 1);
  CHECK(bwd[0].from == Device::cuda(0));
  CHECK(bwd[0].to == Device::cpu());
  CHECK(bwd[0].bytes == 8 * 10 * 4);
  // the token ids are read on the cpu where they live: no copy; no gradient for them
  CHECK(copies_of(g, p, "tokens", true).empty());
  CHECK(copies_of(g, p, "tokens", false).empty());
  REQUIRE(p.segments.size() == 2);
  CHECK(p.segments[0].device == Device::cpu());
  CHECK(p.segments[1].device == Device::cuda(0));
}

TEST_CASE("inference gathers outputs to the cpu and has no backward copies") {
  Graph g = load(kMixed);
  PlacementPolicy policy;
  policy.batch = 4;
  Plan p = place(g, inventory(1), policy);
  auto gather = copies_of(g, p, "rnn", true);
  REQUIRE(gather.size() == 1);
  CHECK(gather[0].from == Device::cuda(0));
  CHECK(gather[0].to == Device::cpu());
  CHECK(gather[0].before_step == 2);
  CHECK_THAT(gather[0].reason, Contains("gathered to the cpu"));
  for (const CopyStep& c : p.copies) CHECK(c.forward);
}

TEST_CASE("children inherit device from their block and the reason names the block") {
  Graph g = load(kBlocks);
  Plan p = place(g, inventory(2), {});
  CHECK(step_of(g, p, "enc.fc1").device == Device::cuda(1));
  CHECK(step_of(g, p, "enc.fc2").reason == "device: cuda:1 on block 'enc'");
  CHECK(step_of(g, p, "head").device == Device::cpu());
  CHECK(step_of(g, p, "head").reason == "no device: or --place -> cpu");
  // x crosses to cuda:1 once; enc's output comes back for head; head's output is on the cpu
  CHECK(copies_of(g, p, "x", true).size() == 1);
  CHECK(copies_of(g, p, "enc.fc2", true).size() == 1);
  CHECK(copies_of(g, p, "head", true).empty());
}

TEST_CASE("place overrides beat device annotations and later overrides win") {
  Graph g = load(kBlocks);
  PlacementPolicy policy;
  policy.place_overrides = {{"enc.*", Device::cuda(0)}, {"enc.fc2", Device::cpu()}};
  Plan p = place(g, inventory(2), policy);
  CHECK(step_of(g, p, "enc.fc1").device == Device::cuda(0));
  CHECK(step_of(g, p, "enc.fc1").reason == "--place enc.*=cuda:0");
  CHECK(step_of(g, p, "enc.fc2").device == Device::cpu());
  CHECK(step_of(g, p, "enc.fc2").reason == "--place enc.fc2=cpu");

  SECTION("a pattern naming a block moves its children") {
    policy.place_overrides = {{"enc", Device::cuda(0)}};
    Plan q = place(g, inventory(2), policy);
    CHECK(step_of(g, q, "enc.fc1").device == Device::cuda(0));
    CHECK(step_of(g, q, "enc.fc2").device == Device::cuda(0));
    CHECK(step_of(g, q, "head").device == Device::cpu());
  }
  SECTION("the last matching override wins even when it is broader") {
    policy.place_overrides = {{"enc.fc2", Device::cpu()}, {"*", Device::cuda(1)}};
    Plan q = place(g, inventory(2), policy);
    for (const OpStep& s : q.steps) CHECK(s.device == Device::cuda(1));
  }
}

TEST_CASE("glob_match: star crosses dots and the whole path must match") {
  CHECK(glob_match("enc.*", "enc.fc"));
  CHECK(glob_match("enc.*", "enc.0.fc"));
  CHECK_FALSE(glob_match("enc.*", "encoder.fc"));
  CHECK_FALSE(glob_match("enc", "enc.fc"));
  CHECK(glob_match("*.fc", "a.b.fc"));
  CHECK(glob_match("layer?", "layer3"));
  CHECK(glob_match("blk.[0-2].fc", "blk.1.fc"));
  CHECK_FALSE(glob_match("blk.[!0-2].fc", "blk.1.fc"));
  CHECK(glob_match("*", ""));
  CHECK(glob_match("a*b*c", "aXXbYYc"));
  CHECK_FALSE(glob_match("a*b*c", "aXXbYY"));
}

TEST_CASE("a tensor read by two layers on cuda:1 is copied once") {
  Graph g = load(R"(
name: fanout
inputs:
  x: {shape: [batch, 4]}
layers:
  - {name: a, op: linear, in_features: 4, out_features: 6, device: cpu}
  - {name: b, op: linear, in_features: 6, out_features: 3, inputs: a, device: cuda:1}
  - {name: c, op: linear, in_features: 6, out_features: 3, inputs: a, device: cuda:1}
  - {name: s, op: add, inputs: [b, c], device: cuda:1}
)");
  PlacementPolicy policy;
  policy.batch = 5;
  policy.training = true;
  Plan p = place(g, inventory(2), policy);
  auto fwd = copies_of(g, p, "a", true);
  REQUIRE(fwd.size() == 1);
  CHECK(fwd[0].to == Device::cuda(1));
  CHECK(fwd[0].bytes == 5 * 6 * 4);
  CHECK(fwd[0].before_step == 1);
  CHECK(copies_of(g, p, "a", false).size() == 1);
}

TEST_CASE("no copies when everything is on one device") {
  Graph g = load(kMlp6);
  PlacementPolicy policy;
  policy.training = true;
  Plan p = place(g, inventory(0), policy);
  CHECK(p.copies.empty());
  REQUIRE(p.segments.size() == 1);
  CHECK(p.segments[0].end_step == 6);
}

TEST_CASE("balanced fills cuda:0 then cuda:1 and spills to the cpu") {
  Graph g = load(kMlp6);
  PlacementPolicy policy;
  policy.name = "balanced";
  policy.max_memory = 90000;  // two layers of 40800 bytes per GPU
  Plan p = place(g, inventory(2), policy);
  CHECK(step_of(g, p, "l0").device == Device::cuda(0));
  CHECK(step_of(g, p, "l1").device == Device::cuda(0));
  CHECK(step_of(g, p, "l2").device == Device::cuda(1));
  CHECK(step_of(g, p, "l3").device == Device::cuda(1));
  CHECK(step_of(g, p, "l4").device == Device::cpu());
  CHECK(step_of(g, p, "l5").device == Device::cpu());
  // l0: its parameters (40,000 + 400 bytes, the bias rounded to 448 as the pool counts it), its
  // output and x copied in (400 bytes each, 448 counted); l1: parameters and output
  CHECK(step_of(g, p, "l1").reason == "balanced: fits on cuda:0 (80.3 KiB of 87.9 KiB)");
  CHECK_THAT(step_of(g, p, "l4").reason, StartsWith("balanced: does not fit on any GPU"));
  CHECK_THAT(step_of(g, p, "l4").reason, Contains("-> cpu"));
  CHECK(p.segments.size() == 3);

  SECTION("with the devices' capacity as the budget everything goes on cuda:0") {
    policy.max_memory.reset();
    Plan q = place(g, inventory(2), policy);
    for (const OpStep& s : q.steps) CHECK(s.device == Device::cuda(0));
    CHECK_THAT(q.steps[0].reason, Contains("of 16.0 GiB"));
  }
  SECTION("pinned layers count against their device") {
    Graph pinned = load(std::string(kMlp6).replace(std::string(kMlp6).find("out_features: 100}"), 18,
                                                    "out_features: 100, device: cuda:0}"));
    Plan q = place(pinned, inventory(2), policy);
    CHECK(step_of(pinned, q, "l0").device == Device::cuda(0));
    CHECK(step_of(pinned, q, "l1").device == Device::cuda(0));
    CHECK(step_of(pinned, q, "l2").device == Device::cuda(1));
  }
}

TEST_CASE("balanced with no GPU puts everything on the cpu with a note") {
  Graph g = load(kMlp6);
  PlacementPolicy policy;
  policy.name = "balanced";
  Plan p = place(g, inventory(0), policy);
  for (const OpStep& s : p.steps) {
    CHECK(s.device == Device::cpu());
    CHECK(s.reason == "balanced: no GPU -> cpu");
  }
  REQUIRE_FALSE(p.notes.empty());
  CHECK_THAT(p.notes[0], Contains("no GPU"));
}

TEST_CASE("training needs more memory than inference") {
  Graph g = load(kMlp6);
  PlacementPolicy policy;
  policy.name = "balanced";
  policy.batch = 16;
  Plan inference = place(g, inventory(1), policy);
  policy.training = true;
  Plan training = place(g, inventory(1), policy);
  const DeviceEstimate& i = estimate_of(inference, Device::cuda(0));
  const DeviceEstimate& t = estimate_of(training, Device::cuda(0));
  // a layer's parameters as the pools count them: the weight's 40,000 bytes, the bias's 400 rounded to 448
  const size_t layer = 40000 + 448;
  CHECK(i.parameter_bytes == 6 * layer);
  CHECK(i.gradient_bytes == 0);
  CHECK(i.optimizer_bytes == 0);
  CHECK(t.parameter_bytes == 6 * layer);
  // the parameters' gradients, and during backward an output's and an input's gradient
  CHECK(t.gradient_bytes == 6 * layer + 2 * 16 * 100 * 4);
  // no cpu layer reads these parameters: the GPU holds them, with Adam's two moments
  // (runtime/params/device_parameter_cache.h); the host keeps its copy and state too
  CHECK(t.optimizer_bytes == 2 * 6 * layer);
  const DeviceEstimate& host = estimate_of(training, Device::cpu());
  CHECK(host.parameter_bytes == 6 * layer);       // the master copy
  CHECK(host.optimizer_bytes == 2 * 6 * layer);   // Adam's two moments
  CHECK(host.gradient_bytes >= 2 * 6 * layer);    // the master gradients, and the GPU's on their way
  // a GPU counts all six outputs and x's copy either way: in inference the host may have
  // submitted the whole pass before the GPU's queue frees the first; training keeps them,
  // and the next batch's x, uploaded during the step (Note [the next batch ahead])
  CHECK(i.activation_bytes == 7 * 16 * 100 * 4);
  CHECK(t.activation_bytes == 8 * 16 * 100 * 4);
  // the cpu in inference: x, held by the caller and read by the copy to the GPU (whose
  // queue the host submits ahead of), and the output copied back, which the caller gets
  CHECK(estimate_of(inference, Device::cpu()).activation_bytes == 2 * 16 * 100 * 4);
  CHECK(t.peak_bytes > i.peak_bytes);
  CHECK(i.peak_bytes == i.parameter_bytes + i.activation_bytes);

  SECTION("balanced spills earlier when training") {
    policy.max_memory = 200000;
    Plan spill_train = place(g, inventory(1), policy);
    policy.training = false;
    Plan spill_infer = place(g, inventory(1), policy);
    auto on_gpu = [](const Plan& p) {
      int n = 0;
      for (const OpStep& s : p.steps) n += s.device == Device::cuda(0);
      return n;
    };
    CHECK(on_gpu(spill_train) == 1);  // 4 x 40400 + 6400 per layer
    CHECK(on_gpu(spill_infer) == 4);  // 40400 + 6400 per layer
  }
}

TEST_CASE("embeddings-on-cpu keeps tables on the cpu and the rest on the GPUs") {
  Graph g = load(kPlainMixed);
  PlacementPolicy policy;
  policy.name = "embeddings-on-cpu";
  policy.batch = 2;
  Plan p = place(g, inventory(2), policy);
  CHECK(step_of(g, p, "embedding").device == Device::cpu());
  CHECK(step_of(g, p, "embedding").reason == "embeddings-on-cpu: embedding table");
  CHECK(step_of(g, p, "fc").device == Device::cuda(0));
  CHECK_THAT(step_of(g, p, "fc").reason, StartsWith("embeddings-on-cpu: fits on cuda:0"));
  REQUIRE(copies_of(g, p, "embedding", true).size() == 1);
  CHECK(copies_of(g, p, "embedding", true)[0].bytes == 2 * 10 * 4);
}

TEST_CASE("annotations policy puts undeclared layers on the cpu even with GPUs") {
  Graph g = load(kPlainMixed);
  Plan p = place(g, inventory(2), {});
  for (const OpStep& s : p.steps) CHECK(s.device == Device::cpu());
  CHECK(p.copies.empty());
}

TEST_CASE("cpu fallback for an op the device cannot run") {
  Graph g = load(kPlainMixed);
  PlacementPolicy policy;
  policy.name = "balanced";
  policy.cannot_run = [](Device d, const Graph&, const Node& node, const Bindings& bindings) -> std::string {
    CHECK(bindings.at("batch") == 1);
    return node.op == "embedding" ? "no kernel for op 'embedding'" : "";
  };
  Plan p = place(g, inventory(1), policy);
  CHECK(step_of(g, p, "embedding").device == Device::cpu());
  CHECK_THAT(step_of(g, p, "embedding").reason, Contains("cuda:0 cannot run it (no kernel for op 'embedding') -> cpu"));
  CHECK(step_of(g, p, "fc").device == Device::cuda(0));
}

TEST_CASE("data_parallel blocks become scatter then replicas then gather") {
  Graph g = load(R"(
name: seed_nested_dp
inputs:
  x: {shape: [batch, 10]}
layers:
  - {name: block1, op: linear, in_features: 10, out_features: 20, device: cpu}
  - name: block2
    data_parallel: {devices: [cuda:0, cuda:1], output_device: cuda:1, dim: 0}
    layers:
      - {name: fc, op: linear, in_features: 20, out_features: 20}
  - {name: block3, op: linear, in_features: 20, out_features: 20, device: cuda:0}
)");
  PlacementPolicy policy;
  policy.batch = 5;  // torch.chunk: 3 + 2
  Plan p = place(g, inventory(2), policy);
  REQUIRE(p.graph);
  const Graph& r = *p.graph;
  CHECK(step_of(r, p, "block2@scatter0(block1)").device == Device::cpu());  // where its input is
  CHECK(step_of(r, p, "block2@scatter1(block1)").device == Device::cpu());
  CHECK(step_of(r, p, "block2.fc@0").device == Device::cuda(0));
  CHECK(step_of(r, p, "block2.fc@1").device == Device::cuda(1));
  CHECK_THAT(step_of(r, p, "block2.fc@1").reason, Contains("replica 2/2 of data_parallel 'block2'"));
  CHECK(step_of(r, p, "block2@gather(block2.fc)").device == Device::cuda(1));
  CHECK(step_of(r, p, "block3").device == Device::cuda(0));
  // the chunks cross once each, replica 0's output goes to the output device, the
  // gathered output on to block3; the replicas share the block's parameters
  CHECK(copies_of(r, p, "block2@scatter0(block1)", true).at(0).bytes == 3 * 20 * 4);
  CHECK(copies_of(r, p, "block2@scatter1(block1)", true).at(0).bytes == 2 * 20 * 4);
  CHECK(copies_of(r, p, "block2.fc@0", true).at(0).to == Device::cuda(1));
  CHECK(copies_of(r, p, "block2.fc@1", true).empty());
  CHECK(copies_of(r, p, "block2.fc", true).at(0).to == Device::cuda(0));
  CHECK(r.nodes[step_of(r, p, "block2.fc@1").node].params.at(0).name == "block2.fc.weight");
  // the original value keeps its id: the gather produces it
  CHECK(r.values[r.nodes[step_of(r, p, "block2@gather(block2.fc)").node].output].name == "block2.fc");

  policy.batch = 1;  // fewer rows than devices: one replica
  Plan one = place(g, inventory(2), policy);
  int replicas = 0;
  for (const OpStep& s : one.steps) replicas += one.graph->nodes[s.node].op == "linear" &&
                                                one.graph->nodes[s.node].replica.has_value();
  CHECK(replicas == 1);
  CHECK_THROWS_WITH(place(g, inventory(1), {}), Contains("test.yaml:7:5: data_parallel block 'block2' lists cuda:1 in its devices, but this machine has cpu, cuda:0; "
                             "run it on simulated GPUs with --sim-gpus 2, or on the cpu with --place '*=cpu'"));
}

TEST_CASE("chunking memory sizes the chunks by each device's memory") {
  using V = std::vector<int64_t>;
  CHECK(chunks_by_memory(10, {2, 1, 1}) == V{5, 3, 2});
  CHECK(chunks_by_memory(9, {16, 8}) == V{6, 3});
  CHECK(chunks_by_memory(2, {100, 1, 1}) == V{1, 1});  // fewer rows than devices
  CHECK(chunks_by_memory(4, {1000, 1, 1}) == V{2, 1, 1});
  Graph g = load(R"(
name: by_memory
inputs:
  x: {shape: [batch, 4]}
layers:
  - name: body
    data_parallel: {devices: [cuda:0, cuda:1], chunking: memory}
    layers:
      - {name: fc, op: linear, in_features: 4, out_features: 4}
)");
  DeviceInventory inv = inventory(2);
  inv.devices[1].memory_bytes = 16 * GiB;
  inv.devices[2].memory_bytes = 8 * GiB;
  PlacementPolicy policy;
  policy.batch = 9;
  Plan p = place(g, inv, policy);
  CHECK(copies_of(*p.graph, p, "body@scatter0(x)", true).at(0).bytes == 6 * 4 * 4);
  CHECK(copies_of(*p.graph, p, "body@scatter1(x)", true).at(0).bytes == 3 * 4 * 4);

  const std::string head = "name: m\ninputs:\n  x: {shape: [batch, 4]}\nlayers:\n  - name: body\n    data_parallel: ";
  const std::string body = "\n    layers:\n      - {name: fc, op: linear, in_features: 4, out_features: 4}\n";
  CHECK_THROWS_WITH(load(head + "{devices: [cuda:0, cuda:1], chunking: fast}" + body),
                    Contains("test.yaml:6:") && Contains("chunking must be equal (torch.chunk's sizes) or memory"));
  CHECK_THROWS_WITH(load(head + "{devices: [cuda:0, cuda:1], chunk_sizes: [1, 2], chunking: memory}" + body),
                    Contains("chunking: memory and chunk_sizes both size the chunks; keep one"));
}

TEST_CASE("data_parallel chunks are torch.chunk's unless chunk_sizes says otherwise") {
  using V = std::vector<int64_t>;
  CHECK(data_parallel_chunks(30, 2, {}, "b") == V{15, 15});
  CHECK(data_parallel_chunks(10, 4, {}, "b") == V{3, 3, 3, 1});
  CHECK(data_parallel_chunks(10, 3, {}, "b") == V{4, 4, 2});
  CHECK(data_parallel_chunks(6, 4, {}, "b") == V{2, 2, 2});  // three chunks: one device idle
  CHECK(data_parallel_chunks(3, 4, {}, "b") == V{1, 1, 1});
  CHECK(data_parallel_chunks(1, 2, {}, "b") == V{1});
  CHECK(data_parallel_chunks(10, 2, {7, 3}, "b") == V{7, 3});
  CHECK_THROWS_WITH(data_parallel_chunks(10, 2, {7, 4}, "enc"),
                    Contains("data_parallel block 'enc': chunk_sizes add up to 11, but the batch being scattered has 10"));
  CHECK_THROWS_WITH(data_parallel_chunks(10, 2, {4, 3, 3}, "enc"), Contains("3 chunks for 2 devices"));
}

TEST_CASE("a device that does not exist is refused with a clear message") {
  Graph g = load(R"(
name: missing
inputs:
  x: {shape: [batch, 8]}
layers:
  - name: enc
    device: cuda:3
    layers:
      - {name: fc, op: linear, in_features: 8, out_features: 8}
)");
  CHECK_THROWS_AS(place(g, inventory(2), {}), UserError);
  CHECK_THROWS_WITH(place(g, inventory(2), {}),
                    "test.yaml:9:9: layer 'enc.fc' is placed on cuda:3 (device: on block 'enc'), but this machine has "
                    "cpu, cuda:0, cuda:1; run it on simulated GPUs with --sim-gpus 4, or on the cpu with --place '*=cpu'");
  PlacementPolicy policy;
  policy.place_overrides = {{"enc.fc", Device::cuda(7)}};
  CHECK_THROWS_WITH(place(g, inventory(2), policy), Contains("(--place enc.fc=cuda:7)"));
  policy.place_overrides = {{"enc.fc", Device::cuda(1)}};
  CHECK_NOTHROW(place(g, inventory(2), policy));
}

TEST_CASE("a layer pinned to a GPU too small for its parameters is refused") {
  Graph g = load(R"(
name: big
inputs:
  x: {shape: [batch, 1000]}
layers:
  - {name: big, op: linear, in_features: 1000, out_features: 1000, device: cuda:0}
)");
  CHECK_THROWS_AS(place(g, inventory(1, 1 << 20), {}), UserError);
  CHECK_THROWS_WITH(place(g, inventory(1, 1 << 20), {}),
                    Contains("layer 'big' is placed on cuda:0") && Contains("parameters alone need 3.8 MiB") &&
                        Contains("cuda:0 has 1.0 MiB"));
  CHECK_NOTHROW(place(g, inventory(1, 8 << 20), {}));
}

TEST_CASE("an unbound symbol counts as 1 with a note and can be bound") {
  Graph g = load(R"(
name: seq
inputs:
  x: {shape: [batch, seq, 4]}
layers:
  - {name: fc, op: linear, in_features: 4, out_features: 4, device: cuda:0}
)");
  PlacementPolicy policy;
  policy.batch = 2;
  Plan p = place(g, inventory(1), policy);
  CHECK(copies_of(g, p, "x", true)[0].bytes == 2 * 1 * 4 * 4);
  REQUIRE_FALSE(p.notes.empty());
  CHECK_THAT(p.notes[0], Contains("symbol 'seq'"));
  policy.bindings["seq"] = 7;
  Plan q = place(g, inventory(1), policy);
  CHECK(copies_of(g, q, "x", true)[0].bytes == 2 * 7 * 4 * 4);
  CHECK(q.notes.empty());
}

TEST_CASE("the placement key is parsed and applied") {
  Graph g = load(std::string(kMlp6) + "placement: {policy: balanced, max_memory: 90000}\n");
  REQUIRE(g.placement);
  CHECK(g.placement->policy == "balanced");
  PlacementPolicy policy;
  apply_placement_spec(*g.placement, policy);
  CHECK(policy.name == "balanced");
  CHECK(policy.max_memory == size_t{90000});
  Plan p = place(g, inventory(2), policy);
  CHECK(step_of(g, p, "l5").device == Device::cpu());

  Graph short_form = load(std::string(kMlp6) + "placement: embeddings-on-cpu\n");
  REQUIRE(short_form.placement);
  CHECK(short_form.placement->policy == "embeddings-on-cpu");
  CHECK_FALSE(short_form.placement->max_memory);

  CHECK_THROWS_WITH(load(std::string(kMlp6) + "placement: balancd\n"),
                    StartsWith("test.yaml:12:12: unknown placement policy 'balancd'") &&
                        Contains("did you mean"));
  CHECK_THROWS_WITH(load(std::string(kMlp6) + "placement: {policy: balanced, maxmem: 1}\n"),
                    Contains("unknown key of placement 'maxmem'"));
  Graph bad_size = load(std::string(kMlp6) + "placement: {policy: balanced, max_memory: 8 parsecs}\n");
  PlacementPolicy q;
  CHECK_THROWS_WITH(apply_placement_spec(*bad_size.placement, q),
                    StartsWith("test.yaml:12:43: placement max_memory '8 parsecs': ") && Contains("8 parsecs"));
}

TEST_CASE("the dot drawing has a cluster per device and dashed copies") {
  Graph g = load(kMixed);
  Plan p = place(g, inventory(1), {});
  std::string dot = plan_to_dot(g, p);
  CHECK_THAT(dot, StartsWith("digraph"));
  CHECK_THAT(dot, Contains("cluster_cpu"));
  CHECK_THAT(dot, Contains("cluster_cuda:0"));
  CHECK_THAT(dot, Contains("\"layer:embedding\" -> \"layer:rnn\" [style=dashed"));
}

TEST_CASE("plan_on_cpu: everything on the cpu, with the declared device in the reason") {
  Graph g = load(kMixed);
  Plan p = plan_on_cpu(g);
  REQUIRE(p.steps.size() == 2);
  for (const OpStep& s : p.steps) CHECK(s.device == Device::cpu());
  CHECK_THAT(p.steps[1].reason, Contains("declared cuda:0"));
  CHECK(p.copies.empty());
}

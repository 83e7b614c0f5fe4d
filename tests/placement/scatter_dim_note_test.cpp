// A data_parallel block that scatters along a dimension other than its batch's is not an
// error (it may be meant) but is said (issue 30, item 4): check and plan print a note, and
// the plan's scatter steps show the dim and each chunk's shape. Also the place_on_cpu plan
// (--place '*=cpu'), which needs no GPU.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "graph/batch_dim.h"
#include "graph/load_graph.h"
#include "placement/place.h"

using namespace tandem;
using Catch::Matchers::Contains;

namespace {

const char* kSequenceFirst = R"(name: seq_first
inputs:
  tokens: {shape: [16, batch], dtype: int64, high: 10}
layers:
  - name: net
    data_parallel: {devices: [cuda:0, cuda:1]}
    layers:
      - {name: emb, op: embedding, num_embeddings: 10, embedding_dim: 8}
      - {name: attn, op: multi_head_attention, embed_dim: 8, num_heads: 2}
)";

DeviceInventory two_gpus() {
  DeviceInventory inv;
  inv.devices[0].memory_bytes = size_t{1} << 34;
  for (int i = 0; i < 2; ++i) inv.devices.push_back({Device::cuda(i), size_t{1} << 34, true, "simulated GPU"});
  return inv;
}

std::string run_cli(const std::string& args, int* code) {
  FILE* pipe = popen((std::string(TANDEM_CLI) + " " + args + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = pclose(pipe);
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

}  // namespace

TEST_CASE("a block scattered along a dim that is not the batch's gets a note in check and plan") {
  const Graph g = load_graph_from_string(kSequenceFirst, "seq.yaml");
  const std::vector<std::string> notes = scatter_dim_notes(g);
  REQUIRE(notes.size() == 1);
  CHECK_THAT(notes[0], Contains("data_parallel block 'net' scatters 'tokens' [16, batch] along dim 0 (16), not along its "
                                "batch (dim 1)") && Contains("set dim: 1"));
  PlacementPolicy policy;
  policy.batch = 3;
  const Plan plan = place(g, two_gpus(), policy);
  CHECK(std::find(plan.notes.begin(), plan.notes.end(), notes[0]) != plan.notes.end());
  const Graph& r = executed_graph(plan, g);
  int scatters = 0;
  for (const OpStep& s : plan.steps)
    if (r.nodes[s.node].path.find("@scatter") != std::string::npos) {
      ++scatters;
      CHECK_THAT(s.reason, Contains("dim 0, [8, 3] of [16, batch]"));
    }
  CHECK(scatters == 2);

  // scattered along the batch: no note
  std::string along = kSequenceFirst;
  along.replace(along.find("cuda:1]}"), 8, "cuda:1], dim: 1}");
  CHECK(scatter_dim_notes(load_graph_from_string(along, "seq.yaml")).empty());

  // the CLI says it too
  const std::string file =
      (std::filesystem::temp_directory_path() / ("tandem_seq_first_" + std::to_string(getpid()) + ".yaml")).string();
  std::ofstream(file) << kSequenceFirst;
  int code = 0;
  std::string out = run_cli("check " + file, &code);
  CHECK(code == 0);
  CHECK_THAT(out, Contains("note: " + notes[0]));
  out = run_cli("plan " + file + " --sim-gpus 2 --batch 3", &code);
  CHECK(code == 0);
  CHECK_THAT(out, Contains("note: " + notes[0]));
  std::filesystem::remove(file);
}

TEST_CASE("place_on_cpu puts every layer and data_parallel block on the cpu without GPUs") {
  const Graph g = load_graph_from_string(kSequenceFirst, "seq.yaml");
  PlacementPolicy policy;
  policy.place_overrides = {{"*", Device::cpu()}};
  const Plan plan = place_on_cpu(g, DeviceInventory{}, policy);  // no GPU in the inventory
  REQUIRE(plan.steps.size() == g.nodes.size());
  for (const OpStep& s : plan.steps) {
    CHECK(s.device == Device::cpu());
    CHECK_THAT(s.reason, Contains("data_parallel 'net' as one replica on the cpu"));
  }
  CHECK(plan.copies.empty());
  REQUIRE(plan.estimates.size() == 1);
  CHECK(plan.estimates[0].device == Device::cpu());
  CHECK(plan.estimates[0].parameter_bytes > 0);
}

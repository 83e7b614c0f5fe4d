// `tandem plan` shows what `tandem run` runs (issue 30, item 2): for every combination of
// --sim-gpus, --place and the file's device: and data_parallel:, the devices the plan puts
// layers on are the devices the run keeps busy, or both refuse with the same message.
// --place '*=cpu', which every "no such GPU" message offers, works in both.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "multidevice_support.h"

using namespace tandem::testing;

namespace {

std::string first_error(const std::string& out) {
  const size_t at = out.find("error: ");
  return at == std::string::npos ? "" : out.substr(at, out.find('\n', at) - at);
}

}  // namespace

TEST_CASE("plan and run agree on the devices for every combination of flags and the file's devices",
          "[multidevice][placement]") {
  const std::string model = GENERATE(as<std::string>{}, "dp_tutorial", "seed_nested_dp", "seed_mixed");
  const std::string flags = GENERATE(as<std::string>{}, "", "--sim-gpus 2", "--sim-gpus 3", "--place '*=cpu'",
                                     "--sim-gpus 2 --place '*=cpu'", "--sim-gpus 2 --place '*=cuda:1'",
                                     "--sim-gpus 2 --place 'block1=cuda:1'", "--sim-gpus 2 --place '*=cpu' --report");
  INFO(model << " " << flags);
  const std::string file = std::string(TANDEM_SOURCE_DIR) + "/configs/" + model + ".yaml";
  int plan_code = 0, run_code = 0;
  const std::string plan = run_program(std::string(TANDEM_CLI) + " plan " + file + " --batch 4 --json " +
                                           (flags.find("--report") == std::string::npos ? flags : flags.substr(0, flags.find(" --report"))),
                                       &plan_code);
  const std::string run =
      run_program(std::string(TANDEM_CLI) + " run " + file + " --batch 4 --json --report " + flags, &run_code);
  INFO("plan: " << plan.substr(0, 2000));
  INFO("run: " << run.substr(0, 2000));
  REQUIRE(plan_code == run_code);
  CHECK(plan.find("internal error") == std::string::npos);
  CHECK(run.find("internal error") == std::string::npos);
  if (plan_code != 0) {
    CHECK(plan_code == 2);
    CHECK(first_error(plan) == first_error(run));
    CHECK(!first_error(plan).empty());
    return;
  }
  std::set<std::string> planned, busy;
  const nlohmann::json planned_json = nlohmann::json::parse(plan);
  for (const auto& layer : planned_json["layers"]) planned.insert(layer["device"].get<std::string>());
  const nlohmann::json ran = nlohmann::json::parse(run);
  for (const auto& d : ran["devices"])
    if (d["busy_ms"].get<double>() > 0) busy.insert(d["device"].get<std::string>());
  CHECK(planned == busy);
  // the report always has the cpu's row, on the cpu alone too
  bool cpu_row = false;
  for (const auto& d : ran["devices"]) cpu_row = cpu_row || d["device"] == "cpu";
  CHECK(cpu_row);
  if (flags.find("'*=cpu'") != std::string::npos) CHECK(planned == std::set<std::string>{"cpu"});
}

// --threads on every subcommand, and what `tandem devices` says of the cpu's threads: how
// many, who chose them, and how they wait (runtime/threads.h, Note [waiting threads]).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <string>

#include "unit_test_support.h"

using tandem::testing::run_cli;

namespace {

/// `tandem devices --json`'s cpu entry, run with `prefix` (environment) and `flags`.
nlohmann::json cpu_entry(const std::string& prefix, const std::string& flags = "") {
  int code = -1;
  const std::string out =
      run_cli("devices --json " + flags, &code, "env -u OMP_NUM_THREADS -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT " + prefix + " ");
  INFO(out);
  REQUIRE(code == 0);
  const nlohmann::json j = nlohmann::json::parse(out);
  return j.at("devices").at(0);
}

std::string config(const char* name) { return std::string(TANDEM_SOURCE_DIR) + "/configs/" + name; }

}  // namespace

TEST_CASE("the cpu's threads: the usable cores by default, OMP_NUM_THREADS, or --threads, each named", "[cli][threads]") {
  const nlohmann::json plain = cpu_entry("");
  CHECK(plain.at("threads") == plain.at("usable_cores"));
  CHECK(plain.at("threads_chosen_by") == "the cores this process may run on");
  const nlohmann::json env = cpu_entry("OMP_NUM_THREADS=1");
  CHECK(env.at("threads") == 1);
  CHECK(env.at("threads_chosen_by") == "OMP_NUM_THREADS");
  const nlohmann::json flag = cpu_entry("OMP_NUM_THREADS=1", "--threads 3");
  CHECK(flag.at("threads") == 3);  // the flag wins over the environment
  CHECK(flag.at("threads_chosen_by") == "--threads");
}

TEST_CASE("OpenMP's threads spin briefly, then sleep, unless the environment chooses", "[cli][threads]") {
  CHECK(cpu_entry("").at("thread_wait_policy") == "spin 1000 rounds, then sleep (GOMP_SPINCOUNT=1000)");
  CHECK(cpu_entry("OMP_WAIT_POLICY=passive").at("thread_wait_policy") == "OMP_WAIT_POLICY=passive");
  // GOMP_SPINCOUNT is a choice too: left as it is
  CHECK(cpu_entry("GOMP_SPINCOUNT=50").at("thread_wait_policy") == "spin 50 rounds, then sleep (GOMP_SPINCOUNT=50)");
}

TEST_CASE("every subcommand takes --threads and a count out of range is refused", "[cli][threads]") {
  const std::string model = config("digits_mlp.yaml");
  for (const std::string& command : {"check " + model, "plan " + model, "run " + model + " --batch 4",
                                     "train " + model + " --bench-steps 2", std::string("devices")}) {
    INFO(command);
    int code = -1;
    const std::string ok = run_cli(command + " --threads 1", &code);
    CHECK(code == 0);
    const std::string bad = run_cli(command + " --threads 0", &code);
    CHECK(code == 2);
    CHECK_THAT(bad, Catch::Contains("--threads") && Catch::Contains("0"));
  }
}

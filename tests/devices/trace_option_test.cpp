// `--trace FILE` on run and train (backends/trace.h): every device's kernels, copies and
// the cpu's layers with their shapes and bytes, written as the run goes so that a run
// stopped at any moment leaves a whole JSON file; a path that cannot be written refused
// before any work.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "../unit/unit_test_support.h"

namespace {

using nlohmann::json;

std::string scratch(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("tandem-trace-" + std::to_string(getpid()) + "-" + name)).string();
}

std::string config(const char* name) { return std::string(TANDEM_SOURCE_DIR) + "/configs/" + name; }

/// The trace's slices by track: track name -> its slices.
std::map<std::string, std::vector<json>> slices_by_track(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in);
  const json trace = json::parse(in);  // throws, failing the test, when it is not whole JSON
  std::map<int, std::string> tracks;
  for (const json& e : trace.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "thread_name") tracks[e.at("tid").get<int>()] = e.at("args").at("name");
  std::map<std::string, std::vector<json>> out;
  for (const json& e : trace.at("traceEvents"))
    if (e.at("ph") == "X") out[tracks.at(e.at("tid").get<int>())].push_back(e);
  return out;
}

/// The first slice on `track` named `name`, or null.
const json* find_slice(const std::map<std::string, std::vector<json>>& slices, const std::string& track,
                       const std::string& name) {
  auto it = slices.find(track);
  if (it == slices.end()) return nullptr;
  for (const json& e : it->second)
    if (e.at("name") == name) return &e;
  return nullptr;
}

}  // namespace

TEST_CASE("tracing a training run puts the cpu's layers, forward and backward, with shapes and bytes on the timeline",
          "[trace][cli]") {
  const std::string path = scratch("train.json");
  int code = -1;
  const std::string out = tandem::testing::run_cli(
      "train " + config("digits_mlp.yaml") + " --bench-steps 3 --batch 16 --trace " + path, &code);
  REQUIRE(code == 0);
  const auto slices = slices_by_track(path);
  INFO(out);
  const json* forward = find_slice(slices, "cpu", "layer 'fc1' (linear) forward");
  REQUIRE(forward != nullptr);
  CHECK(forward->at("args").at("layer") == "fc1");
  CHECK(forward->at("args").at("op") == "linear");
  CHECK(forward->at("args").at("inputs") == json::parse("[[16, 64]]"));
  CHECK(forward->at("args").at("output") == json::parse("[16, 128]"));
  CHECK(forward->at("args").at("bytes") == (16 * 64 + 16 * 128) * 4);
  CHECK(forward->at("dur").get<double>() >= 0);
  const json* backward = find_slice(slices, "cpu", "layer 'fc1' (linear) backward");
  REQUIRE(backward != nullptr);
  CHECK(backward->at("ts").get<double>() > forward->at("ts").get<double>());
  // every step's forward of the first layer: 3 warm-up steps and the 3 timed
  int fc1_forwards = 0;
  for (const json& e : slices.at("cpu")) fc1_forwards += e.at("name") == "layer 'fc1' (linear) forward";
  CHECK(fc1_forwards == 6);
  CHECK(find_slice(slices, "host", "optimizer step") != nullptr);
  std::remove(path.c_str());
}

TEST_CASE("tracing a placed run names each copy's devices and bytes and each kernel's shapes", "[trace][cli]") {
  const std::string path = scratch("run.json");
  int code = -1;
  const std::string out = tandem::testing::run_cli(
      "run " + config("seed_nested_dp.yaml") + " --sim-gpus 2 --batch 8 --repeat 2 --trace " + path, &code);
  REQUIRE(code == 0);
  INFO(out);
  const auto slices = slices_by_track(path);
  int copies = 0, kernels = 0;
  for (const auto& [track, events] : slices)
    for (const json& e : events) {
      if (!e.contains("args")) continue;
      const json& a = e.at("args");
      if (a.contains("from")) {  // a copy
        ++copies;
        CHECK(a.at("bytes").get<int64_t>() > 0);
        CHECK(a.at("from") != a.at("to"));
      }
      if (a.contains("op")) {
        ++kernels;
        CHECK(a.at("device").get<std::string>() == track.substr(0, a.at("device").get<std::string>().size()));
        CHECK(!a.at("inputs").empty());
      }
    }
  CHECK(copies > 0);
  CHECK(kernels > 0);
  std::remove(path.c_str());
}

TEST_CASE("a run stopped by Ctrl-C or killed leaves a whole trace of what it did", "[trace][cli]") {
  for (int signal : {SIGINT, SIGKILL}) {
    INFO("signal " << signal);
    const std::string path = scratch("stopped-" + std::to_string(signal) + ".json");
    const std::string model = config("digits_mlp.yaml");
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {  // a long run, as a terminal would start it (Ctrl-C not ignored)
      std::signal(SIGINT, SIG_DFL);
      std::freopen("/dev/null", "w", stdout);
      execl(TANDEM_CLI, TANDEM_CLI, "train", model.c_str(), "--bench-steps", "1000000", "--trace", path.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    // stopped once its trace has grown past its first flushes
    for (int i = 0; i < 300 && (!std::filesystem::exists(path) || std::filesystem::file_size(path) < 20000); ++i)
      usleep(100000);
    kill(child, signal);
    int status = 0;
    waitpid(child, &status, 0);
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == signal);
    const auto slices = slices_by_track(path);  // parses: the file is whole
    REQUIRE(slices.count("cpu") == 1);
    CHECK(slices.at("cpu").size() > 10);
    std::remove(path.c_str());
  }
}

TEST_CASE("a --trace that cannot be written is refused before any work, with exit code 2", "[trace][cli]") {
  const std::string model = config("digits_mlp.yaml");
  struct Bad {
    std::string path, why;
  };
  for (const Bad& bad : {Bad{"/nonexistent-dir/trace.json", "does not exist"},
                         Bad{std::filesystem::temp_directory_path().string(), "is a directory"},
                         Bad{model, "the model file"}})
    for (const char* command : {"train", "run"}) {
      INFO(command << " --trace " << bad.path);
      const std::string extra = std::string(command) == "train" ? " --bench-steps 2" : " --batch 4";
      int code = -1;
      const std::string out =
          tandem::testing::run_cli(std::string(command) + " " + model + extra + " --trace " + bad.path, &code);
      CHECK(code == 2);
      CHECK_THAT(out, Catch::Contains("--trace '" + bad.path + "'") && Catch::Contains(bad.why));
      CHECK_THAT(out, !Catch::Contains("samples/s") && !Catch::Contains("output"));
    }
  // the model file is untouched
  std::ifstream in(model);
  std::string first_line;
  std::getline(in, first_line);
  CHECK_FALSE(first_line.empty());
}

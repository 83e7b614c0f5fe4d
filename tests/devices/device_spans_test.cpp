// Spans timed on a device (backends/device_spans.h), as the CUDA backend sends them: through
// the process's DeviceSpanSink, named by the submitting thread's label, on the host's clock
// at a known reference plus the device's elapsed milliseconds, in the same file and format
// as the host's spans. A fake span source stands for CUDA events here; the GPU test
// (tests/gpu/trace_test.cpp) checks the real ones.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "backends/device_spans.h"
#include "backends/trace.h"

namespace {

using nlohmann::json;
using tandem::DeviceSpanSink;
using tandem::Trace;

/// In a child process (the trace is the process's, started once): a host span around two
/// device spans on "cuda:0 compute" and one on "cuda:0 copies in", as a stream's recorder
/// sends them once the work has run. Exits 0 when every call behaved.
[[noreturn]] void write_trace(const std::string& path) {
  int status = 0;
  try {
    Trace::start(path, "--trace");
    DeviceSpanSink* sink = Trace::device_span_sink();
    if (!sink) _exit(3);
    std::string name, args;
    {
      tandem::HostSpan step("optimizer step");
      const Trace::Clock::time_point reference = Trace::Clock::now();
      {
        tandem::TraceLabel label("layer 'fc1' (linear)", "forward");
        tandem::TraceArgs traced(R"({"layer": "fc1", "bytes": 192})");
        name = sink->label();
        args = sink->args();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      // the device ran the work 2.0 to 5.5 ms and 6.0 to 9.25 ms after the reference
      sink->add("cuda:0 compute", name, tandem::after_reference(reference, 2.0), tandem::after_reference(reference, 5.5),
                args);
      sink->add("cuda:0 compute", "layer 'fc1' (linear) backward", tandem::after_reference(reference, 6.0),
                tandem::after_reference(reference, 9.25), "");
      sink->add("cuda:0 copies in", "x copy", tandem::after_reference(reference, 0.5),
                tandem::after_reference(reference, 1.5), "not json");
    }
    if (!Trace::active()->flush()) status = 4;
  } catch (...) {
    status = 5;
  }
  _exit(status);
}

}  // namespace

TEST_CASE("no sink for device spans without a trace", "[trace]") {
  // this test process starts no trace and its environment names none
  if (Trace::active() == nullptr) CHECK(Trace::device_span_sink() == nullptr);
}

TEST_CASE("device-timed spans land in the trace on their lanes' tracks, on the host's clock, named by the submitter",
          "[trace]") {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("tandem-device-spans-" + std::to_string(getpid()) + ".json")).string();
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) write_trace(path);
  int status = 0;
  waitpid(child, &status, 0);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);

  std::ifstream in(path);
  const json trace = json::parse(in);
  std::map<int, std::string> tracks;
  for (const json& e : trace.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "thread_name") tracks[e.at("tid").get<int>()] = e.at("args").at("name");
  std::map<std::string, std::vector<json>> slices;
  for (const json& e : trace.at("traceEvents"))
    if (e.at("ph") == "X") slices[tracks.at(e.at("tid").get<int>())].push_back(e);

  REQUIRE(slices["host"].size() == 1);
  REQUIRE(slices["cuda:0 compute"].size() == 2);
  REQUIRE(slices["cuda:0 copies in"].size() == 1);
  const json& step = slices["host"][0];
  const json& forward = slices["cuda:0 compute"][0];
  const json& backward = slices["cuda:0 compute"][1];
  const json& copy = slices["cuda:0 copies in"][0];
  CHECK(forward.at("name") == "layer 'fc1' (linear) forward");
  CHECK(forward.at("args").at("layer") == "fc1");
  CHECK(forward.at("args").at("bytes") == 192);
  CHECK(copy.at("args").at("args") == "not json");  // kept, as the host's slices keep theirs
  // durations as the device measured them (microseconds), placed after the reference
  CHECK(forward.at("dur").get<double>() == Approx(3500).margin(0.01));
  CHECK(backward.at("dur").get<double>() == Approx(3250).margin(0.01));
  CHECK(backward.at("ts").get<double>() - forward.at("ts").get<double>() == Approx(4000).margin(0.01));
  CHECK(forward.at("ts").get<double>() - copy.at("ts").get<double>() == Approx(1500).margin(0.01));
  // inside the host span they were recorded in (the reference was taken inside it)
  const double step_start = step.at("ts").get<double>(), step_end = step_start + step.at("dur").get<double>();
  for (const json* s : {&forward, &backward, &copy}) {
    CHECK(s->at("ts").get<double>() >= step_start);
    CHECK(s->at("ts").get<double>() + s->at("dur").get<double>() <= step_end);
  }
  std::remove(path.c_str());
}

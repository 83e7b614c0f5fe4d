// Host memory that runs out names the layer that asked and for what: the message said
// only "out of memory on cpu: asked for 781.2 MiB".
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "unit_test_support.h"

using tandem::testing::run_cli;

namespace {

/// A layer whose output at batch 2^22 is 16 TiB: more than any host, on any machine, gives.
/// `then_relu`: the output is a relu's, so `wide` lives in the buffers the forward reuses.
std::string wide_model(bool then_relu) {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("tandem-wide-" + std::to_string(getpid()) + (then_relu ? "-relu" : "") + ".yaml"))
                         .string();
  std::ofstream(path) << "name: wide\ninputs:\n  x: {shape: [batch, 2]}\nlayers:\n"
                      << "  - {name: wide, op: linear, in_features: 2, out_features: 1048576}\n"
                      << (then_relu ? "  - {name: act, op: relu}\n" : "");
  return path;
}

/// Whether asking for 512 GiB fails at once here: the kernel refuses an allocation past
/// RAM and swap unless it overcommits always (vm.overcommit_memory 1), when the pages
/// would be given and then touched, and the test would wake the OOM killer instead.
bool huge_allocation_fails() {
  std::ifstream overcommit("/proc/sys/vm/overcommit_memory");
  int mode = -1;
  overcommit >> mode;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  long long kib = 0;
  meminfo >> key >> kib;  // MemTotal: N kB
  return (mode == 0 || mode == 2) && key == "MemTotal:" && kib < (400LL << 20);
}

}  // namespace

TEST_CASE("host out of memory names the layer and the tensor it asked for", "[cli][host_memory]") {
  for (bool then_relu : {false, true}) {
    const std::string model = wide_model(then_relu);
    const std::string buffer = then_relu ? " (in a buffer that layers after it reuse)" : "";
    int code = 0;
    std::string out;
    if (huge_allocation_fails()) {  // 512 GiB: more than the host has, so the allocation itself fails
      out = run_cli("run " + model + " --batch 131072", &code, 120);
      INFO(out);
      CHECK(code == 2);
      CHECK_THAT(out, Catch::StartsWith("error: layer 'wide' (linear) output [131072, 1048576]" + buffer +
                                        ": out of memory on cpu: asked for 512.0 GiB"));
    } else {
      WARN("this machine overcommits memory always or has 400 GiB: the 512 GiB case is skipped");
    }
    // 16 TiB: past what one tensor may hold, refused before asking
    out = run_cli("run " + model + " --batch 4194304", &code, 120);
    CHECK(code == 2);
    CHECK_THAT(out, Catch::StartsWith("error: layer 'wide' (linear) output"));
    CHECK_THAT(out, Catch::Contains(": tensor of shape [" + std::string(then_relu ? "2199023255552" : "4194304, 1048576") +
                                    "] is larger than 1 TiB"));
    std::filesystem::remove(model);
  }
}

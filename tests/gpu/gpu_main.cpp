// The GPU tests' main: without a GPU, a test reports itself skipped (exit 77, which ctest
// shows as "Skipped" through SKIP_RETURN_CODE) and says why, instead of passing. Listing
// the tests (what catch_discover_tests does at build time) works everywhere.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "backends/cuda_devices.h"

int main(int argc, char** argv) {
  Catch::Session session;
  if (int status = session.applyCommandLine(argc, argv); status != 0) return status;
  const Catch::ConfigData& config = session.configData();
  const bool listing = config.listTests || config.listTestNamesOnly || config.listTags || config.listReporters ||
                       config.showHelp;
  if (!listing) {
    std::string why;
    if (tandem::cuda_devices(&why).empty()) {
      std::printf("SKIPPED: no GPU (%s); the CUDA backend's tests need one\n", why.c_str());
      return 77;
    }
  }
  return session.run();
}

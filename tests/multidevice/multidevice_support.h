// What the multi-device tests share: simulated GPU registries, policies, and comparisons of
// tensor maps (a placed or data-parallel model against the same model on the cpu).
#pragma once

#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "runtime/devices/device_registry.h"
#include "runtime/model.h"

namespace tandem::testing {

inline constexpr size_t MiB = size_t{1} << 20;

inline std::shared_ptr<DeviceRegistry> sim_gpus(int n, size_t memory = 256 * MiB) {
  return std::make_shared<DeviceRegistry>(DeviceOptions{.sim_gpus = n, .sim_gpu_memory = memory},
                                          std::vector<CudaDeviceInfo>{});
}

inline PlacementPolicy policy(std::string name = "annotations") {
  PlacementPolicy p;
  p.name = std::move(name);
  return p;
}

/// max |a - b| / max(|b|, 1e-6) over every float tensor of both maps (same names, shapes).
inline double max_relative_error(const TensorMap& a, const TensorMap& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (const auto& [name, t] : a) {
    INFO("tensor " << name);
    const Tensor& u = b.at(name);
    REQUIRE(t.shape() == u.shape());
    REQUIRE(t.device() == Device::cpu());
    REQUIRE(u.device() == Device::cpu());
    if (t.dtype() != DType::float32) continue;
    auto x = t.span<float>();
    auto y = u.span<float>();
    double scale = 1e-6;
    for (float v : y) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]) / scale);
  }
  return worst;
}

inline bool any_nonzero(const TensorMap& m) {
  for (const auto& [name, t] : m)
    if (t.dtype() == DType::float32)
      for (float v : t.span<float>())
        if (v != 0) return true;
  return false;
}

/// Runs `command` (stdout and stderr together) without TANDEM_SIM_GPUS from the
/// environment, so that only its own flags give it GPUs; `*code` is its exit status.
inline std::string run_program(const std::string& command, int* code) {
  FILE* pipe = popen(("env -u TANDEM_SIM_GPUS " + command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  int status = pclose(pipe);
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

}  // namespace tandem::testing

// SGD, Adam, AdamW, the schedules and clip_grad_norm against torch.optim, step by step.
// tests/optim/torch_optim_reference.py computes every case in one Python run, on random
// values from a fresh seed (printed; TANDEM_TEST_SEED=N repeats a run).
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "runtime/optim/optimizer.h"

namespace fs = std::filesystem;
using namespace tandem;

namespace {

template <class T>
std::vector<T> read_array(const fs::path& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  auto bytes = static_cast<size_t>(in.tellg());
  std::vector<T> out(bytes / sizeof(T));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size() * sizeof(T)));
  return out;
}

std::vector<std::string> read_lines(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

struct OptimizerCase {
  std::string name;
  OptimizerConfig config;
};

struct ScheduleCase {
  std::string name;
  ScheduleConfig config;
  double base_lr;
  int64_t steps;
};

struct ClipCase {
  std::string name;
  double max_norm, torch_norm;
};

/// Everything the Python run wrote; `available` false when /usr/bin/python3 has no torch.
struct Reference {
  bool available = false;
  uint64_t seed = 0;
  fs::path dir;
  std::vector<Shape> shapes;
  std::vector<OptimizerCase> optimizers;
  std::vector<ScheduleCase> schedules;
  std::vector<ClipCase> clips;
};

uint64_t test_seed() {
  if (const char* s = std::getenv("TANDEM_TEST_SEED")) return std::stoull(s);
  return std::random_device{}() % 1000000007;
}

Reference load_reference() {
  Reference ref;
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) return ref;
  ref.seed = test_seed();
  std::cout << "torch reference seed " << ref.seed << " (TANDEM_TEST_SEED=" << ref.seed << " repeats it)\n";
  ref.dir = fs::temp_directory_path() / ("tandem_optim_ref_" + std::to_string(::getpid()));
  fs::create_directories(ref.dir);
  std::string cmd = "/usr/bin/python3 " TANDEM_SOURCE_DIR "/tests/optim/torch_optim_reference.py --out '" +
                    ref.dir.string() + "' --seed " + std::to_string(ref.seed);
  if (std::system(cmd.c_str()) != 0 || !fs::exists(ref.dir / "done"))
    throw std::runtime_error("the torch reference script failed: " + cmd);
  ref.available = true;

  for (const auto& line : read_lines(ref.dir / "shapes.txt")) {
    std::istringstream in(line);
    Shape shape;
    for (int64_t d; in >> d;) shape.push_back(d);
    ref.shapes.push_back(shape);
  }
  for (const auto& line : read_lines(ref.dir / "cases.txt")) {
    std::istringstream in(line);
    OptimizerCase c;
    int nesterov = 0;
    in >> c.name >> c.config.name >> c.config.lr >> c.config.momentum >> c.config.dampening >> nesterov >>
        c.config.weight_decay >> c.config.beta1 >> c.config.beta2 >> c.config.eps;
    c.config.nesterov = nesterov != 0;
    ref.optimizers.push_back(c);
  }
  for (const auto& line : read_lines(ref.dir / "schedules.txt")) {
    std::istringstream in(line);
    ScheduleCase c;
    in >> c.name >> c.config.name >> c.base_lr >> c.config.step_size >> c.config.gamma >> c.config.warmup_steps >>
        c.config.total_steps >> c.config.min_lr >> c.steps;
    ref.schedules.push_back(c);
  }
  for (const auto& line : read_lines(ref.dir / "clips.txt")) {
    std::istringstream in(line);
    ClipCase c;
    in >> c.name >> c.max_norm >> c.torch_norm;
    ref.clips.push_back(c);
  }
  return ref;
}

/// Loaded on first use: one Python run for every test in this process.
const Reference& reference() {
  static Reference ref = load_reference();
  return ref;
}

/// Removes the reference files at exit.
struct RemoveReferenceDir {
  ~RemoveReferenceDir() {
    std::error_code ec;
    fs::remove_all(fs::temp_directory_path() / ("tandem_optim_ref_" + std::to_string(::getpid())), ec);
  }
} remove_reference_dir;

bool skip_without_torch() {
  if (reference().available) return false;
  WARN("SKIPPED: /usr/bin/python3 cannot import torch; the torch.optim comparison did not run");
  return true;
}

std::vector<Tensor> split(const float* flat, const std::vector<Shape>& shapes) {
  std::vector<Tensor> out;
  for (const auto& shape : shapes) {
    Tensor t = Tensor::empty(shape, DType::float32);
    std::copy(flat, flat + t.numel(), t.data<float>());
    flat += t.numel();
    out.push_back(t);
  }
  return out;
}

/// |a - b| / |b|, with |b| floored at 1e-3: values near zero (a parameter crossing it)
/// compare absolutely, where one rounding step of a larger neighbour is not a relative 1e-6.
double rel_error(double a, double b, double floor = 1e-3) { return std::abs(a - b) / std::max(std::abs(b), floor); }

}  // namespace

// One test case, so that one Python run serves every comparison when ctest runs each test
// case in its own process.
TEST_CASE("torch.optim reference: optimizers schedules and clip_grad_norm (skipped with a warning without torch)",
          "[optim][torch]") {
  if (skip_without_torch()) return;
  const Reference& ref = reference();

  SECTION("SGD Adam and AdamW trajectories") {
    int64_t total = 0;
    for (const auto& s : ref.shapes) total += shape_numel(s);
    auto init = read_array<float>(ref.dir / "init.f32");
    auto grads = read_array<float>(ref.dir / "grads.f32");
    REQUIRE(static_cast<int64_t>(init.size()) == total);
    int64_t steps = static_cast<int64_t>(grads.size()) / total;
    REQUIRE(steps > 0);

    for (const auto& c : ref.optimizers) {
      auto lrs = read_array<double>(ref.dir / (c.name + ".lr.f64"));
      auto traj = read_array<float>(ref.dir / (c.name + ".traj.f32"));
      REQUIRE(static_cast<int64_t>(lrs.size()) == steps);
      REQUIRE(static_cast<int64_t>(traj.size()) == steps * total);
      auto opt = make_optimizer(c.config);
      std::vector<Tensor> params = split(init.data(), ref.shapes);
      double worst = 0;
      int64_t inexact = 0;
      for (int64_t k = 0; k < steps; ++k) {
        std::vector<Tensor> g = split(grads.data() + k * total, ref.shapes);
        opt->step(params, g, lrs[k]);
        const float* expected = traj.data() + k * total;
        int64_t j = 0;
        for (const Tensor& p : params)
          for (float x : p.span<float>()) {
            worst = std::max(worst, rel_error(x, expected[j]));
            inexact += x != expected[j];
            ++j;
          }
      }
      std::cout << "  " << c.name << ": worst relative error over " << steps << " steps " << worst << ", "
                << inexact << " of " << steps * total << " values not bit-identical\n";
      INFO(c.name << ": worst relative error " << worst);
      CHECK(worst <= 1e-6);
    }
  }

  SECTION("StepLR and LambdaLR schedules") {
    REQUIRE(!ref.schedules.empty());
    for (const auto& c : ref.schedules) {
      auto expected = read_array<double>(ref.dir / (c.name + ".sched.f64"));
      REQUIRE(static_cast<int64_t>(expected.size()) == c.steps);
      double worst = 0;
      for (int64_t k = 0; k < c.steps; ++k) {
        // total_steps comes from the config here; 0 would mean the run's total.
        double lr = scheduled_lr(c.config, c.base_lr, k, c.config.total_steps);
        INFO(c.name << " step " << k << ": tandem " << lr << ", torch " << expected[k]);
        CHECK(rel_error(lr, expected[k], 1e-300) <= 1e-12);
        worst = std::max(worst, rel_error(lr, expected[k], 1e-300));
      }
      std::cout << "  schedule " << c.name << ": worst relative error " << worst << "\n";
    }
  }

  SECTION("clip_grad_norm_") {
    REQUIRE(!ref.clips.empty());
    for (const auto& c : ref.clips) {
      auto in = read_array<float>(ref.dir / (c.name + ".in.f32"));
      auto expected = read_array<float>(ref.dir / (c.name + ".out.f32"));
      std::vector<Tensor> grads = split(in.data(), ref.shapes);
      double norm = clip_grad_norm(grads, c.max_norm);
      INFO(c.name << ": tandem norm " << norm << ", torch " << c.torch_norm);
      CHECK(rel_error(norm, c.torch_norm) <= 1e-6);
      double worst = 0;
      size_t j = 0;
      for (const Tensor& g : grads)
        for (float x : g.span<float>()) worst = std::max(worst, rel_error(x, expected[j++]));
      std::cout << "  clip " << c.name << ": norm relative error " << rel_error(norm, c.torch_norm)
                << ", worst gradient relative error " << worst << "\n";
      CHECK(worst <= 1e-6);
    }
  }
}

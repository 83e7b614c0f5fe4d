// Optimizers without torch: state round trips, configuration errors, the threaded path,
// schedules and clipping by hand. torch_reference_test.cpp compares with torch.optim.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>

#include "backends/optimizer_update.h"
#include "runtime/optim/optimizer.h"

using namespace tandem;
using Catch::Matchers::Contains;

namespace {

/// A fresh seed per run, printed; TANDEM_TEST_SEED=N repeats it.
std::mt19937_64 make_rng(const char* test) {
  uint64_t seed = std::random_device{}();
  if (const char* s = std::getenv("TANDEM_TEST_SEED")) seed = std::stoull(s);
  std::cout << test << ": seed " << seed << "\n";
  return std::mt19937_64(seed);
}

Tensor random_tensor(Shape shape, std::mt19937_64& rng, float scale = 1) {
  Tensor t = Tensor::empty(std::move(shape), DType::float32);
  std::normal_distribution<float> dist(0, scale);
  for (float& x : t.span<float>()) x = dist(rng);
  return t;
}

std::vector<Tensor> clone_all(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const auto& t : ts) out.push_back(t.clone());
  return out;
}

bool bit_identical(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

OptimizerConfig config(std::string name, double lr) {
  OptimizerConfig c;
  c.name = std::move(name);
  c.lr = lr;
  return c;
}

std::vector<OptimizerConfig> all_kinds() {
  OptimizerConfig sgd = config("sgd", 0.1);
  OptimizerConfig momentum = config("sgd", 0.05);
  momentum.momentum = 0.9;
  momentum.dampening = 0.2;
  OptimizerConfig nesterov = config("sgd", 0.05);
  nesterov.momentum = 0.9;
  nesterov.nesterov = true;
  nesterov.weight_decay = 0.01;
  OptimizerConfig adam = config("adam", 1e-2);
  adam.weight_decay = 0.1;
  OptimizerConfig adamw = config("adamw", 1e-2);
  adamw.weight_decay = 0.05;
  return {sgd, momentum, nesterov, adam, adamw};
}

std::string describe(const OptimizerConfig& c) {
  return c.name + " momentum " + std::to_string(c.momentum) + (c.nesterov ? " nesterov" : "");
}

const std::vector<std::string> kNames = {"fc1.weight", "fc1.bias", "fc2.weight"};
const std::vector<Shape> kShapes = {{8, 5}, {8}, {3, 8}};

}  // namespace

TEST_CASE("state and load_state continue a run bit for bit", "[optim]") {
  auto rng = make_rng("state round trip");
  for (const auto& cfg : all_kinds()) {
    INFO(describe(cfg));
    std::vector<Tensor> params;
    for (const auto& s : kShapes) params.push_back(random_tensor(s, rng));
    std::vector<std::vector<Tensor>> grads(35);
    for (auto& g : grads)
      for (const auto& s : kShapes) g.push_back(random_tensor(s, rng, 0.5f));
    double lr = cfg.lr;

    auto a = make_optimizer(cfg);
    CHECK(a->state(kNames).empty());
    for (int k = 0; k < 20; ++k) a->step(params, grads[k], lr * (1 + 0.01 * k));
    TensorMap state = a->state(kNames);
    REQUIRE(state.count("step"));
    CHECK(state.at("step").dtype() == DType::int64);
    CHECK(state.at("step").shape() == Shape{1});
    CHECK(state.at("step").data<int64_t>()[0] == 20);
    size_t buffers = cfg.name == "sgd" ? (cfg.momentum != 0 ? 1 : 0) : 2;
    CHECK(state.size() == 1 + buffers * kNames.size());
    for (const auto& n : kNames) {
      if (cfg.name == "sgd" && cfg.momentum != 0) CHECK(state.count(n + ".momentum_buffer"));
      if (cfg.name != "sgd") CHECK((state.count(n + ".exp_avg") && state.count(n + ".exp_avg_sq")));
    }

    std::vector<Tensor> restored = clone_all(params);
    auto b = make_optimizer(cfg);
    b->load_state(state, kNames, restored);
    CHECK(b->steps_taken() == 20);
    // The restored optimizer owns its buffers: scribbling on the map changes nothing.
    for (auto& [name, t] : state)
      if (t.dtype() == DType::float32)
        for (float& x : t.span<float>()) x = 1e9f;
    for (int k = 20; k < 35; ++k) {
      a->step(params, grads[k], lr * (1 + 0.01 * k));
      b->step(restored, grads[k], lr * (1 + 0.01 * k));
    }
    for (size_t i = 0; i < params.size(); ++i) CHECK(bit_identical(params[i], restored[i]));
    TensorMap sa = a->state(kNames), sb = b->state(kNames);
    REQUIRE(sa.size() == sb.size());
    for (const auto& [name, t] : sa) CHECK(bit_identical(t, sb.at(name)));
  }
}

TEST_CASE("load_state of an empty state starts afresh", "[optim]") {
  auto rng = make_rng("empty state");
  OptimizerConfig cfg = config("adam", 1e-2);
  std::vector<Tensor> p1{random_tensor({4}, rng)}, g{random_tensor({4}, rng)};
  std::vector<Tensor> p2 = clone_all(p1);
  std::vector<std::string> names{"w"};
  auto a = make_optimizer(cfg), b = make_optimizer(cfg);
  b->step(p2, g, 1e-2);  // history that the empty state must erase
  p2 = clone_all(p1);
  b->load_state({}, names, p2);
  CHECK(b->steps_taken() == 0);
  a->step(p1, g, 1e-2);
  b->step(p2, g, 1e-2);
  CHECK(bit_identical(p1[0], p2[0]));
}

TEST_CASE("load_state rejects missing mis-shaped and unexpected tensors by name", "[optim]") {
  auto rng = make_rng("load_state errors");
  std::vector<std::string> names{"w", "b"};
  std::vector<Tensor> params{random_tensor({3, 2}, rng), random_tensor({2}, rng)};
  std::vector<Tensor> grads{random_tensor({3, 2}, rng), random_tensor({2}, rng)};
  auto adam = make_optimizer(config("adam", 1e-3));
  adam->step(params, grads, 1e-3);
  const TensorMap good = adam->state(names);
  auto fresh = make_optimizer(config("adam", 1e-3));

  TensorMap s = good;
  s.erase("b.exp_avg_sq");
  CHECK_THROWS_MATCHES(fresh->load_state(s, names, params), UserError,
                       Catch::Matchers::Message("adam optimizer state: missing tensor 'b.exp_avg_sq'"));
  s = good;
  s["w.exp_avg"] = Tensor::zeros({2, 3}, DType::float32);
  CHECK_THROWS_WITH(fresh->load_state(s, names, params),
                    Contains("'w.exp_avg'") && Contains("[2, 3]") && Contains("[3, 2]"));
  s = good;
  s["w.exp_avg"] = Tensor::zeros({3, 2}, DType::int64);
  CHECK_THROWS_WITH(fresh->load_state(s, names, params), Contains("'w.exp_avg'") && Contains("int64"));
  s = good;
  s.erase("step");
  CHECK_THROWS_WITH(fresh->load_state(s, names, params), Contains("missing tensor 'step'"));
  s = good;
  s["step"] = Tensor::zeros({1}, DType::float32);
  CHECK_THROWS_WITH(fresh->load_state(s, names, params), Contains("'step'") && Contains("int64"));
  s = good;
  s["w.momentum_buffer"] = Tensor::zeros({3, 2}, DType::float32);
  CHECK_THROWS_WITH(fresh->load_state(s, names, params), Contains("unexpected tensor 'w.momentum_buffer'"));
  // An Adam state does not fit SGD with momentum.
  OptimizerConfig momentum = config("sgd", 0.1);
  momentum.momentum = 0.9;
  CHECK_THROWS_WITH(make_optimizer(momentum)->load_state(good, names, params),
                    Contains("sgd optimizer state: missing tensor 'w.momentum_buffer'"));
  // A failed load leaves the optimizer as it was.
  CHECK(fresh->steps_taken() == 0);
  fresh->load_state(good, names, params);
  CHECK(fresh->steps_taken() == 1);
}

TEST_CASE("make_optimizer rejects bad configurations with messages", "[optim]") {
  auto expect_error = [](OptimizerConfig c, const std::string& text) {
    INFO("expecting: " << text);
    CHECK_THROWS_WITH(make_optimizer(c), Contains(text));
  };
  OptimizerConfig c = config("rmsprop", 0.1);
  expect_error(c, "unknown optimizer 'rmsprop' (expected sgd, adam, adamw, adagrad, rowwise_adagrad or sparse_adam)");
  expect_error(config("sgd", -0.1), "optimizer sgd: lr must be >= 0, got -0.1");
  expect_error(config("adam", std::nan("")), "optimizer adam: lr must be >= 0");
  c = config("sgd", 0.1);
  c.momentum = -0.5;
  expect_error(c, "optimizer sgd: momentum must be >= 0, got -0.5");
  c = config("sgd", 0.1);
  c.weight_decay = -1;
  expect_error(c, "weight_decay must be >= 0");
  c = config("sgd", 0.1);
  c.nesterov = true;
  expect_error(c, "nesterov requires momentum > 0 and dampening 0");
  c.momentum = 0.9;
  c.dampening = 0.1;
  expect_error(c, "nesterov requires momentum > 0 and dampening 0");
  for (const char* name : {"adam", "adamw"}) {
    c = config(name, 1e-3);
    c.beta1 = 1.0;
    expect_error(c, std::string("optimizer ") + name + ": beta1 must be in [0, 1), got 1");
    c = config(name, 1e-3);
    c.beta2 = -0.1;
    expect_error(c, "beta2 must be in [0, 1), got -0.1");
    c = config(name, 1e-3);
    c.eps = -1e-8;
    expect_error(c, "eps must be >= 0");
    c = config(name, 1e-3);
    c.weight_decay = -0.01;
    expect_error(c, "weight_decay must be >= 0");
  }
  c = config("sgd", 0.1);
  c.momentum = 0.9;
  c.nesterov = true;
  CHECK_NOTHROW(make_optimizer(c));
  CHECK_NOTHROW(make_optimizer(config("sgd", 0)));
}

TEST_CASE("first steps by hand", "[optim]") {
  std::vector<Tensor> p{Tensor::from_vector<float>({2}, {1.0f, -2.0f})};
  std::vector<Tensor> g{Tensor::from_vector<float>({2}, {0.5f, 0.25f})};

  OptimizerConfig momentum = config("sgd", 0.1);
  momentum.momentum = 0.9;
  auto sgd = make_optimizer(momentum);
  sgd->step(p, g, 0.1);  // buf = g; p -= 0.1 g
  sgd->step(p, g, 0.1);  // buf = 0.9 g + g
  CHECK(p[0].data<float>()[0] == Approx(1.0 - 0.1 * 0.5 - 0.1 * 1.9 * 0.5).epsilon(1e-6));
  CHECK(p[0].data<float>()[1] == Approx(-2.0 - 0.1 * 0.25 - 0.1 * 1.9 * 0.25).epsilon(1e-6));

  // Adam's first step moves every parameter by about lr against its gradient's sign.
  p = {Tensor::from_vector<float>({2}, {1.0f, -2.0f})};
  auto adam = make_optimizer(config("adam", 0.1));
  adam->step(p, g, 0.1);
  CHECK(p[0].data<float>()[0] == Approx(0.9).epsilon(1e-6));
  CHECK(p[0].data<float>()[1] == Approx(-2.1).epsilon(1e-6));

  // AdamW decays first: p (1 - lr wd), then the Adam step.
  p = {Tensor::from_vector<float>({2}, {1.0f, -2.0f})};
  OptimizerConfig w = config("adamw", 0.1);
  w.weight_decay = 0.5;
  auto adamw = make_optimizer(w);
  adamw->step(p, g, 0.1);
  CHECK(p[0].data<float>()[0] == Approx(0.95 - 0.1).epsilon(1e-6));
  CHECK(p[0].data<float>()[1] == Approx(-1.9 - 0.1).epsilon(1e-6));
}

TEST_CASE("threaded updates of large tensors equal serial updates of their pieces", "[optim]") {
  auto rng = make_rng("threaded updates");
  constexpr int64_t n = 200003, piece = 1000;  // above and below the threading threshold
  for (const auto& cfg : all_kinds()) {
    INFO(describe(cfg));
    std::vector<Tensor> big{random_tensor({n}, rng)};
    std::vector<Tensor> pieces;
    for (int64_t i = 0; i < n; i += piece) {
      Tensor t = Tensor::empty({std::min(piece, n - i)}, DType::float32);
      std::memcpy(t.data<float>(), big[0].data<float>() + i, t.nbytes());
      pieces.push_back(t);
    }
    auto a = make_optimizer(cfg), b = make_optimizer(cfg);
    for (int k = 0; k < 3; ++k) {
      std::vector<Tensor> g{random_tensor({n}, rng)};
      std::vector<Tensor> gp;
      for (int64_t i = 0; i < n; i += piece)
        gp.push_back(Tensor::from_storage(g[0].storage(), {std::min(piece, n - i)}, DType::float32, i * 4));
      a->step(big, g, cfg.lr);
      b->step(pieces, gp, cfg.lr);
    }
    bool same = true;
    for (size_t j = 0; j < pieces.size(); ++j)
      same &= std::memcmp(pieces[j].data<float>(), big[0].data<float>() + j * piece, pieces[j].nbytes()) == 0;
    CHECK(same);
  }
}

TEST_CASE("the host's loops give the same bits on the calling thread's team as on one thread", "[optim]") {
  auto rng = make_rng("host loops on a team");
  for (int64_t n : {int64_t{100003}, int64_t{1} << 20, int64_t{31}}) {  // odd, even, below the team's threshold
    INFO("n = " << n);
    const Tensor x = random_tensor({n}, rng, 3);
    CHECK(sum_of_squares_host(x.data<float>(), n, HostThreads::team) ==
          sum_of_squares_host(x.data<float>(), n, HostThreads::one));
    Tensor a = x.clone(), b = x.clone();
    scale_host(a.data<float>(), n, 0.37f, HostThreads::team);
    scale_host(b.data<float>(), n, 0.37f, HostThreads::one);
    CHECK(bit_identical(a, b));
    CHECK(a.data<float>()[n - 1] == x.data<float>()[n - 1] * 0.37f);
    zero_host(a.data<float>(), n, HostThreads::team);
    CHECK(std::all_of(a.span<float>().begin(), a.span<float>().end(), [](float v) { return v == 0 && !std::signbit(v); }));
  }
}

TEST_CASE("schedules follow docs/training.md", "[optim]") {
  ScheduleConfig constant;
  CHECK(scheduled_lr(constant, 0.3, 0, 10) == 0.3);
  CHECK(scheduled_lr(constant, 0.3, 1000, 10) == 0.3);

  ScheduleConfig step;
  step.name = "step";
  step.step_size = 3;
  step.gamma = 0.5;
  CHECK(scheduled_lr(step, 1.0, 2, 0) == 1.0);
  CHECK(scheduled_lr(step, 1.0, 3, 0) == 0.5);
  CHECK(scheduled_lr(step, 1.0, 9, 0) == 0.125);

  ScheduleConfig cosine;
  cosine.name = "cosine";
  cosine.warmup_steps = 4;
  cosine.min_lr = 0.1;
  CHECK(scheduled_lr(cosine, 1.0, 0, 14) == Approx(0.25));
  CHECK(scheduled_lr(cosine, 1.0, 3, 14) == Approx(1.0));
  CHECK(scheduled_lr(cosine, 1.0, 4, 14) == Approx(1.0));
  CHECK(scheduled_lr(cosine, 1.0, 9, 14) == Approx(0.55));  // halfway: (lr + min_lr) / 2
  CHECK(scheduled_lr(cosine, 1.0, 14, 14) == Approx(0.1));
  CHECK(scheduled_lr(cosine, 1.0, 100, 14) == Approx(0.1));  // past the end: min_lr
  cosine.total_steps = 24;                                   // the config's total wins over the run's
  CHECK(scheduled_lr(cosine, 1.0, 14, 14) == Approx(0.55));
  cosine.warmup_steps = 0;
  CHECK(scheduled_lr(cosine, 1.0, 0, 0) == Approx(1.0));
}

TEST_CASE("bad schedules throw UserError with messages", "[optim]") {
  ScheduleConfig s;
  s.name = "linear";
  CHECK_THROWS_WITH(scheduled_lr(s, 0.1, 0, 10),
                    Contains("unknown schedule 'linear' (expected constant, step or cosine)"));
  s = {};
  s.name = "step";
  s.step_size = 0;
  CHECK_THROWS_WITH(scheduled_lr(s, 0.1, 0, 10), Contains("step_size must be >= 1"));
  s.step_size = 2;
  s.gamma = -1;
  CHECK_THROWS_WITH(scheduled_lr(s, 0.1, 0, 10), Contains("gamma must be >= 0"));
  s = {};
  s.name = "cosine";
  s.warmup_steps = -1;
  CHECK_THROWS_WITH(scheduled_lr(s, 0.1, 0, 10), Contains("warmup_steps must be >= 0"));
  s.warmup_steps = 0;
  s.min_lr = -0.1;
  CHECK_THROWS_WITH(scheduled_lr(s, 0.1, 0, 10), Contains("min_lr must be >= 0"));
  s.min_lr = 0;
  s.total_steps = -5;
  CHECK_THROWS_AS(scheduled_lr(s, 0.1, 0, 10), UserError);
}

TEST_CASE("clip_grad_norm scales by max_norm over the global norm", "[optim]") {
  std::vector<Tensor> g{Tensor::from_vector<float>({2}, {3.0f, 0.0f}), Tensor::from_vector<float>({1}, {4.0f})};
  CHECK(clip_grad_norm(g, 10.0) == 5.0);  // below max_norm: untouched
  CHECK(g[0].data<float>()[0] == 3.0f);
  CHECK(clip_grad_norm(g, 1.0) == 5.0);
  CHECK(g[0].data<float>()[0] == static_cast<float>(3.0f * static_cast<float>(1.0 / (5.0 + 1e-6))));
  CHECK(g[1].data<float>()[0] == Approx(0.8).epsilon(1e-6));

  std::vector<Tensor> zeros{Tensor::zeros({5}, DType::float32)};
  CHECK(clip_grad_norm(zeros, 1.0) == 0.0);
  CHECK(zeros[0].data<float>()[0] == 0.0f);
  CHECK(clip_grad_norm({}, 1.0) == 0.0);

  CHECK_THROWS_WITH(clip_grad_norm(g, 0.0), Contains("clip_grad_norm must be > 0"));
  CHECK_THROWS_AS(clip_grad_norm(g, -1.0), UserError);
  CHECK_THROWS_AS(clip_grad_norm(g, std::nan("")), UserError);
}

TEST_CASE("clip_grad_norm of a large tensor matches a serial double sum", "[optim]") {
  auto rng = make_rng("clip large");
  std::vector<Tensor> g{random_tensor({300001}, rng), random_tensor({17}, rng)};
  double sum = 0;
  for (const auto& t : g)
    for (float x : t.span<float>()) sum += static_cast<double>(x) * x;
  CHECK(clip_grad_norm(g, 1e9) == Approx(std::sqrt(sum)).epsilon(1e-12));
}

namespace {

/// A gradient [rows, width] that is zero outside `touched` random rows (each listed in
/// `marked`), as an embedding table's after one batch; a repeated row is marked once.
Tensor gradient_in_rows(int64_t rows, int64_t width, int64_t touched, std::mt19937_64& rng, TouchedRows& marked) {
  Tensor g = Tensor::zeros({rows, width}, DType::float32);
  std::normal_distribution<float> dist(0, 1);
  std::vector<int64_t> ids;
  for (int64_t k = 0; k < touched; ++k) ids.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(rows)));
  marked.mark(ids);
  for (int64_t r : ids)
    for (int64_t d = 0; d < width; ++d) g.data<float>()[r * width + d] += dist(rng);
  return g;
}

}  // namespace

TEST_CASE("SGD over the touched rows of a gradient gives the dense update's bits", "[optim][touched_rows]") {
  auto rng = make_rng("sgd touched rows");
  // a table (rows touched), a dense weight (all marked) and one without an entry
  const int64_t rows = 5000 + static_cast<int64_t>(rng() % 3000), width = 1 + static_cast<int64_t>(rng() % 70);
  TouchedRows table_rows(rows), dense_rows(7);
  dense_rows.mark_all();
  std::vector<Tensor> params{random_tensor({rows, width}, rng), random_tensor({7, 3}, rng), random_tensor({5}, rng)};
  std::vector<TouchedRows*> marks{&table_rows, &dense_rows, nullptr};
  for (const OptimizerConfig& c : all_kinds()) {
    INFO(c.name << " momentum " << c.momentum << " weight_decay " << c.weight_decay);
    std::vector<Tensor> dense = clone_all(params), sparse = clone_all(params);
    auto reference = make_optimizer(c), tracked = make_optimizer(c);
    for (int step = 0; step < 4; ++step) {
      table_rows.clear();
      std::vector<Tensor> grads{gradient_in_rows(rows, width, 1 + static_cast<int64_t>(rng() % 300), rng, table_rows),
                                random_tensor({7, 3}, rng), random_tensor({5}, rng)};
      REQUIRE(table_rows.count() < rows / 10);
      reference->step(dense, grads, 0.05);
      tracked->step_rows(sparse, grads, marks, 0.05);
    }
    for (size_t i = 0; i < params.size(); ++i) CHECK(bit_identical(dense[i], sparse[i]));
  }
}

TEST_CASE("SGD without momentum writes no row outside the touched ones, with momentum it does",
          "[optim][touched_rows]") {
  auto rng = make_rng("sgd untouched rows");
  const int64_t rows = 1000, width = 8;
  TouchedRows marked(rows);
  Tensor grad = gradient_in_rows(rows, width, 20, rng, marked);
  int64_t untouched = 0;
  while (std::find(marked.list().begin(), marked.list().end(), untouched) != marked.list().end()) ++untouched;
  // a NaN where the gradient must be zero: any update that reads that row spreads it
  grad.data<float>()[untouched * width] = std::nanf("");
  std::vector<Tensor> grads{grad};
  std::vector<TouchedRows*> marks{&marked};
  std::vector<Tensor> plain{random_tensor({rows, width}, rng)}, heavy = clone_all(plain);
  make_optimizer(config("sgd", 0.1))->step_rows(plain, grads, marks, 0.1);
  CHECK_FALSE(std::isnan(plain[0].data<float>()[untouched * width]));
  OptimizerConfig momentum = config("sgd", 0.1);
  momentum.momentum = 0.9;  // the buffer moves every row: the dense update, NaN included
  make_optimizer(momentum)->step_rows(heavy, grads, marks, 0.1);
  CHECK(std::isnan(heavy[0].data<float>()[untouched * width]));
}

TEST_CASE("clip_grad_norm over touched rows gives the dense norm and scaling to the bit", "[optim][touched_rows]") {
  auto rng = make_rng("clip touched rows");
  // rows of odd widths straddle the sum's blocks of kNormBlock elements
  const int64_t rows = 20000 + static_cast<int64_t>(rng() % 5000), width = 3 + static_cast<int64_t>(rng() % 90);
  TouchedRows table_rows(rows), dense_rows(40);
  dense_rows.mark_all();
  std::vector<Tensor> grads{gradient_in_rows(rows, width, 1 + static_cast<int64_t>(rng() % 500), rng, table_rows),
                            random_tensor({40, 9}, rng)};
  std::vector<Tensor> dense = clone_all(grads), sparse = clone_all(grads);
  std::vector<TouchedRows*> marks{&table_rows, &dense_rows};
  const double norm = clip_grad_norm(dense, 0.5);
  REQUIRE(norm > 0.5);  // it clips
  CHECK(clip_grad_norm(sparse, 0.5, marks) == norm);
  for (size_t i = 0; i < grads.size(); ++i) CHECK(bit_identical(dense[i], sparse[i]));
}

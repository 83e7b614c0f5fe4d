// Activations (exp and clamp among them), softmax / log_softmax / normalize, layer_norm and dropout against the reference;
// dropout's statistics and determinism.
#include "kernel_test_util.h"

namespace tandem::test {
namespace {

OpCase unary_case(std::mt19937& gen, const std::string& op, Shape shape, std::map<std::string, AttrValue> attrs = {},
                  float range = 6.f) {
  OpCase c{op, op_attrs(op, attrs)};
  c.inputs = {random_tensor(shape, gen, -range, range)};
  c.out_shape = shape;
  return c;
}

TEST_CASE("activations match the reference", "[cpu][activations]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  // Small shapes take the scalar loop, the last two oneDNN's eltwise.
  std::vector<Shape> shapes = {{1}, {7}, {3, 5}, {2, 3, 4, 5}, {0, 4}, {}, {64, 100}, {3, 40001}};
  for (const Shape& s : shapes) {
    INFO("shape " << shape_str(s));
    check_against_reference(unary_case(gen, "relu", s));
    check_against_reference(unary_case(gen, "tanh", s));
    check_against_reference(unary_case(gen, "sigmoid", s, {}, 20.f));
    check_against_reference(unary_case(gen, "gelu", s));
    check_against_reference(unary_case(gen, "gelu", s, {{"approximate", std::string("tanh")}}));
    for (const char* op : {"relu6", "hardswish", "hardsigmoid", "silu", "mish", "exp"})
      check_against_reference(unary_case(gen, op, s, {}, 10.f));
    check_against_reference(unary_case(gen, "clamp", s, {{"min", -0.5}, {"max", 0.7}}));
    check_against_reference(unary_case(gen, "clamp", s, {{"max", 0.3}}));
    check_against_reference(unary_case(gen, "clamp", s, {{"min", 0.1}}));
  }
}

TEST_CASE("gelu refuses an unknown approximation", "[cpu][activations][errors]") {
  std::mt19937 gen(1);
  OpCase c = unary_case(gen, "gelu", {4}, {{"approximate", std::string("fast")}});
  REQUIRE_THROWS_WITH(make_kernel(c), Catch::Contains("approximate 'fast'"));
}

TEST_CASE("softmax, log_softmax and normalize match the reference on every dim", "[cpu][softmax]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  struct Case { Shape shape; int64_t dim; };
  std::vector<Case> cases = {{{5}, 0},           {{5}, -1},           {{1, 1}, 1},       {{3, 4}, 0},
                             {{3, 4}, 1},        {{3, 4}, -2},        {{2, 3, 5}, 1},    {{2, 3, 5}, -1},
                             {{2, 3, 5, 7}, 2},  {{}, 0},             {{}, -1},          {{0, 4}, 1},
                             {{64, 1000}, -1},   {{16, 300, 3}, 1},   {{8, 4, 600}, 0}};
  for (const char* op : {"softmax", "log_softmax", "normalize"})
    for (const Case& k : cases) {
      INFO(op << " shape " << shape_str(k.shape) << " dim " << k.dim);
      check_against_reference(unary_case(gen, op, k.shape, {{"dim", k.dim}}, 30.f));
    }
}

TEST_CASE("softmax is stable for large inputs and rejects a bad dim", "[cpu][softmax]") {
  OpCase c{"softmax", op_attrs("softmax", {{"dim", int64_t{1}}})};
  c.inputs = {Tensor::from_vector<float>({1, 3}, {1000.f, 1000.f, -1000.f})};
  c.out_shape = {1, 3};
  Tensor out = run_kernel(c, *make_kernel(c));
  CHECK(out.span<float>()[0] == Approx(0.5f));
  CHECK(out.span<float>()[2] == 0.f);
  OpCase bad{"log_softmax", op_attrs("log_softmax", {{"dim", int64_t{2}}})};
  bad.inputs = {Tensor::zeros({2, 3}, DType::float32)};
  bad.out_shape = {2, 3};
  REQUIRE_THROWS_WITH(make_kernel(bad), Catch::Contains("dim 2 is out of range [-2, 1]"));
}

OpCase layer_norm_case(std::mt19937& gen, Shape shape, std::vector<int64_t> normalized, bool affine, bool bias) {
  OpCase c{"layer_norm", op_attrs("layer_norm", {{"normalized_shape", normalized},
                                                 {"elementwise_affine", affine},
                                                 {"bias", bias},
                                                 {"eps", 1e-5}})};
  c.inputs = {random_tensor(shape, gen, -3.f, 5.f)};
  if (affine) c.params.push_back(random_tensor(normalized, gen));
  if (affine && bias) c.params.push_back(random_tensor(normalized, gen));
  c.out_shape = shape;
  return c;
}

TEST_CASE("layer_norm matches the reference", "[cpu][layer_norm]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  struct Case { Shape shape; std::vector<int64_t> normalized; };
  std::vector<Case> cases = {{{1, 10}, {10}},  {{4, 7}, {7}},        {{2, 3, 4}, {3, 4}}, {{2, 3, 4}, {2, 3, 4}},
                             {{5}, {5}},       {{3, 1}, {1}},        {{0, 8}, {8}},       {{512, 768}, {768}},
                             {{9, 2, 65}, {65}}};
  for (const Case& k : cases)
    for (auto [affine, bias] : {std::pair{true, true}, std::pair{true, false}, std::pair{false, false}}) {
      INFO("shape " << shape_str(k.shape) << " normalized " << shape_str(k.normalized) << " affine " << affine
                    << " bias " << bias);
      check_against_reference(layer_norm_case(gen, k.shape, k.normalized, affine, bias));
    }
  // A large common offset must not destroy the variance (two-pass statistics).
  OpCase shifted = layer_norm_case(gen, {4, 256}, {256}, false, false);
  for (float& v : shifted.inputs[0].span<float>()) v += 1000.f;
  check_against_reference(shifted, 1e-3);  // float inputs near 1000 carry ~6e-5 absolute rounding
}

OpCase dropout_case(std::mt19937& gen, Shape shape, double p, bool training, uint64_t seed) {
  OpCase c{"dropout", op_attrs("dropout", {{"p", p}})};
  c.inputs = {random_tensor(shape, gen, 0.5f, 2.f)};  // never 0, so a zero means dropped
  c.out_shape = shape;
  c.training = training;
  c.seed = seed;
  return c;
}

TEST_CASE("dropout is a copy in inference and matches the reference in training", "[cpu][dropout]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (double p : {0.0, 0.1, 0.5, 0.9, 1.0})
    for (Shape s : {Shape{1}, Shape{3, 7}, Shape{100, 1000}}) {
      INFO("p " << p << " shape " << shape_str(s));
      OpCase inference = dropout_case(gen, s, p, false, seed);
      check_against_reference(inference);
      require_close(run_kernel(inference, *make_kernel(inference)), inference.inputs[0], 0.0);
      check_against_reference(dropout_case(gen, s, p, true, seed));
    }
}

TEST_CASE("dropout keeps about 1-p of the elements, scaled by 1/(1-p)", "[cpu][dropout]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  const int64_t n = 1 << 20;
  for (double p : {0.1, 0.5, 0.8}) {
    INFO("p " << p);
    OpCase c = dropout_case(gen, {n}, p, true, gen());
    Tensor out = run_kernel(c, *make_kernel(c));
    auto x = c.inputs[0].span<float>();
    auto y = out.span<float>();
    int64_t kept = 0;
    double worst_scale_err = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      if (y[i] == 0.f) continue;
      ++kept;
      worst_scale_err = std::max(worst_scale_err, std::abs(double(y[i]) / x[i] * (1.0 - p) - 1.0));
    }
    double fraction = double(kept) / n;
    double sigma = std::sqrt(p * (1 - p) / n);
    CHECK(std::abs(fraction - (1.0 - p)) < 6 * sigma);
    CHECK(worst_scale_err < 1e-6);
  }
}

TEST_CASE("dropout masks are fixed by the seed", "[cpu][dropout]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  OpCase c = dropout_case(gen, {64, 513}, 0.3, true, 42);
  auto kernel = make_kernel(c);
  Tensor first = run_kernel(c, *kernel);
  Tensor second = run_kernel(c, *make_kernel(c));
  CHECK(first.to_vector<float>() == second.to_vector<float>());
  c.seed = 43;
  Tensor other = run_kernel(c, *kernel);
  int64_t differ = 0;
  for (int64_t i = 0; i < first.numel(); ++i) differ += (first.span<float>()[i] == 0.f) != (other.span<float>()[i] == 0.f);
  CHECK(differ > first.numel() / 10);  // another seed, another mask (~42% differ)
}

TEST_CASE("dropout refuses p outside [0, 1]", "[cpu][dropout][errors]") {
  std::mt19937 gen(1);
  OpCase c = dropout_case(gen, {4}, 1.5, true, 1);
  REQUIRE_THROWS_WITH(make_kernel(c), Catch::Contains("p 1.5"));
}

}  // namespace
}  // namespace tandem::test

namespace tandem::test {
namespace {

OpCase stochastic_depth_case(std::mt19937& gen, Shape shape, double p, const std::string& mode, bool training) {
  OpCase c{"stochastic_depth", op_attrs("stochastic_depth", {{"p", p}, {"mode", mode}})};
  c.inputs = {random_tensor(shape, gen, 0.5f, 2.f)};  // no zeros: a zero output is a drop
  c.out_shape = shape;
  c.training = training;
  c.seed = gen();
  return c;
}

TEST_CASE("stochastic_depth drops whole samples (or the whole batch) about p of the time, as torchvision's",
          "[cpu][dropout]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  const double p = 0.3;
  OpCase c = stochastic_depth_case(gen, {4000, 3, 5}, p, "row", true);
  auto kernel = make_kernel(c);
  Tensor out = run_kernel(c, *kernel);
  auto x = c.inputs[0].span<float>();
  auto y = out.span<float>();
  int64_t kept_rows = 0;
  for (int64_t row = 0; row < 4000; ++row) {
    const bool kept = y[row * 15] != 0.f;
    kept_rows += kept;
    for (int64_t i = row * 15; i < row * 15 + 15; ++i)
      REQUIRE(y[i] == (kept ? x[i] * static_cast<float>(1.0 / (1.0 - p)) : 0.f));
  }
  const double sigma = std::sqrt(p * (1 - p) / 4000);
  CHECK(std::abs(double(kept_rows) / 4000 - (1 - p)) < 6 * sigma);

  // backward: the forward's mask on the gradient
  Tensor dy = random_tensor(c.out_shape, gen);
  std::vector<Tensor> outputs{out}, grad_outputs{dy}, grad_inputs{Tensor::empty(c.out_shape, DType::float32)};
  std::vector<Tensor> grad_params;
  kernel->backward({c.inputs, c.params, outputs, grad_outputs, grad_inputs, grad_params, true, c.seed});
  for (int64_t i = 0; i < 4000 * 15; ++i)
    REQUIRE(grad_inputs[0].span<float>()[i] ==
            (y[i] != 0.f ? dy.span<float>()[i] * static_cast<float>(1.0 / (1.0 - p)) : 0.f));

  // mode batch: all of it or nothing, about p of the time over seeds
  int kept_batches = 0;
  for (int draw = 0; draw < 400; ++draw) {
    OpCase b = stochastic_depth_case(gen, {6, 7}, p, "batch", true);
    Tensor yb = run_kernel(b, *make_kernel(b));
    const bool kept = yb.span<float>()[0] != 0.f;
    kept_batches += kept;
    for (float v : yb.span<float>()) REQUIRE((v != 0.f) == kept);
  }
  CHECK(std::abs(kept_batches / 400.0 - (1 - p)) < 6 * std::sqrt(p * (1 - p) / 400));

  // inference: the identity
  OpCase eval = stochastic_depth_case(gen, {5, 4}, p, "row", false);
  require_close(run_kernel(eval, *make_kernel(eval)), eval.inputs[0], 0.0);
}

}  // namespace
}  // namespace tandem::test

// Backward of the activations, softmax / log_softmax, layer_norm, dropout, add / mul,
// cat, flatten and reshape: against the reference and finite differences.
#include "backward_test_util.h"

namespace tandem::test {
namespace {

OpCase unary_case(std::mt19937& gen, const std::string& op, Shape shape,
                  std::map<std::string, AttrValue> attrs = {}) {
  OpCase c{op, op_attrs(op, attrs)};
  c.inputs = {random_tensor(shape, gen, -4.f, 4.f)};
  c.out_shape = shape;
  return c;
}

/// Values at least 0.05 from the kinks of relu (0), relu6 (0, 6), hardswish and
/// hardsigmoid (-3, 3), so that each is beyond a finite-difference step.
void away_from_kinks(Tensor& t) {
  for (float& v : t.span<float>())
    for (float kink : {-3.f, 0.f, 3.f, 6.f})
      if (std::abs(v - kink) < 0.05f) v = v < kink ? kink - 0.05f : kink + 0.05f;
}

TEST_CASE("activation backward matches the reference", "[cpu][backward][activation]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  std::vector<std::pair<std::string, std::map<std::string, AttrValue>>> ops = {
      {"relu", {}}, {"tanh", {}}, {"sigmoid", {}},
      {"gelu", {{"approximate", std::string("none")}}}, {"gelu", {{"approximate", std::string("tanh")}}},
      {"relu6", {}}, {"hardswish", {}}, {"hardsigmoid", {}}, {"silu", {}}, {"mish", {}}, {"exp", {}},
      {"clamp", {{"min", -3.0}, {"max", 3.0}}}, {"clamp", {{"max", 0.0}}}};  // bounds at kinks away_from_kinks knows
  for (const auto& [op, attrs] : ops)
    for (Shape shape : {Shape{1}, Shape{7, 3}, Shape{}, Shape{0, 4}, Shape{64, 128}, Shape{5001}}) {
      INFO(op << " " << shape_str(shape));
      check_backward(unary_case(gen, op, shape, attrs), gen);
    }
  for (const auto& [op, attrs] : ops) {
    INFO(op);
    OpCase c = unary_case(gen, op, {3, 5}, attrs);
    away_from_kinks(c.inputs[0]);
    check_finite_differences(c, gen);
  }
}

TEST_CASE("relu backward passes nothing where the input is negative", "[cpu][backward][activation]") {
  OpCase c{"relu", op_attrs("relu")};
  c.inputs = {Tensor::from_vector<float>({4}, {-1.f, 2.f, 0.f, 3.f})};
  c.out_shape = {4};
  auto kernel = make_kernel(c);
  Tensor out = run_kernel(c, *kernel);
  Grads g = make_grads(c, NAN);
  run_backward(c, *kernel, out, Tensor::from_vector<float>({4}, {5.f, 6.f, 7.f, 8.f}), g);
  CHECK(g.inputs[0].to_vector<float>() == std::vector<float>{0.f, 6.f, 0.f, 8.f});
}

TEST_CASE("relu6, hardswish and hardsigmoid backward at their bounds are torch's", "[cpu][backward][activation]") {
  // torch: relu6 passes nothing at 0 or 6; hardswish's slope is x / 3 + 1/2 from -3 to 3
  // inclusive; hardsigmoid's is 1/6 strictly inside (-3, 3). Both sizes: the loop and oneDNN.
  struct Expected { const char* op; std::vector<float> at_points; };
  const std::vector<float> points = {-4.f, -3.f, 0.f, 3.f, 6.f, 7.f};
  for (const Expected& e : {Expected{"relu6", {0.f, 0.f, 0.f, 1.f, 0.f, 0.f}},
                            Expected{"hardswish", {0.f, -0.5f, 0.5f, 1.5f, 1.f, 1.f}},
                            Expected{"hardsigmoid", {0.f, 0.f, 1.f / 6.f, 0.f, 0.f, 0.f}}})
    for (int64_t copies : {1, 1000}) {
      INFO(e.op << " " << copies * 6 << " elements");
      std::vector<float> x;
      for (int64_t k = 0; k < copies; ++k) x.insert(x.end(), points.begin(), points.end());
      const Shape shape{static_cast<int64_t>(x.size())};
      OpCase c{e.op, op_attrs(e.op)};
      c.inputs = {Tensor::from_vector<float>(shape, x)};
      c.out_shape = shape;
      auto kernel = make_kernel(c);
      Tensor out = run_kernel(c, *kernel);
      Grads g = make_grads(c, NAN);
      run_backward(c, *kernel, out, Tensor::from_vector<float>(shape, std::vector<float>(x.size(), 1.f)), g);
      std::vector<float> got = g.inputs[0].to_vector<float>();
      for (size_t i = 0; i < points.size(); ++i) CHECK(got[i] == Approx(e.at_points[i]));
    }
}

TEST_CASE("softmax, log_softmax and normalize backward match the reference", "[cpu][backward][softmax]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  struct Case { Shape shape; int64_t dim; };
  std::vector<Case> cases = {{{5}, 0},      {{3, 4, 5}, 0},   {{3, 4, 5}, 1},  {{3, 4, 5}, -1},
                             {{1, 1}, -1},  {{2, 3, 700}, 1}, {{64, 128}, -1}, {{64, 128}, 0},
                             {{}, 0},       {{0, 3}, 1}};
  for (const char* op : {"softmax", "log_softmax"})
    for (const Case& k : cases) {
      INFO(op << " " << shape_str(k.shape) << " dim " << k.dim);
      check_backward(unary_case(gen, op, k.shape, {{"dim", k.dim}}), gen);
    }
  for (const char* op : {"softmax", "log_softmax", "normalize"}) {
    check_finite_differences(unary_case(gen, op, {3, 4}, {{"dim", int64_t{-1}}}), gen);
    check_finite_differences(unary_case(gen, op, {2, 3, 2}, {{"dim", int64_t{1}}}), gen);
  }
  for (const Case& k : cases) {
    INFO("normalize " << shape_str(k.shape) << " dim " << k.dim);
    check_backward(unary_case(gen, "normalize", k.shape, {{"dim", k.dim}}), gen);
  }
}

TEST_CASE("clamp passes the gradient at its bounds and normalize below eps, as torch", "[cpu][backward][activation]") {
  OpCase c{"clamp", op_attrs("clamp", {{"min", -1.0}, {"max", 2.0}})};
  c.inputs = {Tensor::from_vector<float>({5}, {-2.f, -1.f, 0.f, 2.f, 3.f})};
  c.out_shape = {5};
  auto kernel = make_kernel(c);
  Tensor out = run_kernel(c, *kernel);
  CHECK(out.to_vector<float>() == std::vector<float>{-1.f, -1.f, 0.f, 2.f, 2.f});
  Grads g = make_grads(c, NAN);
  run_backward(c, *kernel, out, Tensor::from_vector<float>({5}, {5.f, 6.f, 7.f, 8.f, 9.f}), g);
  CHECK(g.inputs[0].to_vector<float>() == std::vector<float>{0.f, 6.f, 7.f, 8.f, 0.f});
  // a row whose norm (5e-13) is below eps (1e-12): y = x / eps, dx = dy / eps
  OpCase n{"normalize", op_attrs("normalize", {{"dim", int64_t{-1}}})};
  n.inputs = {Tensor::from_vector<float>({2, 2}, {3e-13f, 4e-13f, 3.f, 4.f})};
  n.out_shape = {2, 2};
  auto nk = make_kernel(n);
  Tensor ny = run_kernel(n, *nk);
  std::vector<float> y = ny.to_vector<float>();
  CHECK(y[0] == Approx(0.3f));
  CHECK(y[3] == Approx(0.8f));
  Grads ng = make_grads(n, NAN);
  run_backward(n, *nk, ny, Tensor::from_vector<float>({2, 2}, {1.f, 2.f, 1.f, 0.f}), ng);
  std::vector<float> dx = ng.inputs[0].to_vector<float>();
  CHECK(dx[0] == Approx(1e12f));
  CHECK(dx[1] == Approx(2e12f));
  CHECK(dx[2] == Approx((1.f - 0.6f * 0.6f) / 5.f));  // (dy - y (dy . y)) / ||x||
  CHECK(dx[3] == Approx(-0.8f * 0.6f / 5.f));
}

OpCase layer_norm_case(std::mt19937& gen, Shape shape, std::vector<int64_t> normalized, bool affine, bool bias) {
  OpCase c{"layer_norm", op_attrs("layer_norm", {{"normalized_shape", normalized},
                                                  {"elementwise_affine", affine},
                                                  {"bias", bias}})};
  c.inputs = {random_tensor(shape, gen)};
  if (affine) {
    c.params.push_back(random_tensor(normalized, gen, 0.5f, 1.5f));
    if (bias) c.params.push_back(random_tensor(normalized, gen));
  }
  c.out_shape = shape;
  return c;
}

TEST_CASE("layer_norm backward matches the reference", "[cpu][backward][layer_norm]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  struct Case { Shape shape; std::vector<int64_t> normalized; };
  std::vector<Case> cases = {{{4, 8}, {8}},     {{2, 3, 5}, {3, 5}}, {{1, 17}, {17}},
                             {{3, 1}, {1}},     {{64, 256}, {256}},  {{0, 6}, {6}},
                             {{513, 33}, {33}}};
  for (const Case& k : cases)
    for (auto [affine, bias] : {std::pair{true, true}, std::pair{true, false}, std::pair{false, false}}) {
      INFO(shape_str(k.shape) << " affine " << affine << " bias " << bias);
      OpCase c = layer_norm_case(gen, k.shape, k.normalized, affine, bias);
      // One element per row: var = 0 and rstd = 1/sqrt(eps) multiplies float rounding
      // (an FMA-contracted g - mean(g)) by ~316 at the default eps; the exact dx is 0.
      if (k.normalized == std::vector<int64_t>{1}) c.attrs.set("eps", 0.1);
      check_backward(c, gen, 2e-5);
    }
  check_finite_differences(layer_norm_case(gen, {3, 6}, {6}, true, true), gen);
  check_finite_differences(layer_norm_case(gen, {2, 2, 3}, {2, 3}, true, false), gen);
  check_finite_differences(layer_norm_case(gen, {2, 5}, {5}, false, false), gen);
}

OpCase dropout_case(std::mt19937& gen, Shape shape, double p, bool training, uint64_t seed) {
  OpCase c{"dropout", op_attrs("dropout", {{"p", p}})};
  c.inputs = {random_tensor(shape, gen, 0.5f, 2.f)};
  c.out_shape = shape;
  c.training = training;
  c.seed = seed;
  return c;
}

TEST_CASE("dropout backward reuses forward's mask", "[cpu][backward][dropout]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (double p : {0.0, 0.3, 0.5, 1.0})
    for (bool training : {true, false})
      for (Shape shape : {Shape{1}, Shape{7, 9}, Shape{64, 513}}) {
        INFO("p " << p << " training " << training << " " << shape_str(shape));
        OpCase c = dropout_case(gen, shape, p, training, gen());
        check_backward(c, gen);
        // dx is zero exactly where forward dropped.
        auto kernel = make_kernel(c);
        Tensor out = run_kernel(c, *kernel);
        Grads g = make_grads(c, NAN);
        run_backward(c, *kernel, out, filled(out, 1.f), g);
        auto y = out.span<float>();
        auto dx = g.inputs[0].span<float>();
        for (size_t i = 0; i < y.size(); ++i) REQUIRE((y[i] == 0.f) == (dx[i] == 0.f));
      }
  check_finite_differences(dropout_case(gen, {4, 5}, 0.4, true, 1234), gen);
}

TEST_CASE("add and mul backward reduce over broadcast dims", "[cpu][backward][elementwise]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  struct Case { Shape a, b, out; };
  std::vector<Case> cases = {
      {{4}, {4}, {4}},                      {{1}, {1}, {1}},
      {{}, {}, {}},                         {{3, 4}, {}, {3, 4}},
      {{}, {3, 4}, {3, 4}},                 {{3, 4}, {4}, {3, 4}},
      {{4}, {3, 4}, {3, 4}},                {{3, 1}, {1, 4}, {3, 4}},
      {{3, 1}, {3, 4}, {3, 4}},             {{2, 3, 4}, {3, 1}, {2, 3, 4}},
      {{2, 1, 4}, {1, 3, 1}, {2, 3, 4}},    {{5, 1, 1, 7}, {2, 3, 1}, {5, 2, 3, 7}},
      {{1, 1, 1}, {2, 3, 4}, {2, 3, 4}},    {{0, 3}, {3}, {0, 3}},
      {{256, 1024}, {1024}, {256, 1024}},   {{64, 1, 512}, {64, 32, 1}, {64, 32, 512}},
      {{128, 300}, {128, 300}, {128, 300}}, {{300, 1}, {300, 200}, {300, 200}},
  };
  for (const Case& k : cases) {
    INFO("a " << shape_str(k.a) << " b " << shape_str(k.b));
    for (const char* op : {"add", "mul"}) {
      OpCase c{op, op_attrs(op)};
      c.inputs = {random_tensor(k.a, gen), random_tensor(k.b, gen)};
      c.out_shape = k.out;
      check_backward(c, gen, 2e-5);
    }
    OpCase scaled_add{"add", op_attrs("add", {{"alpha", -2.5}})};
    scaled_add.inputs = {random_tensor(k.a, gen), random_tensor(k.b, gen)};
    scaled_add.out_shape = k.out;
    check_backward(scaled_add, gen, 2e-5);
  }
  for (const char* op : {"add", "mul"}) {
    OpCase c{op, op_attrs(op, std::string(op) == "add" ? std::map<std::string, AttrValue>{{"alpha", 0.5}}
                                                       : std::map<std::string, AttrValue>{})};
    c.inputs = {random_tensor({2, 1, 4}, gen), random_tensor({3, 1}, gen)};
    c.out_shape = {2, 3, 4};
    check_finite_differences(c, gen);
  }
}

TEST_CASE("cat backward splits the gradient", "[cpu][backward][cat]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  struct Case { std::vector<Shape> ins; int64_t dim; Shape out; };
  std::vector<Case> cases = {
      {{{2, 3}, {4, 3}}, 0, {6, 3}},
      {{{2, 3}, {2, 1}, {2, 5}}, 1, {2, 9}},
      {{{2, 3, 4}, {2, 3, 1}}, -1, {2, 3, 5}},
      {{{2, 0, 4}, {2, 3, 4}}, -2, {2, 3, 4}},
      {{{5}}, 0, {5}},
      {{{64, 300}, {64, 200}}, 1, {64, 500}},
  };
  for (const Case& k : cases) {
    INFO("dim " << k.dim << " out " << shape_str(k.out));
    OpCase c{"cat", op_attrs("cat", {{"dim", k.dim}})};
    for (const Shape& s : k.ins) c.inputs.push_back(random_tensor(s, gen));
    c.out_shape = k.out;
    check_backward(c, gen, 0.0);
  }
  OpCase c{"cat", op_attrs("cat", {{"dim", int64_t{-1}}})};
  c.inputs = {random_tensor({2, 2}, gen), random_tensor({2, 3}, gen)};
  c.out_shape = {2, 5};
  check_finite_differences(c, gen);
}

TEST_CASE("permute backward permutes the gradient back", "[cpu][backward][permute]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  struct Case { Shape in; std::vector<int64_t> dims; Shape out; };
  std::vector<Case> cases = {
      {{3, 2, 5, 4, 6}, {0, 2, 1, 3, 4}, {3, 5, 2, 4, 6}},
      {{2, 5, 3, 4}, {0, 2, 3, 1}, {2, 3, 4, 5}},
      {{2, 3, 4, 5}, {0, -1, 1, 2}, {2, 5, 3, 4}},
      {{1, 4, 1, 3}, {3, 2, 1, 0}, {3, 1, 4, 1}},
  };
  for (const Case& k : cases) {
    INFO("in " << shape_str(k.in) << " out " << shape_str(k.out));
    OpCase c{"permute", op_attrs("permute", {{"dims", k.dims}})};
    c.inputs = {random_tensor(k.in, gen)};
    c.out_shape = k.out;
    check_backward(c, gen, 0.0);
  }
  OpCase c{"permute", op_attrs("permute", {{"dims", std::vector<int64_t>{2, 0, 1}}})};
  c.inputs = {random_tensor({2, 3, 4}, gen)};
  c.out_shape = {4, 2, 3};
  check_finite_differences(c, gen);
}

TEST_CASE("flatten and reshape backward copy the gradient", "[cpu][backward][shape]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  OpCase f{"flatten", op_attrs("flatten")};
  f.inputs = {random_tensor({2, 3, 4}, gen)};
  f.out_shape = {2, 12};
  check_backward(f, gen, 0.0);
  check_finite_differences(f, gen);
  OpCase r{"reshape", op_attrs("reshape", {{"shape", std::vector<int64_t>{-1, 6}}})};
  r.inputs = {random_tensor({4, 3}, gen)};
  r.out_shape = {2, 6};
  check_backward(r, gen, 0.0);
  check_finite_differences(r, gen);
  OpCase big{"reshape", op_attrs("reshape", {{"shape", std::vector<int64_t>{-1}}})};
  big.inputs = {random_tensor({300, 700}, gen)};
  big.out_shape = {210000};
  check_backward(big, gen, 0.0);
}

TEST_CASE("expand backward sums over the repeated dims", "[cpu][backward][expand]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  struct Case { Shape in; std::vector<int64_t> shape; Shape out; };
  std::vector<Case> cases = {
      {{1, 1, 8}, {5, -1, -1}, {5, 1, 8}},
      {{3, 4}, {2, 3, 4}, {2, 3, 4}},
      {{2, 1, 3}, {-1, 6, -1}, {2, 6, 3}},
      {{2, 3}, {2, 3}, {2, 3}},
  };
  for (const Case& k : cases) {
    INFO("in " << shape_str(k.in) << " out " << shape_str(k.out));
    OpCase c{"expand", op_attrs("expand", {{"shape", k.shape}})};
    c.inputs = {random_tensor(k.in, gen)};
    c.out_shape = k.out;
    check_backward(c, gen);
    check_finite_differences(c, gen);
  }
}

TEST_CASE("parameter backward accumulates dy into its weight and gives the input zeros",
          "[cpu][backward][parameter]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  OpCase c{"parameter", op_attrs("parameter", {{"shape", std::vector<int64_t>{1, 3, 4}}})};
  c.inputs = {random_tensor({5, 2}, gen)};
  c.params = {random_tensor({1, 3, 4}, gen)};
  c.out_shape = {1, 3, 4};
  check_backward(c, gen, 0.0);
  check_finite_differences(c, gen);
}

TEST_CASE("scale backward multiplies dy by its factor", "[cpu][backward][scale]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  OpCase c{"scale", op_attrs("scale", {{"factor", 0.28867513459481287}})};
  c.inputs = {random_tensor({3, 2, 16, 12}, gen)};
  c.out_shape = {3, 2, 16, 12};
  check_against_reference(c, 0.0);
  check_backward(c, gen, 0.0);
  check_finite_differences(c, gen);
}

TEST_CASE("index_select backward adds each entry's gradient at its index", "[cpu][backward][index_select]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (int64_t dim : {0, 1, -1}) {
    OpCase c{"index_select", op_attrs("index_select", {{"dim", dim}})};
    const Shape source{3, 5, 4};
    const size_t d = static_cast<size_t>(dim < 0 ? dim + 3 : dim);
    c.inputs = {random_tensor(source, gen), random_indices({9}, source[d], gen)};  // 9 of at most 5: repeats
    c.out_shape = source;
    c.out_shape[d] = 9;
    check_backward(c, gen);
    check_finite_differences(c, gen);
  }
}

}  // namespace
}  // namespace tandem::test

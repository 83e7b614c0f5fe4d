// sum, mean, amax, amin on the cpu: what the oracle cannot show (tests/oracle/cases/
// op_reduce.yaml has the rest against torch). amax's and amin's gradient shared evenly
// among tied extrema, on inputs built with ties (random inputs never tie); and the empty
// reductions, where torch gives 0 (sum), NaN (mean) or an error (amax, amin).
#include <cmath>

#include "kernel_test_util.h"

namespace tandem::test {
namespace {

OpCase reduce_case(const std::string& op, Tensor x, std::map<std::string, AttrValue> attrs, Shape out) {
  OpCase c{op, op_attrs(op, attrs)};
  c.inputs = {std::move(x)};
  c.out_shape = std::move(out);
  c.training = true;
  return c;
}

/// dx of `c` for the output gradient `dy`.
Tensor input_gradient(const OpCase& c, Kernel& kernel, const Tensor& y, const Tensor& dy) {
  std::vector<Tensor> outputs{y}, grad_outputs{dy}, grad_inputs{Tensor::empty(c.inputs[0].shape(), DType::float32)};
  std::vector<Tensor> grad_params;
  kernel.backward({c.inputs, c.params, outputs, grad_outputs, grad_inputs, grad_params, true, 0});
  return grad_inputs[0];
}

TEST_CASE("amax and amin share the gradient evenly among tied extrema, as torch", "[cpu][reduce]") {
  // rows: one maximum; two tied; three tied
  Tensor x = Tensor::from_vector<float>({3, 3}, {1.f, 3.f, 2.f, 5.f, 4.f, 5.f, 2.f, 2.f, 2.f});
  OpCase amax = reduce_case("amax", x, {{"dim", int64_t{1}}}, {3});
  auto kernel = make_kernel(amax);
  Tensor y = run_kernel(amax, *kernel);
  CHECK(y.to_vector<float>() == std::vector<float>{3.f, 5.f, 2.f});
  Tensor dx = input_gradient(amax, *kernel, y, Tensor::from_vector<float>({3}, {6.f, 8.f, 9.f}));
  CHECK(dx.to_vector<float>() == std::vector<float>{0.f, 6.f, 0.f, 4.f, 0.f, 4.f, 3.f, 3.f, 3.f});

  OpCase amin = reduce_case("amin", x, {{"dim", std::vector<int64_t>{0, 1}}, {"keepdim", true}}, {1, 1});
  auto min_kernel = make_kernel(amin);
  Tensor m = run_kernel(amin, *min_kernel);
  CHECK(m.to_vector<float>() == std::vector<float>{1.f});
  Tensor dm = input_gradient(amin, *min_kernel, m, Tensor::from_vector<float>({1, 1}, {2.f}));
  CHECK(dm.to_vector<float>() == std::vector<float>{2.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f});
}

TEST_CASE("a reduction over an empty dimension: sum 0, mean NaN, amax and amin refused", "[cpu][reduce]") {
  Tensor x = Tensor::empty({2, 0, 3}, DType::float32);
  auto sum = reduce_case("sum", x, {{"dim", int64_t{1}}}, {2, 3});
  Tensor s = run_kernel(sum, *make_kernel(sum));
  CHECK(s.to_vector<float>() == std::vector<float>(6, 0.f));
  auto mean = reduce_case("mean", x, {{"dim", int64_t{1}}}, {2, 3});
  for (float v : run_kernel(mean, *make_kernel(mean)).to_vector<float>()) CHECK(std::isnan(v));
  auto amax = reduce_case("amax", x, {{"dim", int64_t{1}}}, {2, 3});
  auto kernel = make_kernel(amax);
  REQUIRE_THROWS_WITH(run_kernel(amax, *kernel), Catch::Contains("amax: the input [2, 0, 3] is empty along a reduced "
                                                                 "dimension, which has no maximum"));
}

TEST_CASE("sum and mean over dims, adjacent or apart, match a plain loop", "[cpu][reduce]") {
  std::mt19937 gen(fresh_seed());
  Tensor x = random_tensor({2, 3, 4, 5}, gen);
  const std::vector<float> v = x.to_vector<float>();
  // over dims 1 and 3, keeping 0 and 2: y[a][c]
  OpCase sum = reduce_case("sum", x, {{"dim", std::vector<int64_t>{1, -1}}}, {2, 4});
  Tensor y = run_kernel(sum, *make_kernel(sum));
  OpCase mean = reduce_case("mean", x, {{"dim", std::vector<int64_t>{1, 3}}, {"keepdim", true}}, {2, 1, 4, 1});
  Tensor m = run_kernel(mean, *make_kernel(mean));
  for (int a = 0; a < 2; ++a)
    for (int c = 0; c < 4; ++c) {
      double want = 0;
      for (int b = 0; b < 3; ++b)
        for (int d = 0; d < 5; ++d) want += v[((a * 3 + b) * 4 + c) * 5 + d];
      CHECK(y.span<float>()[a * 4 + c] == Approx(want).epsilon(1e-5));
      CHECK(m.span<float>()[a * 4 + c] == Approx(want / 15).epsilon(1e-5));
    }
  Tensor dy = random_tensor({2, 1, 4, 1}, gen);
  auto kernel = make_kernel(mean);
  Tensor dx = input_gradient(mean, *kernel, m, dy);
  for (int i = 0; i < 120; ++i) {
    const int a = i / 60, c = (i / 5) % 4;
    CHECK(dx.span<float>()[i] == dy.span<float>()[a * 4 + c] / 15.f);
  }
}

}  // namespace
}  // namespace tandem::test

// Mixed precision: linear with bf16 / fp16 GEMMs over fp32 master weights against the
// CPU's fp32 (within 1e-2), and dynamic loss scaling's check, unscale and scale schedule.
#include "gpu_test_util.h"
#include "backends/cuda/loss_scaler.h"

namespace tandem::test {
namespace {

TEST_CASE("linear with bf16 or fp16 GEMMs stays within 1e-2 of fp32", "[gpu][linear][mixed]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (cuda::MatmulPrecision precision : {cuda::MatmulPrecision::bf16, cuda::MatmulPrecision::f16}) {
    INFO("precision " << (precision == cuda::MatmulPrecision::bf16 ? "bf16" : "f16"));
    gpu().set_matmul_precision(precision);
    for (auto [m, in, out] : {std::tuple<int64_t, int64_t, int64_t>{64, 256, 128}, {3, 17, 5}}) {
      OpCase c{"linear", op_attrs("linear", {{"in_features", in}, {"out_features", out}})};
      c.inputs = {random_tensor({m, in}, gen, -1.f, 1.f)};
      c.params = {random_tensor({out, in}, gen, -1.f, 1.f), random_tensor({out}, gen)};
      c.out_shape = {m, out};
      check_gpu_against_cpu(c, gen, 1e-2);
    }
  }
  gpu().set_matmul_precision(cuda::MatmulPrecision::f32);
}

TEST_CASE("a layer's precision reaches linear and matmul on tensor cores, within 1e-2 of fp32", "[gpu][mixed]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (Precision precision : {Precision::bf16, Precision::fp16}) {
    INFO("precision " << precision_name(precision));
    OpCase linear{"linear", op_attrs("linear", {{"in_features", 256}, {"out_features", 128}})};
    linear.inputs = {random_tensor({64, 256}, gen, -1.f, 1.f)};
    linear.params = {random_tensor({128, 256}, gen, -1.f, 1.f), random_tensor({128}, gen)};
    linear.out_shape = {64, 128};
    linear.precision = precision;  // the cpu runs bf16 too (fp16: fp32), to bf16's rounding
    check_gpu_against_cpu(linear, gen, 1e-2);
    // matmul on its three paths: folded, strided batched, per entry (a partial broadcast)
    for (auto [a, b, out] : {std::tuple<Shape, Shape, Shape>{{4, 32, 48}, {48, 40}, {4, 32, 40}},
                             {{4, 32, 48}, {4, 48, 40}, {4, 32, 40}},
                             {{2, 3, 32, 48}, {2, 1, 48, 40}, {2, 3, 32, 40}}}) {
      OpCase mm{"matmul", op_attrs("matmul", {})};
      mm.inputs = {random_tensor(a, gen, -1.f, 1.f), random_tensor(b, gen, -1.f, 1.f)};
      mm.out_shape = out;
      mm.precision = precision;
      check_gpu_against_cpu(mm, gen, 1e-2);
    }
  }
}

TEST_CASE("the loss scaler unscales finite gradients and flags an overflow", "[gpu][mixed]") {
  cuda::DynamicLossScaler scaler(gpu(), {.initial_scale = 1024.f});
  std::vector<Tensor> grads{to_gpu(Tensor::from_vector<float>({3}, {1024.f, -2048.f, 512.f})),
                            to_gpu(Tensor::from_vector<float>({2}, {0.f, 4096.f}))};
  CHECK(scaler.unscale_and_check(grads));
  CHECK(to_cpu(grads[0]).to_vector<float>() == std::vector<float>{1.f, -2.f, 0.5f});
  CHECK(to_cpu(grads[1]).to_vector<float>() == std::vector<float>{0.f, 4.f});
  grads.push_back(to_gpu(Tensor::from_vector<float>({2}, {1.f, INFINITY})));
  CHECK_FALSE(scaler.unscale_and_check(grads));
  std::vector<Tensor> nan{to_gpu(Tensor::from_vector<float>({1}, {NAN}))};
  CHECK_FALSE(scaler.unscale_and_check(nan));
}

TEST_CASE("the loss scale backs off on overflow and grows after clean steps", "[gpu][mixed]") {
  cuda::DynamicLossScaler scaler(gpu(), {.initial_scale = 65536.f, .growth_interval = 3});
  scaler.update(false);
  CHECK(scaler.scale() == 32768.f);
  scaler.update(true);
  scaler.update(true);
  CHECK(scaler.scale() == 32768.f);
  scaler.update(true);
  CHECK(scaler.scale() == 65536.f);
  CHECK(scaler.clean_steps() == 0);
  scaler.update(true);
  scaler.update(false);  // an overflow restarts the count
  scaler.update(true);
  scaler.update(true);
  CHECK(scaler.scale() == 32768.f);
}

}  // namespace
}  // namespace tandem::test

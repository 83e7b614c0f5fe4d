// The losses and fused optimizer updates on a GPU against the CPU's (backends/cpu/loss.cpp,
// runtime/optim): losses to double rounding, gradients to float rounding, optimizer
// steps bit for bit.
#include "gpu_test_util.h"
#include "backends/cuda/kernels/optimizer.cuh"
#include "backends/cpu/loss.h"
#include "backends/cuda/loss.h"
#include "runtime/optim/optimizer.h"

namespace tandem::test {
namespace {

void check_loss(const LossSpec& spec, const Tensor& input, const Tensor& target) {
  INFO(spec.op << " reduction " << spec.reduction << " smoothing " << spec.label_smoothing << " input "
               << shape_str(input.shape()));
  Tensor cpu_grad = Tensor::empty(input.shape(), DType::float32);
  LossValue want = cpu::compute_loss(spec, input, target, &cpu_grad);
  Tensor gpu_grad = gpu_garbage(input.shape(), DType::float32);
  LossValue got = cuda::compute_loss(gpu(), spec, to_gpu(input), to_gpu(target), &gpu_grad);
  CHECK(got.counted == want.counted);
  CHECK(got.correct == want.correct);
  if (std::isnan(want.loss)) CHECK(std::isnan(got.loss));
  else CHECK(got.loss == Approx(want.loss).epsilon(1e-10).margin(1e-12));
  require_close(to_cpu(gpu_grad), cpu_grad, 1e-6);
}

TEST_CASE("cross_entropy and nll_loss on a GPU match the CPU", "[gpu][loss]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (auto [n, c] : {std::pair<int64_t, int64_t>{1, 1}, {7, 5}, {64, 1000}, {3, 50000}, {0, 4}})
    for (const char* op : {"cross_entropy", "nll_loss"})
      for (const char* reduction : {"mean", "sum"})
        for (double smoothing : {0.0, 0.1}) {
          LossSpec spec;
          spec.op = op;
          spec.reduction = reduction;
          spec.label_smoothing = smoothing;
          spec.ignore_index = 2;
          Tensor target = random_indices({n}, c, gen);
          check_loss(spec, random_tensor({n, c}, gen, -5.f, 5.f), target);
        }
  LossSpec all_ignored;
  all_ignored.op = "cross_entropy";
  all_ignored.ignore_index = 0;
  // the mean over no targets: NaN, as torch
  check_loss(all_ignored, random_tensor({3, 4}, gen), Tensor::from_vector<int64_t>({3}, {0, 0, 0}));
}

TEST_CASE("a class target out of range is the user's error on a GPU too", "[gpu][loss][errors]") {
  LossSpec spec;
  spec.op = "cross_entropy";
  std::mt19937 gen(3);
  Tensor target = Tensor::from_vector<int64_t>({3}, {1, 9, 0});
  REQUIRE_THROWS_WITH(cuda::compute_loss(gpu(), spec, to_gpu(random_tensor({3, 4}, gen)), to_gpu(target), nullptr),
                      Catch::Contains("target 9 of sample 1"));
}

TEST_CASE("mse_loss and binary_cross_entropy_with_logits on a GPU match the CPU", "[gpu][loss]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (const char* op : {"mse_loss", "binary_cross_entropy_with_logits"})
    for (const char* reduction : {"mean", "sum"})
      for (Shape shape : {Shape{1}, Shape{7, 3}, Shape{512, 1000}, Shape{0}}) {
        LossSpec spec;
        spec.op = op;
        spec.reduction = reduction;
        check_loss(spec, random_tensor(shape, gen, -4.f, 4.f), random_tensor(shape, gen, 0.f, 1.f));
      }
}

/// Three steps of `config` on the CPU optimizer and on the GPU kernels, from the same
/// parameters and gradients: the parameters must agree bit for bit after each.
void check_optimizer(const OptimizerConfig& config, std::mt19937& gen) {
  INFO(config.name << " momentum " << config.momentum << " dampening " << config.dampening << " nesterov "
                   << config.nesterov << " weight_decay " << config.weight_decay);
  const Shape shape{1000, 37};
  Tensor p = random_tensor(shape, gen);
  std::vector<Tensor> cpu_params{p.clone()};
  Tensor gp = to_gpu(p);
  Tensor state_a = to_gpu(Tensor::zeros(shape, DType::float32)), state_b = to_gpu(Tensor::zeros(shape, DType::float32));
  auto optimizer = make_optimizer(config);
  const bool adam = config.name != "sgd";
  const double lr = config.lr;
  for (int64_t step = 1; step <= 3; ++step) {
    Tensor g = random_tensor(shape, gen);
    std::vector<Tensor> grads{g};
    optimizer->step(cpu_params, grads, lr);
    Tensor gg = to_gpu(g);
    const cudaStream_t stream = gpu().stream().get();
    if (adam)
      cuda::adam_update(optim_detail::adam_scalars(config, config.name == "adamw", lr, step), gp.data<float>(),
                        gg.data<float>(), state_a.data<float>(), state_b.data<float>(), gp.numel(), stream);
    else
      cuda::sgd_update(optim_detail::sgd_scalars(config, lr), gp.data<float>(), gg.data<float>(),
                       config.momentum != 0 ? state_a.data<float>() : nullptr, gp.numel(), step == 1, stream);
    INFO("step " << step);
    require_close(to_cpu(gp), cpu_params[0], 0.0);
  }
}

TEST_CASE("fused SGD and Adam(W) updates on a GPU match the CPU optimizers bit for bit", "[gpu][optim]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (double momentum : {0.0, 0.9})
    for (double dampening : {0.0, 0.25})
      for (bool nesterov : {false, true})
        for (double weight_decay : {0.0, 1e-2}) {
          if (nesterov && (momentum == 0 || dampening != 0)) continue;  // torch refuses these
          OptimizerConfig c;
          c.name = "sgd";
          c.lr = 0.05;
          c.momentum = momentum;
          c.dampening = dampening;
          c.nesterov = nesterov;
          c.weight_decay = weight_decay;
          check_optimizer(c, gen);
        }
  for (const char* name : {"adam", "adamw"})
    for (double weight_decay : {0.0, 1e-2}) {
      OptimizerConfig c;
      c.name = name;
      c.lr = 1e-3;
      c.weight_decay = weight_decay;
      check_optimizer(c, gen);
    }
}

}  // namespace
}  // namespace tandem::test

// Helpers for the GPU tests: the context of cuda:0, tensors up and down, and a check
// that runs an op's CUDA kernel and its CPU kernel on the same fresh random tensors and
// compares forward and backward (tests/backends' helpers make the cases).
#pragma once

#include "../backends/backward_test_util.h"
#include "backends/cuda/copies.h"
#include "backends/cuda/cuda_context.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/kernels/pointwise.cuh"

namespace tandem::test {

/// The context of CUDA device 0, made once and never destroyed: at exit the CUDA runtime
/// may be torn down before static destructors run.
inline cuda::CudaContext& gpu() {
  static cuda::CudaContext* ctx = new cuda::CudaContext(0);
  return *ctx;
}

inline Tensor to_gpu(const Tensor& t, cuda::CudaContext& ctx = gpu()) {
  return t.defined() ? cuda::to_device(t, ctx.allocator(), ctx.stream().get()) : Tensor();
}
inline Tensor to_cpu(const Tensor& t, cuda::CudaContext& ctx = gpu()) {
  return t.defined() ? cuda::to_host(t, ctx.stream().get()) : Tensor();
}

inline std::vector<Tensor> to_gpu(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(to_gpu(t));
  return out;
}

/// A device tensor of NaN (float32) or all-ones bytes (int64), so an unwritten element shows.
inline Tensor gpu_garbage(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, gpu().allocator());
  if (t.numel() == 0) return t;
  if (dtype == DType::float32)
    cuda::fill(t.data<float>(), NAN, t.numel(), gpu().stream().get());
  else
    REQUIRE(cudaMemsetAsync(t.raw_data(), 0xff, t.nbytes(), gpu().stream().get()) == cudaSuccess);
  return t;
}

inline std::unique_ptr<Kernel> make_gpu_kernel(const OpCase& c) {
  cuda::CudaKernelChoice choice = cuda::make_cuda_kernel(gpu(), c.spec());
  INFO("unsupported: " << choice.unsupported);
  REQUIRE(choice.kernel != nullptr);
  return std::move(choice.kernel);
}

/// The GPU kernel's forward on c's tensors (uploaded), downloaded.
inline Tensor run_gpu_forward(const OpCase& c, Kernel& kernel) {
  std::vector<Tensor> inputs = to_gpu(c.inputs), params = to_gpu(c.params);
  std::vector<Tensor> outputs{gpu_garbage(c.out_shape, c.out_dtype)};
  kernel.forward({inputs, params, outputs, c.training, c.seed, 0});
  return to_cpu(outputs[0]);
}

/// The GPU kernel's backward; `g` holds host gradients to start from, replaced by the results.
inline void run_gpu_backward(const OpCase& c, Kernel& kernel, const Tensor& out, const Tensor& grad_out, Grads& g) {
  std::vector<Tensor> inputs = to_gpu(c.inputs), params = to_gpu(c.params);
  std::vector<Tensor> outs{to_gpu(out)}, grad_outs{to_gpu(grad_out)};
  std::vector<Tensor> grad_inputs, grad_params;
  for (const Tensor& t : g.inputs) grad_inputs.push_back(to_gpu(t));
  for (const Tensor& t : g.params) grad_params.push_back(to_gpu(t));
  kernel.backward({inputs, params, outs, grad_outs, grad_inputs, grad_params, c.training, c.seed});
  for (size_t i = 0; i < g.inputs.size(); ++i) g.inputs[i] = to_cpu(grad_inputs[i]);
  for (size_t i = 0; i < g.params.size(); ++i) g.params[i] = to_cpu(grad_params[i]);
}

/// Whether the GPU kernel ran `c` other than in fp32: its forward differs from the fp32
/// kernel's on the same tensors (a precision that did not reach the products would not).
inline bool gpu_forward_differs_from_fp32(const OpCase& c) {
  OpCase f32 = c;
  f32.precision = Precision::fp32;
  const Tensor low = run_gpu_forward(c, *make_gpu_kernel(c)), full = run_gpu_forward(f32, *make_gpu_kernel(f32));
  double diff = 0;
  for (size_t i = 0; i < low.span<float>().size(); ++i)
    diff = std::max(diff, static_cast<double>(std::fabs(low.span<float>()[i] - full.span<float>()[i])));
  return diff > 0;
}

/// c's CUDA kernel against its CPU kernel: forward, then backward on a random output
/// gradient with parameter gradients starting from random values (they accumulate);
/// then, on the GPU alone, that two backward calls give twice one call's parameter
/// gradients and the same (assigned) input gradients.
inline void check_gpu_against_cpu(const OpCase& c, std::mt19937& gen, double rel = 1e-5, bool backward = true) {
  INFO("op " << c.op << " [" << c.attrs.str() << "] out " << shape_str(c.out_shape));
  auto cpu_kernel = make_kernel(c);
  auto gpu_kernel = make_gpu_kernel(c);
  Tensor want = run_kernel(c, *cpu_kernel);
  Tensor got = run_gpu_forward(c, *gpu_kernel);
  {
    INFO("forward");
    require_close(got, want, rel);
  }
  if (!backward) return;
  Tensor grad_out = random_tensor(c.out_shape, gen);
  std::vector<Tensor> start;
  for (const Tensor& p : c.params) start.push_back(random_tensor(p.shape(), gen));
  Grads cpu_grads = make_grads(c, NAN, &start);
  run_backward(c, *cpu_kernel, want, grad_out, cpu_grads);
  Grads gpu_grads = make_grads(c, NAN, &start);
  run_gpu_backward(c, *gpu_kernel, want, grad_out, gpu_grads);
  for (size_t i = 0; i < cpu_grads.inputs.size(); ++i) {
    INFO("grad of input " << i);
    if (cpu_grads.inputs[i].defined()) require_close(gpu_grads.inputs[i], cpu_grads.inputs[i], rel);
  }
  for (size_t i = 0; i < cpu_grads.params.size(); ++i) {
    INFO("grad of param " << i);
    require_close(gpu_grads.params[i], cpu_grads.params[i], rel);
  }
  Grads once = make_grads(c, NAN);
  run_gpu_backward(c, *gpu_kernel, want, grad_out, once);
  Grads twice = make_grads(c, NAN);
  run_gpu_backward(c, *gpu_kernel, want, grad_out, twice);
  for (Tensor& t : twice.inputs) t = t.defined() ? filled(t, NAN) : t;
  run_gpu_backward(c, *gpu_kernel, want, grad_out, twice);
  for (size_t i = 0; i < twice.inputs.size(); ++i) {
    INFO("input " << i << " grad is assigned, not accumulated");
    if (twice.inputs[i].defined()) require_close(twice.inputs[i], once.inputs[i], 1e-6);
  }
  for (size_t i = 0; i < twice.params.size(); ++i) {
    INFO("param " << i << " grad accumulates");
    require_close(twice.params[i], scaled(once.params[i], 2.f), 1e-5);
  }
}

}  // namespace tandem::test

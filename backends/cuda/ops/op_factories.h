// The factories of the CUDA backend's op kernels, one per op (backends/kernel.h's
// contract, on tensors in the device memory of the context's GPU; every call is queued on
// the context's compute stream and returns without waiting, unless it says otherwise).
// make_cuda_kernel() in cuda_kernels.cpp maps op names to these.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "backends/cuda/cuda_context.h"
#include "backends/kernel.h"

namespace tandem::cuda {

/// Thrown by a factory for a spec its kernel cannot run (a limit of the CUDA kernel, not
/// bad input); the registry turns it into "unsupported", so the runtime can fall back.
class Unsupported : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::unique_ptr<Kernel> make_linear_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_matmul_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_embedding_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_embedding_bag_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_index_select_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_relu_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_gelu_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_tanh_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_sigmoid_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_relu6_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_hardswish_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_hardsigmoid_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_silu_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_mish_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_exp_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_clamp_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_softmax_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_log_softmax_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_normalize_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_layer_norm_kernel(CudaContext& ctx, const KernelSpec& spec);
/// sum, mean, amax, amin (reduce.cpp).
std::unique_ptr<Kernel> make_reduce_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_batch_norm2d_kernel(CudaContext& ctx, const KernelSpec& spec);
/// conv1d, max_pool1d, avg_pool1d, batch_norm1d: the 2-D kernels on views (height_one.cpp).
std::unique_ptr<Kernel> make_height_one_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_conv2d_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_max_pool2d_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_avg_pool2d_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_dropout_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_add_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_mul_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_expand_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_scale_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_parameter_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_cat_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_narrow_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_permute_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_pad_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_roll_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_interpolate_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_flatten_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_reshape_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_multi_head_attention_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_gru_kernel(CudaContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_lstm_kernel(CudaContext& ctx, const KernelSpec& spec);

}  // namespace tandem::cuda

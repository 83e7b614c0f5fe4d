// The factories of the CPU backend's op kernels, one per op (see backends/kernel.h for
// the contract). find_cpu_kernel() in cpu_kernels.cpp maps op names to these.
#pragma once

#include <memory>

#include "backends/cpu/cpu_context.h"
#include "backends/kernel.h"
#include "backends/region_spec.h"

namespace tandem {

std::unique_ptr<Kernel> make_linear_kernel(CpuContext& ctx, const KernelSpec& spec);
/// Inference regions (fused_region.cpp): whether a layer may join one, and a region's
/// kernel (null when oneDNN lacks one of its fusions).
bool cpu_region_fusable(const KernelSpec& spec);
std::unique_ptr<Kernel> make_region_kernel(CpuContext& ctx, const RegionSpec& region);
/// linear's bf16 path (linear_bf16.cpp), which make_linear_kernel picks.
std::unique_ptr<Kernel> make_linear_bf16_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_matmul_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_embedding_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_embedding_bag_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_index_select_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_relu_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_gelu_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_tanh_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_sigmoid_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_relu6_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_hardswish_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_hardsigmoid_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_silu_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_mish_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_exp_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_clamp_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_softmax_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_log_softmax_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_normalize_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_layer_norm_kernel(CpuContext& ctx, const KernelSpec& spec);
/// sum, mean, amax, amin (reduce.cpp).
std::unique_ptr<Kernel> make_reduce_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_batch_norm2d_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_conv2d_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_max_pool2d_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_avg_pool2d_kernel(CpuContext& ctx, const KernelSpec& spec);
/// conv1d, max_pool1d, avg_pool1d, batch_norm1d: the 2-D kernels on views (height_one.cpp).
std::unique_ptr<Kernel> make_height_one_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_dropout_kernel(CpuContext& ctx, const KernelSpec& spec);  // and stochastic_depth
std::unique_ptr<Kernel> make_add_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_mul_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_expand_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_scale_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_parameter_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_cat_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_narrow_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_permute_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_pad_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_roll_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_interpolate_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_flatten_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_reshape_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_gru_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_lstm_kernel(CpuContext& ctx, const KernelSpec& spec);
std::unique_ptr<Kernel> make_multi_head_attention_kernel(CpuContext& ctx, const KernelSpec& spec);

}  // namespace tandem

#include "backends/cpu/cpu_kernels.h"

#include <array>
#include <utility>

#include "backends/cpu/ops/op_factories.h"

namespace tandem {

CpuKernelFactory find_cpu_kernel(std::string_view op) {
  // An explicit table, not static-initialisation registration: what the CPU backend can
  // run is visible here, in one place.
  static constexpr std::array<std::pair<std::string_view, CpuKernelFactory>, 51> kTable{{
      {"linear", make_linear_kernel},
      {"matmul", make_matmul_kernel},
      {"embedding", make_embedding_kernel},
      {"embedding_bag", make_embedding_bag_kernel},
      {"index_select", make_index_select_kernel},
      {"relu", make_relu_kernel},
      {"gelu", make_gelu_kernel},
      {"tanh", make_tanh_kernel},
      {"sigmoid", make_sigmoid_kernel},
      {"relu6", make_relu6_kernel},
      {"hardswish", make_hardswish_kernel},
      {"hardsigmoid", make_hardsigmoid_kernel},
      {"silu", make_silu_kernel},
      {"mish", make_mish_kernel},
      {"exp", make_exp_kernel},
      {"clamp", make_clamp_kernel},
      {"softmax", make_softmax_kernel},
      {"log_softmax", make_log_softmax_kernel},
      {"normalize", make_normalize_kernel},
      {"layer_norm", make_layer_norm_kernel},
      {"sum", make_reduce_kernel},
      {"mean", make_reduce_kernel},
      {"amax", make_reduce_kernel},
      {"amin", make_reduce_kernel},
      {"batch_norm2d", make_batch_norm2d_kernel},
      {"conv2d", make_conv2d_kernel},
      {"max_pool2d", make_max_pool2d_kernel},
      {"avg_pool2d", make_avg_pool2d_kernel},
      {"conv1d", make_height_one_kernel},
      {"max_pool1d", make_height_one_kernel},
      {"avg_pool1d", make_height_one_kernel},
      {"batch_norm1d", make_height_one_kernel},
      {"dropout", make_dropout_kernel},
      {"stochastic_depth", make_dropout_kernel},
      {"add", make_add_kernel},
      {"mul", make_mul_kernel},
      {"expand", make_expand_kernel},
      {"scale", make_scale_kernel},
      {"parameter", make_parameter_kernel},
      {"buffer", make_parameter_kernel},  // the same copy; a buffer has no gradient to add
      {"cat", make_cat_kernel},
      {"narrow", make_narrow_kernel},
      {"flatten", make_flatten_kernel},
      {"reshape", make_reshape_kernel},
      {"permute", make_permute_kernel},
      {"pad", make_pad_kernel},
      {"roll", make_roll_kernel},
      {"interpolate", make_interpolate_kernel},
      {"gru", make_gru_kernel},
      {"lstm", make_lstm_kernel},
      {"multi_head_attention", make_multi_head_attention_kernel},
  }};
  for (const auto& [name, factory] : kTable)
    if (name == op) return factory;
  return nullptr;
}

}  // namespace tandem

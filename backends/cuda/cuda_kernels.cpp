#include "backends/cuda/cuda_kernels.h"

#include <array>
#include <utility>

#include "backends/cuda/ops/op_factories.h"

namespace tandem::cuda {
namespace {

using Factory = std::unique_ptr<Kernel> (*)(CudaContext&, const KernelSpec&);

// An explicit table, as the CPU's: what the CUDA backend can run is visible in one place.
// Every CPU op has one (docs/cuda-backend.md says which limits remain).
constexpr std::array<std::pair<std::string_view, Factory>, 51> kTable{{
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
    {"multi_head_attention", make_multi_head_attention_kernel},
    {"gru", make_gru_kernel},
    {"lstm", make_lstm_kernel},
}};

Factory find(std::string_view op) {
  for (const auto& [name, factory] : kTable)
    if (name == op) return factory;
  return nullptr;
}

/// Ops whose kernels move bytes and so take any dtype; the rest compute on float32
/// (with int64 indices where the CPU's take them, and batch_norm2d's and batch_norm1d's int64 counter).
bool any_dtype(std::string_view op) {
  return op == "cat" || op == "narrow" || op == "flatten" || op == "reshape" || op == "permute" || op == "roll" ||
         op == "parameter" || op == "buffer";
}

}  // namespace

std::string cuda_dtype_mismatch(const KernelSpec& spec) {
  if (any_dtype(spec.op)) return {};
  const bool indexed = spec.op == "embedding" || spec.op == "embedding_bag";
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const DType want = indexed ? DType::int64 : DType::float32;
    // attention's masks (after its query, key and value) may be int64, as the graph checked
    const bool mask = spec.op == "multi_head_attention" && i > 0 && spec.inputs[i].dtype == DType::int64;
    if (spec.inputs[i].dtype != want && !mask)
      return spec.op + ": input " + std::to_string(i) + " is " + std::string(dtype_name(spec.inputs[i].dtype)) +
             ", the CUDA kernel takes " + std::string(dtype_name(want));
  }
  for (size_t i = 0; i < spec.params.size(); ++i) {
    const bool counter = spec.op.starts_with("batch_norm") && i + 1 == spec.params.size() && spec.params[i].shape.empty();
    if (spec.params[i].dtype != (counter ? DType::int64 : DType::float32))
      return spec.op + ": parameter " + std::to_string(i) + " is " + std::string(dtype_name(spec.params[i].dtype));
  }
  return {};
}

CudaKernelChoice make_cuda_kernel(CudaContext& ctx, const KernelSpec& spec) {
  Factory factory = find(spec.op);
  if (!factory) return {nullptr, "the CUDA backend has no kernel for op '" + spec.op + "'"};
  if (std::string why = cuda_dtype_mismatch(spec); !why.empty()) return {nullptr, why};
  try {
    return {factory(ctx, spec), {}};
  } catch (const Unsupported& e) {
    return {nullptr, e.what()};
  }
}

bool cuda_has_op(std::string_view op) { return find(op) != nullptr; }

std::vector<std::string_view> cuda_ops() {
  std::vector<std::string_view> out;
  for (const auto& [name, factory] : kTable) out.push_back(name);
  return out;
}

}  // namespace tandem::cuda

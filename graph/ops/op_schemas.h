// The schema of each op family (graph/ops/<family>.cpp); the registry gathers them. A
// family has one file name in graph/ops/, backends/cpu/ops/, backends/cuda/ops/ and
// backends/cuda/kernels/.
#pragma once

#include <vector>

#include "graph/op_schema.h"

namespace tandem {

std::vector<OpSchema> linear_schemas();      // linear
std::vector<OpSchema> matmul_schemas();      // matmul
std::vector<OpSchema> embedding_schemas();   // embedding, embedding_bag, index_select
std::vector<OpSchema> activation_schemas();  // relu, gelu, tanh, sigmoid, relu6, hardswish, ..., exp, clamp
std::vector<OpSchema> softmax_schemas();     // softmax, log_softmax, normalize
std::vector<OpSchema> reduce_schemas();      // sum, mean, amax, amin (reduce.h)
std::vector<OpSchema> dropout_schemas();     // dropout, stochastic_depth
std::vector<OpSchema> layer_norm_schemas();  // layer_norm
std::vector<OpSchema> batch_norm_schemas();  // batch_norm2d
std::vector<OpSchema> conv2d_schemas();      // conv2d
std::vector<OpSchema> pooling_schemas();     // max_pool2d, avg_pool2d
std::vector<OpSchema> height_one_schemas();  // conv1d, max_pool1d, avg_pool1d, batch_norm1d (height_one.h)
std::vector<OpSchema> binary_schemas();      // add, mul, expand, scale
std::vector<OpSchema> parameter_schemas();   // parameter, buffer
std::vector<OpSchema> shape_op_schemas();    // cat, narrow, flatten, reshape, permute
std::vector<OpSchema> pad_roll_schemas();    // pad, roll
std::vector<OpSchema> interpolate_schemas(); // interpolate
std::vector<OpSchema> rnn_schemas();         // gru, lstm
std::vector<OpSchema> attention_schemas();   // multi_head_attention
/// How many of multi_head_attention's inputs are masks (its attribute `masks`).
int64_t attention_mask_count(const Attributes& a);

/// Shared checks for schemas.
const TensorType& only_input(const std::vector<TensorType>& in);
void require_dtype(const TensorType& t, DType dtype, const std::string& what);
void require_rank_at_least(const TensorType& t, size_t rank, const std::string& what);

}  // namespace tandem

// The schema of each op family (graph/ops/*.cpp); the registry gathers them.
#pragma once

#include <vector>

#include "graph/op_schema.h"

namespace tandem {

std::vector<OpSchema> linear_schemas();        // linear, matmul
std::vector<OpSchema> embedding_schemas();     // embedding, embedding_bag
std::vector<OpSchema> activation_schemas();    // relu, gelu, tanh, sigmoid, softmax, log_softmax, dropout
std::vector<OpSchema> normalization_schemas(); // layer_norm, batch_norm2d
std::vector<OpSchema> convolution_schemas();   // conv2d
std::vector<OpSchema> pooling_schemas();       // max_pool2d, avg_pool2d
std::vector<OpSchema> elementwise_schemas();   // add, mul
std::vector<OpSchema> shape_op_schemas();      // cat, narrow, flatten, reshape
std::vector<OpSchema> recurrent_schemas();     // gru, lstm
std::vector<OpSchema> attention_schemas();     // multi_head_attention
/// How many of multi_head_attention's inputs are masks (its attribute `masks`).
int64_t attention_mask_count(const Attributes& a);

/// Shared checks for schemas.
const TensorType& only_input(const std::vector<TensorType>& in);
void require_dtype(const TensorType& t, DType dtype, const std::string& what);
void require_rank_at_least(const TensorType& t, size_t rank, const std::string& what);

}  // namespace tandem

// Reading an op's dims and attributes the same way on every backend: a negative dim
// counted from the end, padding_idx, products of shape ranges.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "core/tensor.h"
#include "graph/attributes.h"

namespace tandem {

/// `dim` in [-rank, rank) made non-negative; a rank-0 tensor accepts 0 and -1.
/// Throws UserError naming `op` when out of range.
inline int64_t normalize_dim(int64_t dim, int64_t rank, const char* op) {
  int64_t r = std::max<int64_t>(rank, 1);
  if (dim < -r || dim >= r)
    throw UserError(std::string(op) + ": dim " + std::to_string(dim) + " is out of range [" +
                    std::to_string(-r) + ", " + std::to_string(r - 1) + "] for a tensor of rank " +
                    std::to_string(rank));
  return dim < 0 ? dim + r : dim;
}

/// An embedding's padding_idx as a row number, or -1 when null; negative values count
/// from the end, as in torch. Throws UserError when out of range.
inline int64_t read_padding_idx(const Attributes& attrs, int64_t num_embeddings) {
  if (!attrs.has("padding_idx") || attrs.is_null("padding_idx")) return -1;
  int64_t p = attrs.get_int("padding_idx");
  if (p < -num_embeddings || p >= num_embeddings)
    throw UserError("padding_idx " + std::to_string(p) + " is out of range [" + std::to_string(-num_embeddings) +
                    ", " + std::to_string(num_embeddings) + ")");
  return p < 0 ? p + num_embeddings : p;
}

/// Product of shape[begin, end).
inline int64_t dims_product(const Shape& shape, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end && i < shape.size(); ++i) n *= shape[i];
  return n;
}

/// A tensor of `shape` seen as [outer, axis, inner] around the dimension `dim` names (an op's
/// attribute: negative from the end, checked by normalize_dim; a 0-d tensor is one of each):
/// element (o, a, i) is at (o * axis + a) * inner + i. For the ops along one dimension
/// (softmax, log_softmax, normalize) on every backend.
struct AroundDim {
  int64_t outer = 1, axis = 1, inner = 1;
};
inline AroundDim around_dim(const Shape& shape, int64_t dim, const char* op) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  const int64_t d = normalize_dim(dim, rank, op);
  return {dims_product(shape, 0, static_cast<size_t>(d)), rank == 0 ? 1 : shape[static_cast<size_t>(d)],
          dims_product(shape, static_cast<size_t>(d) + 1, shape.size())};
}

}  // namespace tandem

// embedding (a row gather) and embedding_bag (gather and reduce per bag: sum, mean, max),
// forward and backward, with the CPU backend's semantics (backends/cpu/ops/embedding.cpp):
// entries equal to padding_idx are skipped (and not counted by mean), an empty bag gives zeros.
//
//   embedding:      out [count, dim] = weight[idx]
//                   dweight[idx[i]] += dy[i]                    (accumulated, atomicAdd)
//   embedding_bag:  out [bags, dim] = reduce over the bag's entries of weight[idx]
//                   dweight[idx] += dy[bag] (sum), / used (mean), or to the first
//                   maximal entry per column (max, found again from the weight)
//
// Bad input never reads out of bounds: an index outside [0, num) gives nothing, and its
// position is recorded in `bad` (the smallest such position; bad[0] must start at
// kNoBadInput), as is a bad offset in bad[1]; the caller reads them back and reports them.
// The backward's atomicAdd makes the order of a row's sum vary between runs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tandem::cuda {

inline constexpr unsigned long long kNoBadInput = ~0ull;

struct EmbeddingShape {
  int64_t num = 0, dim = 0, count = 0;
  int64_t padding_idx = -1;  // -1: none
};

/// bad: one value, set to kNoBadInput before the call.
void embedding_forward(const EmbeddingShape& shape, const int64_t* idx, const float* weight, float* out,
                       unsigned long long* bad, cudaStream_t stream);
void embedding_backward(const EmbeddingShape& shape, const int64_t* idx, const float* dy, float* dweight,
                        cudaStream_t stream);

enum class BagMode : int { sum, mean, max };

struct BagShape {
  int64_t num = 0, dim = 0, bags = 0, count = 0;
  int64_t bag_len = 0;      // indices [bags, bag_len] when there are no offsets
  int64_t num_offsets = 0;  // offsets [num_offsets] otherwise (bag b: offsets[b] to offsets[b+1] or count)
  int64_t padding_idx = -1;
  BagMode mode = BagMode::mean;
};

/// offsets null: fixed-length bags. bad: two values (indices, offsets), set to kNoBadInput.
void embedding_bag_forward(const BagShape& shape, const int64_t* idx, const int64_t* offsets, const float* weight,
                           float* out, unsigned long long* bad, cudaStream_t stream);
/// The indices and offsets forward checked.
void embedding_bag_backward(const BagShape& shape, const int64_t* idx, const int64_t* offsets, const float* weight,
                            const float* dy, float* dweight, cudaStream_t stream);

/// index_select: source [outer, size, inner], idx [count] -> out [outer, count, inner].
struct IndexSelectShape {
  int64_t outer = 1, size = 0, inner = 1, count = 0;
};

/// out[o, i] = source[o, idx[i]]; an index outside [0, size) gives zeros and its position in
/// `bad` (one value, set to kNoBadInput before the call).
void index_select_forward(const IndexSelectShape& shape, const int64_t* idx, const float* source, float* out,
                          unsigned long long* bad, cudaStream_t stream);
/// dsource (assigned) = zeros, then dsource[o, idx[i]] += dy[o, i] (atomicAdd); the indices
/// forward checked.
void index_select_backward(const IndexSelectShape& shape, const int64_t* idx, const float* dy, float* dsource,
                           cudaStream_t stream);

}  // namespace tandem::cuda

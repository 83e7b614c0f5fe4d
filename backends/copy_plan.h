// cat and narrow as copies of rows, shared by the CPU and CUDA backends: the tensors are
// viewed as `outer` rows (the dims before `dim`), and each op moves a contiguous run of
// bytes per row. Byte counts, so that any dtype works. permute as a strided gather over
// the fewest dimensions the permutation needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/kernel.h"

namespace tandem {

/// cat along `dim`: output rows of out_row_bytes, input i contributing chunk_bytes[i] of each.
struct CatPlan {
  int64_t outer = 0;
  size_t out_row_bytes = 0;
  std::vector<size_t> chunk_bytes;
};

/// narrow: input rows of in_row bytes, of which the `slice` bytes from `offset` are the output's.
struct NarrowPlan {
  int64_t outer = 0;
  size_t in_row = 0, offset = 0, slice = 0;
};

/// permute: output element (i_0, .., i_{n-1}) of `sizes` (merged dims, outermost first) is
/// the input element at sum_k i_k * in_strides[k] (in elements). Size-1 dims are dropped
/// and dims that stay adjacent and in order merged, so a channel shuffle's transpose is
/// three dims and an identity one; the innermost is contiguous in the input when its stride
/// is 1 (a row copy). Empty `sizes`: one element. numel 0: nothing to copy.
struct PermutePlan {
  std::vector<int64_t> sizes;
  std::vector<int64_t> in_strides;
  int64_t numel = 0;
  size_t elem = 0;  // bytes per element
};

/// The forward gather (input -> output) and the backward one (output gradient -> input
/// gradient: the inverse permutation of the output's shape). UserError for a `dims` that is
/// not a permutation of the input's dims (the schema refuses it first).
PermutePlan plan_permute(const KernelSpec& spec);
PermutePlan plan_permute_backward(const KernelSpec& spec);

/// From the spec (attribute `dim`, negative counting from the end); UserError for a bad
/// dim, TANDEM_ASSERT for shapes the schema should have refused.
CatPlan plan_cat(const KernelSpec& spec);
NarrowPlan plan_narrow(const KernelSpec& spec);

}  // namespace tandem

// cat and narrow as copies of rows, shared by the CPU and CUDA backends: the tensors are
// viewed as `outer` rows (the dims before `dim`), and each op moves a contiguous run of
// bytes per row. Byte counts, so that any dtype works.
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

/// From the spec (attribute `dim`, negative counting from the end); UserError for a bad
/// dim, TANDEM_ASSERT for shapes the schema should have refused.
CatPlan plan_cat(const KernelSpec& spec);
NarrowPlan plan_narrow(const KernelSpec& spec);

}  // namespace tandem

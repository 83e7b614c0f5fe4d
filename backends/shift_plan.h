// pad and roll as one copy, shared by the CPU and CUDA backends: output element i reads
// the input at i - offset along each dim, wrapping round where the dim rolls, else taking
// the fill value where that falls outside the input (pad). Backward is the same copy the
// other way: a pad's gradient is the pad with negated offsets (a crop), a roll's the roll
// by the negated shifts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/kernel.h"

namespace tandem {

/// The copy over `sizes.size()` leading dims of blocks of `inner` elements (the trailing
/// dims neither op touches, contiguous in both tensors). Output block (i_0, ..) reads input
/// block (j_0, ..) with j_k = i_k - offsets[k], mod in_sizes[k] where wraps[k], and is
/// `fill` where some j_k falls outside [0, in_sizes[k]).
struct ShiftPlan {
  std::vector<int64_t> sizes;     // the output's leading dims
  std::vector<int64_t> in_sizes;  // the input's
  std::vector<int64_t> offsets;
  std::vector<char> wraps;
  int64_t inner = 1;
  int64_t blocks = 0;  // product of sizes
  size_t elem = 0;     // bytes per element
  uint64_t fill_bits = 0;  // the fill value as an element's bits (float32 for pad)
};

/// pad's forward (input -> output) and backward (output gradient -> input gradient).
ShiftPlan plan_pad(const KernelSpec& spec);
ShiftPlan plan_pad_backward(const KernelSpec& spec);
/// roll's forward and backward. UserError for shifts and dims the schema refuses.
ShiftPlan plan_roll(const KernelSpec& spec);
ShiftPlan plan_roll_backward(const KernelSpec& spec);

}  // namespace tandem

#include "backends/shift_plan.h"

#include <cstring>

#include "backends/op_args.h"

namespace tandem {
namespace {

/// The plan for `from` -> `to` (same rank) with per-dim offsets and wraps: trailing dims
/// with no offset, no wrap and the same size merge into the inner block.
ShiftPlan shift_plan(const Shape& from, const Shape& to, const std::vector<int64_t>& offsets,
                     const std::vector<char>& wraps, size_t elem) {
  TANDEM_ASSERT(from.size() == to.size() && offsets.size() == to.size() && wraps.size() == to.size(),
                "shift plan: ranks differ");
  size_t lead = to.size();
  while (lead > 0 && offsets[lead - 1] == 0 && !wraps[lead - 1] && from[lead - 1] == to[lead - 1]) --lead;
  ShiftPlan p;
  p.elem = elem;
  p.inner = dims_product(to, lead, to.size());
  p.blocks = dims_product(to, 0, lead);
  p.sizes.assign(to.begin(), to.begin() + static_cast<std::ptrdiff_t>(lead));
  p.in_sizes.assign(from.begin(), from.begin() + static_cast<std::ptrdiff_t>(lead));
  p.offsets.assign(offsets.begin(), offsets.begin() + static_cast<std::ptrdiff_t>(lead));
  p.wraps.assign(wraps.begin(), wraps.begin() + static_cast<std::ptrdiff_t>(lead));
  for (size_t k = 0; k < lead; ++k)
    if (p.wraps[k] && p.in_sizes[k] > 0) p.offsets[k] %= p.in_sizes[k];  // a whole turn moves nothing
  return p;
}

/// pad's offsets per dim: `before` of each padded dim (torch's order: the last dim first).
std::vector<int64_t> pad_offsets(const KernelSpec& spec, size_t rank) {
  const std::vector<int64_t> pad = spec.attrs->get_ints("pad");
  TANDEM_ASSERT(pad.size() % 2 == 0 && pad.size() / 2 <= rank, "pad: the schema should have refused " + shape_str(pad));
  std::vector<int64_t> offsets(rank, 0);
  for (size_t k = 0; k < pad.size() / 2; ++k) offsets[rank - 1 - k] = pad[2 * k];
  return offsets;
}

uint64_t float_bits(float v) {
  uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  return bits;
}

/// roll's (flattened shape, per-dim shifts): with no dims, torch rolls the tensor as one
/// flat dim.
std::pair<Shape, std::vector<int64_t>> roll_shifts(const KernelSpec& spec, const Shape& shape) {
  const std::vector<int64_t> shifts = spec.attrs->get_ints("shifts");
  if (spec.attrs->is_null("dims")) {
    if (shifts.size() != 1) throw UserError("roll: shifts without dims must be one shift");
    return {Shape{dims_product(shape, 0, shape.size())}, shifts};
  }
  const std::vector<int64_t> dims = spec.attrs->get_ints("dims");
  if (dims.size() != shifts.size()) throw UserError("roll: shifts and dims differ in length");
  std::vector<int64_t> per_dim(shape.size(), 0);
  for (size_t k = 0; k < dims.size(); ++k)  // torch adds shifts of a dim named twice
    per_dim[normalize_dim(dims[k], static_cast<int64_t>(shape.size()), "roll")] += shifts[k];
  return {shape, per_dim};
}

ShiftPlan roll_plan(const KernelSpec& spec, int64_t sign) {
  const TensorDesc& x = spec.inputs.at(0);
  auto [shape, shifts] = roll_shifts(spec, x.shape);
  std::vector<char> wraps(shape.size(), 0);
  for (size_t d = 0; d < shape.size(); ++d) {
    wraps[d] = shifts[d] != 0;
    shifts[d] *= sign;
  }
  return shift_plan(shape, shape, shifts, wraps, dtype_size(x.dtype));
}

}  // namespace

ShiftPlan plan_pad(const KernelSpec& spec) {
  const TensorDesc& x = spec.inputs.at(0);
  const Shape& out = spec.outputs.at(0).shape;
  TANDEM_ASSERT(x.dtype == DType::float32, "pad: float32 only");
  ShiftPlan p = shift_plan(x.shape, out, pad_offsets(spec, x.shape.size()), std::vector<char>(out.size(), 0),
                           dtype_size(x.dtype));
  p.fill_bits = float_bits(static_cast<float>(spec.attrs->get_float("value")));
  return p;
}

ShiftPlan plan_pad_backward(const KernelSpec& spec) {
  const TensorDesc& x = spec.inputs.at(0);
  const Shape& out = spec.outputs.at(0).shape;
  std::vector<int64_t> offsets = pad_offsets(spec, x.shape.size());
  for (int64_t& o : offsets) o = -o;  // dx[j] = dy[j + before]; where the pad cropped, dx is 0
  return shift_plan(out, x.shape, offsets, std::vector<char>(out.size(), 0), dtype_size(x.dtype));
}

ShiftPlan plan_roll(const KernelSpec& spec) { return roll_plan(spec, 1); }
ShiftPlan plan_roll_backward(const KernelSpec& spec) { return roll_plan(spec, -1); }

}  // namespace tandem

// pad (torch.nn.functional.pad, mode constant) and roll (torch.roll): copies in which each
// output element reads one input element, at an offset along some dims, or a fill value
// (pad), or wrapping round (roll). Swin's shifted windows are a pad to whole windows and a
// roll by half a window. Both copy (Tandem's tensors are contiguous).
#include "graph/ops/op_schemas.h"

namespace tandem {
namespace {

std::string ints_str(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

/// The padded size of `d` (before + after may be negative: a crop); a fixed size below 0
/// is refused now, a symbolic one when a run binds it.
Dim padded(const Dim& d, int64_t before, int64_t after, int64_t dim) {
  if (d.is_constant() && d.constant() + before + after < 0)
    throw SchemaError("pad " + std::to_string(before) + ", " + std::to_string(after) + " of dimension " +
                      std::to_string(dim) + " (size " + std::to_string(d.constant()) +
                      ") leaves a negative size");
  return d + Dim(before + after);
}

OpSchema pad() {
  OpSchema s;
  s.name = "pad";
  s.summary = "pad (or crop, where negative) the last dims with a constant (torch.nn.functional.pad)";
  // torch's order: pairs (before, after) from the last dim backwards
  s.attrs = {{"pad", AttrType::int_list, {}, true},
             {"mode", AttrType::string, std::string("constant"), false, false, {"constant"}},
             {"value", AttrType::number, 0.0}};
  s.validate = [](Attributes& a) {
    const std::vector<int64_t> p = a.get_ints("pad");
    if (p.empty() || p.size() % 2 != 0)
      throw SchemaError("pad " + ints_str(p) +
                        " must have an even number of entries: (before, after) for the last dim, then the one before");
  };
  s.infer = [](const std::vector<TensorType>& in, const Attributes& a) {
    const TensorType& x = in[0];
    require_dtype(x, DType::float32, "the input");
    const std::vector<int64_t> p = a.get_ints("pad");
    const size_t rank = x.shape.size();
    if (p.size() / 2 > rank)
      throw SchemaError("pad " + ints_str(p) + " pads " + std::to_string(p.size() / 2) + " dimensions but the input " +
                        sym_shape_str(x.shape) + " has " + std::to_string(rank));
    TensorType out = x;
    for (size_t k = 0; k < p.size() / 2; ++k) {
      const size_t d = rank - 1 - k;
      out.shape[d] = padded(x.shape[d], p[2 * k], p[2 * k + 1], static_cast<int64_t>(d));
    }
    return out;
  };
  s.check_bound = [](const std::vector<Shape>& in, const Attributes& a) {
    const std::vector<int64_t> p = a.get_ints("pad");
    for (size_t k = 0; k < p.size() / 2; ++k) {
      const size_t d = in[0].size() - 1 - k;
      padded(Dim(in[0][d]), p[2 * k], p[2 * k + 1], static_cast<int64_t>(d));
    }
  };
  return s;
}

OpSchema roll() {
  OpSchema s;
  s.name = "roll";
  s.summary = "shift elements along dims, those past the end coming back at the start (torch.roll)";
  s.attrs = {{"shifts", AttrType::int_list, {}, true}, {"dims", AttrType::int_list, {}, false, true}};
  s.infer = [](const std::vector<TensorType>& in, const Attributes& a) {
    const TensorType& x = in[0];
    const std::vector<int64_t> shifts = a.get_ints("shifts");
    if (a.is_null("dims")) {
      if (shifts.size() != 1)
        throw SchemaError("shifts " + ints_str(shifts) +
                          " without dims must be one shift (of the flattened tensor, as torch.roll)");
      return x;
    }
    const std::vector<int64_t> dims = a.get_ints("dims");
    if (dims.size() != shifts.size())
      throw SchemaError("shifts " + ints_str(shifts) + " and dims " + ints_str(dims) +
                        " must have as many entries (a shift for each dim)");
    for (int64_t d : dims) normalize_dim(d, static_cast<int64_t>(x.shape.size()), "dims entry");
    return x;
  };
  return s;
}

}  // namespace

std::vector<OpSchema> pad_roll_schemas() { return {pad(), roll()}; }

}  // namespace tandem

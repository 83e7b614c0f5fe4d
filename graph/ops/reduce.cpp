// sum, mean, amax and amin over dimensions (torch.sum, torch.mean, torch.amax, torch.amin):
// `dim` an int, a list, or null for all of them; `keepdim` keeps each reduced dimension as 1.
#include "graph/ops/reduce.h"

#include "graph/ops/op_schemas.h"

namespace tandem {
namespace {

OpSchema reduction(std::string name, std::string summary) {
  OpSchema s;
  s.name = std::move(name);
  s.summary = std::move(summary);
  s.attrs = {{"dim", AttrType::int_list, std::monostate{}, false, true},  // null: every dimension
             {"keepdim", AttrType::boolean, false}};
  s.infer = [](const std::vector<TensorType>& in, const Attributes& a) {
    const TensorType& x = only_input(in);
    require_dtype(x, DType::float32, "the input");
    const std::vector<bool> reduced = reduced_dims(a, static_cast<int64_t>(x.shape.size()));
    TensorType y = x;
    y.shape.clear();
    for (size_t d = 0; d < x.shape.size(); ++d) {
      if (!reduced[d]) y.shape.push_back(x.shape[d]);
      else if (a.get_bool("keepdim")) y.shape.push_back(Dim(1));
    }
    return y;
  };
  return s;
}

}  // namespace

std::vector<bool> reduced_dims(const Attributes& a, int64_t rank) {
  std::vector<bool> reduced(static_cast<size_t>(rank), a.is_null("dim"));
  if (a.is_null("dim")) return reduced;
  const std::vector<int64_t> dims = a.get_ints("dim");
  if (dims.empty()) return std::vector<bool>(static_cast<size_t>(rank), true);
  for (int64_t dim : dims) {
    if (rank == 0 && (dim == 0 || dim == -1)) continue;  // torch lets a scalar reduce over dim 0 or -1
    const int64_t d = normalize_dim(dim, rank, "dim");
    if (reduced[static_cast<size_t>(d)])
      throw SchemaError("dim " + std::to_string(d) + " is given twice in dim " + shape_str(dims));
    reduced[static_cast<size_t>(d)] = true;
  }
  return reduced;
}

std::vector<OpSchema> reduce_schemas() {
  return {
      reduction("sum", "the sum over `dim` (all by default), keepdim as torch.sum"),
      reduction("mean", "the mean over `dim` (all by default), keepdim as torch.mean"),
      reduction("amax", "the maximum over `dim` (all by default), keepdim as torch.amax; its gradient is shared "
                        "evenly among equal maxima"),
      reduction("amin", "the minimum over `dim` (all by default), keepdim as torch.amin; its gradient is shared "
                        "evenly among equal minima"),
  };
}

}  // namespace tandem

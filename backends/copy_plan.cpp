#include "backends/copy_plan.h"

#include "backends/op_args.h"

namespace tandem {

CatPlan plan_cat(const KernelSpec& spec) {
  const Shape& out = spec.outputs.at(0).shape;
  TANDEM_ASSERT(spec.inputs.size() >= 1 && !out.empty(), "cat: no inputs or a rank-0 output");
  const int64_t dim = normalize_dim(spec.attrs->get_int("dim"), static_cast<int64_t>(out.size()), "cat");
  const size_t elem = dtype_size(spec.outputs[0].dtype);
  CatPlan p;
  p.outer = dims_product(out, 0, dim);
  const size_t inner_bytes = static_cast<size_t>(dims_product(out, dim + 1, out.size())) * elem;
  p.out_row_bytes = static_cast<size_t>(out[dim]) * inner_bytes;
  int64_t total = 0;
  for (const TensorDesc& in : spec.inputs) {
    TANDEM_ASSERT(in.shape.size() == out.size(), "cat: input rank differs from the output's");
    p.chunk_bytes.push_back(static_cast<size_t>(in.shape[dim]) * inner_bytes);
    total += in.shape[dim];
  }
  TANDEM_ASSERT(total == out[dim], "cat: inputs do not add up to the output along dim");
  return p;
}

NarrowPlan plan_narrow(const KernelSpec& spec) {
  const Shape& in = spec.inputs.at(0).shape;
  const Shape& out = spec.outputs.at(0).shape;
  const int64_t dim = normalize_dim(spec.attrs->get_int("dim"), static_cast<int64_t>(in.size()), "narrow");
  const int64_t start = spec.attrs->get_int("start"), length = spec.attrs->get_int("length");
  TANDEM_ASSERT(start >= 0 && length >= 1 && start + length <= in[dim] && out[dim] == length,
                "narrow: start " + std::to_string(start) + " + length " + std::to_string(length) + " outside dim " +
                    std::to_string(dim) + " of " + shape_str(in));
  const size_t inner =
      static_cast<size_t>(dims_product(in, dim + 1, in.size())) * dtype_size(spec.inputs[0].dtype);
  NarrowPlan p;
  p.outer = dims_product(in, 0, dim);
  p.in_row = static_cast<size_t>(in[dim]) * inner;
  p.offset = static_cast<size_t>(start) * inner;
  p.slice = static_cast<size_t>(length) * inner;
  return p;
}

namespace {

/// `dims` normalised against `rank`, checked to name each dimension once.
std::vector<int64_t> permutation(const KernelSpec& spec, int64_t rank) {
  std::vector<int64_t> dims = spec.attrs->get_ints("dims");
  if (static_cast<int64_t>(dims.size()) != rank)
    throw UserError("permute: dims has " + std::to_string(dims.size()) + " entries for an input of rank " +
                    std::to_string(rank));
  std::vector<bool> named(static_cast<size_t>(rank), false);
  for (int64_t& d : dims) {
    d = normalize_dim(d, rank, "permute");
    if (named[d]) throw UserError("permute: dims names dimension " + std::to_string(d) + " twice");
    named[d] = true;
  }
  return dims;
}

PermutePlan gather_plan(const Shape& in, const std::vector<int64_t>& dims, size_t elem) {
  const size_t rank = in.size();
  std::vector<int64_t> stride(rank, 1);
  for (size_t d = rank; d-- > 1;) stride[d - 1] = stride[d] * in[d];
  PermutePlan p;
  p.elem = elem;
  p.numel = dims_product(in, 0, rank);
  for (int64_t d : dims) {
    if (in[d] == 1) continue;  // no step to take
    if (!p.sizes.empty() && p.in_strides.back() == stride[d] * in[d]) {
      p.sizes.back() *= in[d];  // follows the previous dim in the input too: one dim
      p.in_strides.back() = stride[d];
    } else {
      p.sizes.push_back(in[d]);
      p.in_strides.push_back(stride[d]);
    }
  }
  return p;
}

}  // namespace

PermutePlan plan_permute(const KernelSpec& spec) {
  const Shape& in = spec.inputs.at(0).shape;
  const std::vector<int64_t> dims = permutation(spec, static_cast<int64_t>(in.size()));
  PermutePlan p = gather_plan(in, dims, dtype_size(spec.inputs[0].dtype));
  TANDEM_ASSERT(p.numel == shape_numel(spec.outputs.at(0).shape), "permute: output size differs from the input's");
  return p;
}

PermutePlan plan_permute_backward(const KernelSpec& spec) {
  const Shape& out = spec.outputs.at(0).shape;
  const std::vector<int64_t> dims = permutation(spec, static_cast<int64_t>(out.size()));
  std::vector<int64_t> inverse(dims.size());
  for (size_t k = 0; k < dims.size(); ++k) inverse[dims[k]] = static_cast<int64_t>(k);
  return gather_plan(out, inverse, dtype_size(spec.outputs[0].dtype));
}

}  // namespace tandem

// Data files hold one sample per row (a CSV line, dimension 0 of a safetensors tensor); a
// sequence-first model takes its batch elsewhere ([T, batch] for a GRU with batch_first
// false). The loader gathers rows, and this moves the sample dimension where the model
// declares `batch`, so neither the file format nor the model has to bend to the other.
#include <cstring>

#include "runtime/data/dataset.h"

namespace tandem {
namespace {

// [B, d1 .. dk] -> [d1 .. d_bd, B, d_bd+1 .. dk]: out[o, b, i] = in[b, o, i], where o runs
// over the dimensions before batch_dim and i over those after.
Tensor move_batch_dim(const Tensor& t, int batch_dim, Allocator& memory) {
  TANDEM_ASSERT(batch_dim > 0 && batch_dim < t.dim(), "batch_dim " + std::to_string(batch_dim) + " for shape " +
                                                          shape_str(t.shape()));
  const Shape& in = t.shape();
  Shape out_shape(in.begin() + 1, in.end());
  out_shape.insert(out_shape.begin() + batch_dim, in[0]);
  int64_t outer = 1, inner = 1;
  for (int d = 1; d <= batch_dim; ++d) outer *= in[d];
  for (int64_t d = batch_dim + 1; d < t.dim(); ++d) inner *= in[d];
  Tensor out = Tensor::empty(std::move(out_shape), t.dtype(), memory);
  const size_t chunk = static_cast<size_t>(inner) * dtype_size(t.dtype());
  auto src = static_cast<const char*>(t.raw_data());
  auto dst = static_cast<char*>(out.raw_data());
  const int64_t b_count = in[0];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t b = 0; b < b_count; ++b)
      std::memcpy(dst + (o * b_count + b) * chunk, src + (b * outer + o) * chunk, chunk);
  return out;
}

}  // namespace

TensorMap to_model_layout(TensorMap batch, const std::vector<ColumnSpec>& columns, Allocator& memory) {
  for (const ColumnSpec& c : columns) {
    if (c.batch_dim == 0) continue;
    auto it = batch.find(c.name);
    TANDEM_ASSERT(it != batch.end(), "batch has no column '" + c.name + "'");
    it->second = move_batch_dim(it->second, c.batch_dim, memory);
  }
  return batch;
}

}  // namespace tandem

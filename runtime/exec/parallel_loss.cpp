#include "runtime/exec/parallel_loss.h"

#include <cstring>
#include <limits>

#include "core/error.h"

namespace tandem {
namespace {

/// Rows [start, start + length) of `t` along `dim`, copied into a new host tensor.
Tensor narrow_copy(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  Shape shape = t.shape();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
  for (size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
  const size_t element = dtype_size(t.dtype());
  const size_t row = static_cast<size_t>(shape[dim] * inner) * element;
  const size_t slice = static_cast<size_t>(length * inner) * element;
  shape[dim] = length;
  Tensor out = Tensor::empty(shape, t.dtype());
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(static_cast<char*>(out.raw_data()) + o * slice,
                static_cast<const char*>(t.raw_data()) + o * row + static_cast<size_t>(start * inner) * element, slice);
  return out;
}

}  // namespace

Tensor parallel_loss_target(const Tensor& target, const ParallelLoss& parallel, size_t part) {
  const int64_t rows = parallel.parts.back().start + parallel.parts.back().length;
  const int64_t dim = target.shape().size() > static_cast<size_t>(parallel.dim) && target.shape()[parallel.dim] == rows
                          ? parallel.dim
                          : 0;
  TANDEM_ASSERT(target.shape()[dim] == rows, "the target has no dim the replicas' chunks split");
  return narrow_copy(target, dim, parallel.parts[part].start, parallel.parts[part].length);
}

LossValue combine_parallel_losses(const std::vector<LossValue>& values, bool mean, std::vector<float>& gradient_scales) {
  LossValue total;
  for (const LossValue& v : values) {
    total.counted += v.counted;
    total.correct += v.correct;
    total.scores.insert(total.scores.end(), v.scores.begin(), v.scores.end());
    total.labels.insert(total.labels.end(), v.labels.begin(), v.labels.end());
  }
  gradient_scales.assign(values.size(), 1.0f);
  for (size_t k = 0; k < values.size(); ++k) {
    const LossValue& v = values[k];
    if (v.counted > 0) total.loss += mean ? v.loss * static_cast<double>(v.counted) / static_cast<double>(total.counted) : v.loss;
    if (mean)
      gradient_scales[k] =
          total.counted > 0 ? static_cast<float>(static_cast<double>(v.counted) / static_cast<double>(total.counted)) : 0.0f;
  }
  if (total.counted == 0 && mean) total.loss = std::numeric_limits<double>::quiet_NaN();  // as torch: 0/0
  return total;
}

}  // namespace tandem

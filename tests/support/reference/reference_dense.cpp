// Reference linear, matmul, embedding and embedding_bag (see reference_ops.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "tests/support/reference/reference_ops.h"

namespace tandem::reference {

void linear(const KernelSpec& spec, const KernelArgs& args) {
  const Tensor& x = args.inputs[0];
  const float* w = args.params[0].data<float>();
  const float* b = args.params.size() > 1 ? args.params[1].data<float>() : nullptr;
  int64_t in = x.shape().back(), out = args.params[0].shape()[0];
  int64_t rows = out == 0 ? 0 : args.outputs[0].numel() / out;
  float* y = args.outputs[0].data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b ? b[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) acc += double(x.data<float>()[r * in + i]) * w[o * in + i];
      y[r * out + o] = static_cast<float>(acc);
    }
}

// Element (coords...) of a row-major tensor of `shape`, coords aligned to the right end.
static int64_t offset_of(const Shape& shape, const std::vector<int64_t>& coords) {
  int64_t off = 0;
  for (size_t i = 0; i < shape.size(); ++i) off = off * shape[i] + coords[i];
  return off;
}

void matmul(const KernelSpec& spec, const KernelArgs& args) {
  Shape as = args.inputs[0].shape(), bs = args.inputs[1].shape();
  bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(as.begin(), 1);
  if (b1) bs.push_back(1);
  int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  size_t batch_rank = std::max(as.size(), bs.size()) - 2;
  Shape batch(batch_rank, 1);
  for (size_t i = 0; i < batch_rank; ++i) {
    int64_t da = i + as.size() >= batch_rank + 2 ? as[i + as.size() - 2 - batch_rank] : 1;
    int64_t db = i + bs.size() >= batch_rank + 2 ? bs[i + bs.size() - 2 - batch_rank] : 1;
    batch[i] = da == 1 ? db : da;  // a 1 broadcasts to the other, 0 included
  }
  const float* a = args.inputs[0].data<float>();
  const float* b = args.inputs[1].data<float>();
  float* y = args.outputs[0].data<float>();
  int64_t batches = 1;
  for (int64_t d : batch) batches *= d;
  std::vector<int64_t> coord(batch_rank);
  for (int64_t bi = 0; bi < batches; ++bi) {
    int64_t rest = bi;
    for (size_t d = batch_rank; d-- > 0;) {
      coord[d] = rest % batch[d];
      rest /= batch[d];
    }
    // The batch coordinates of each input: right-aligned, 0 where its dim is 1.
    auto input_offset = [&](const Shape& s) {
      size_t own = s.size() - 2;
      std::vector<int64_t> c(own);
      for (size_t i = 0; i < own; ++i) c[i] = s[i] == 1 ? 0 : coord[batch_rank - own + i];
      Shape bshape(s.begin(), s.end() - 2);
      return offset_of(bshape, c) * s[s.size() - 2] * s.back();
    };
    int64_t oa = input_offset(as), ob = input_offset(bs);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (int64_t kk = 0; kk < k; ++kk) acc += double(a[oa + i * k + kk]) * b[ob + kk * n + j];
        y[(bi * m + i) * n + j] = static_cast<float>(acc);
      }
  }
}

void embedding(const KernelSpec& spec, const KernelArgs& args) {
  const Tensor& w = args.params[0];
  int64_t dim = w.shape()[1];
  auto idx = args.inputs[0].span<int64_t>();
  float* y = args.outputs[0].data<float>();
  for (size_t i = 0; i < idx.size(); ++i)
    for (int64_t d = 0; d < dim; ++d) y[i * dim + d] = w.data<float>()[idx[i] * dim + d];
}

void embedding_bag(const KernelSpec& spec, const KernelArgs& args) {
  const Attributes& attrs = *spec.attrs;
  const Tensor& w = args.params[0];
  int64_t num = w.shape()[0], dim = w.shape()[1];
  int64_t padding = -1;
  if (!attrs.is_null("padding_idx")) padding = (attrs.get_int("padding_idx") + num) % num;
  const std::string& mode = attrs.get_string("mode");
  auto idx = args.inputs[0].span<int64_t>();
  int64_t bags = args.outputs[0].shape()[0];
  // Bag b is idx[begin[b], end[b]).
  std::vector<int64_t> begin(bags), end(bags);
  if (args.inputs.size() == 1) {
    int64_t len = args.inputs[0].shape()[1];
    for (int64_t b = 0; b < bags; ++b) begin[b] = b * len, end[b] = (b + 1) * len;
  } else {
    auto offsets = args.inputs[1].span<int64_t>();
    for (int64_t b = 0; b < bags; ++b) {
      begin[b] = offsets[b];
      end[b] = b + 1 < static_cast<int64_t>(offsets.size()) ? offsets[b + 1] : static_cast<int64_t>(idx.size());
    }
  }
  float* y = args.outputs[0].data<float>();
  for (int64_t b = 0; b < bags; ++b)
    for (int64_t d = 0; d < dim; ++d) {
      double acc = mode == "max" ? -INFINITY : 0.0;
      int64_t count = 0;
      for (int64_t i = begin[b]; i < end[b]; ++i) {
        if (idx[i] == padding) continue;
        double v = w.data<float>()[idx[i] * dim + d];
        acc = mode == "max" ? std::max(acc, v) : acc + v;
        ++count;
      }
      if (count == 0) acc = 0.0;
      else if (mode == "mean") acc /= double(count);
      y[b * dim + d] = static_cast<float>(acc);
    }
}

}  // namespace tandem::reference

#include "runtime/data/dataset.h"

#include <cstring>

namespace tandem {

Dataset::Dataset(TensorMap tensors) : tensors_(std::move(tensors)) {
  const std::string* first = nullptr;
  for (const auto& [name, t] : tensors_) {
    if (!t.defined()) throw UserError("dataset tensor '" + name + "' is undefined");
    if (t.dim() == 0) throw UserError("dataset tensor '" + name + "' is a scalar; samples lie along dimension 0");
    if (first == nullptr) {
      first = &name;
      size_ = t.size(0);
    } else if (t.size(0) != size_) {
      throw UserError("dataset tensor '" + name + "' has " + std::to_string(t.size(0)) + " samples, '" + *first +
                      "' has " + std::to_string(size_));
    }
  }
}

TensorMap Dataset::gather(std::span<const int64_t> indices, Allocator& memory) const {
  for (int64_t i : indices)
    TANDEM_ASSERT(i >= 0 && i < size_, "gather: index " + std::to_string(i) + " outside a dataset of " +
                                           std::to_string(size_) + " samples");
  TensorMap out;
  for (const auto& [name, t] : tensors_) {
    Shape shape = t.shape();
    shape[0] = static_cast<int64_t>(indices.size());
    Tensor g = Tensor::empty(std::move(shape), t.dtype(), memory);
    size_t row_bytes = size_ == 0 ? 0 : t.nbytes() / static_cast<size_t>(size_);
    if (row_bytes > 0) {
      auto src = static_cast<const char*>(t.raw_data());
      auto dst = static_cast<char*>(g.raw_data());
      for (size_t k = 0; k < indices.size(); ++k)
        std::memcpy(dst + k * row_bytes, src + static_cast<size_t>(indices[k]) * row_bytes, row_bytes);
    }
    out.emplace(name, std::move(g));
  }
  return out;
}

}  // namespace tandem

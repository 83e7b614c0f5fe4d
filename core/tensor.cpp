#include "core/tensor.h"

#include <cstring>

namespace tandem {

int64_t shape_numel(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw UserError("negative dimension in shape " + shape_str(shape));
    if (d != 0 && n > INT64_MAX / d) throw UserError("shape " + shape_str(shape) + " has too many elements");
    n *= d;
  }
  return n;
}

std::string shape_str(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Tensor Tensor::empty(Shape shape, DType dtype, Allocator& allocator) {
  Tensor t;
  t.numel_ = shape_numel(shape);
  if (t.numel_ > (int64_t{1} << 40) / static_cast<int64_t>(dtype_size(dtype)))
    throw UserError("tensor of shape " + shape_str(shape) + " is larger than 1 TiB");
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.storage_ = allocator.allocate(t.nbytes());
  return t;
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> storage, Shape shape, DType dtype, size_t offset) {
  Tensor t;
  t.numel_ = shape_numel(shape);
  TANDEM_ASSERT(offset + t.numel_ * dtype_size(dtype) <= storage->bytes(), "storage too small for " + shape_str(shape));
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.storage_ = std::move(storage);
  t.offset_ = offset;
  return t;
}

Tensor Tensor::zeros(Shape shape, DType dtype, Allocator& allocator) {
  Tensor t = empty(std::move(shape), dtype, allocator);
  std::memset(t.raw_data(), 0, t.nbytes());
  return t;
}

Tensor Tensor::view(Shape shape) const {
  TANDEM_ASSERT(shape_numel(shape) == numel_, "view " + shape_str(shape) + " of " + shape_str(shape_));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::clone(Allocator& memory) const {
  Tensor t = empty(shape_, dtype_, memory);
  std::memcpy(t.raw_data(), raw_data(), nbytes());
  return t;
}

Bf16Copy* Tensor::bf16_copy(bool make) const {
  if (!storage_ || dtype_ != DType::float32 || storage_->device() != Device::cpu() || offset_ != 0 ||
      nbytes() != storage_->bytes())
    return nullptr;
  return make ? &storage_->bf16_copy() : storage_->find_bf16_copy();
}

}  // namespace tandem

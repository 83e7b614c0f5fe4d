// Tensor: shape, dtype, device, and shared storage on that device. Always contiguous
// (row-major); a view (reshape) shares storage and may start at an offset.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/storage.h"

namespace tandem {

using Shape = std::vector<int64_t>;

/// Number of elements of `shape`; throws UserError when it overflows int64.
int64_t shape_numel(std::span<const int64_t> shape);
/// "[2, 3, 4]"
std::string shape_str(std::span<const int64_t> shape);

class Tensor;
/// Tensors by name: weights (state_dict names), graph inputs and outputs.
using TensorMap = std::map<std::string, Tensor>;

class Tensor {
 public:
  Tensor() = default;
  /// Uninitialised tensor from `allocator` (host memory by default).
  static Tensor empty(Shape shape, DType dtype, Allocator& allocator = cpu_allocator());
  static Tensor zeros(Shape shape, DType dtype, Allocator& allocator = cpu_allocator());
  /// Host tensor holding a copy of `values`.
  template <class T>
  static Tensor from_vector(Shape shape, const std::vector<T>& values);
  /// A tensor over existing storage (which must hold offset + the tensor's bytes).
  static Tensor from_storage(std::shared_ptr<Storage> storage, Shape shape, DType dtype, size_t offset = 0);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t d) const { return shape_.at(d < 0 ? d + dim() : d); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }

  /// nullptr for an undefined tensor.
  void* raw_data() const { return storage_ ? static_cast<char*>(storage_->data()) + offset_ : nullptr; }
  template <class T>
  T* data() const {
    TANDEM_ASSERT(dtype_ == dtype_of<T>(), "tensor holds " + std::string(dtype_name(dtype_)));
    return static_cast<T*>(raw_data());
  }
  template <class T>
  std::span<T> span() const { return {data<T>(), static_cast<size_t>(numel_)}; }
  template <class T>
  std::vector<T> to_vector() const { auto s = span<T>(); return {s.begin(), s.end()}; }

  /// Same storage, new shape with the same number of elements.
  Tensor view(Shape shape) const;
  /// A deep copy in fresh host memory (from `memory`: pinned memory, say).
  Tensor clone(Allocator& memory = cpu_allocator()) const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  /// The bf16 copy of this float32 tensor's values that its storage keeps (Note [a weight's
  /// bf16 copy] in core/bf16_copy.h), made if `make` and there is none yet. Null where
  /// there is none, or where this tensor is not the whole of a storage in host memory.
  Bf16Copy* bf16_copy(bool make = false) const;

 private:
  Shape shape_;
  DType dtype_ = DType::float32;
  int64_t numel_ = 0;
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
};

template <class T>
Tensor Tensor::from_vector(Shape shape, const std::vector<T>& values) {
  Tensor t = empty(std::move(shape), dtype_of<T>());
  TANDEM_ASSERT(static_cast<int64_t>(values.size()) == t.numel(), "from_vector: size mismatch");
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

}  // namespace tandem

#include "core/bf16_copy.h"

#include <cstdlib>
#include <new>

namespace tandem {

Bf16Copy::Bf16Copy(size_t n) : n_(n) {
  const size_t bytes = (n * sizeof(uint16_t) + 63) / 64 * 64;
  data_ = static_cast<uint16_t*>(std::aligned_alloc(64, bytes == 0 ? 64 : bytes));
  if (data_ == nullptr) throw std::bad_alloc();
}

Bf16Copy::~Bf16Copy() { std::free(data_); }

}  // namespace tandem

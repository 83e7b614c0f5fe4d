#include "graph/batch_dim.h"

namespace tandem {

std::optional<int> batch_dim_of(const SymShape& shape) {
  std::optional<int> found;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d].is_constant()) continue;
    if (found) return std::nullopt;
    found = static_cast<int>(d);
  }
  return found;
}

}  // namespace tandem

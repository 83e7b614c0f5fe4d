#include "core/dtype.h"

namespace tandem {

std::optional<DType> parse_dtype(std::string_view text) {
  if (text == "float32" || text == "float" || text == "f32") return DType::float32;
  if (text == "int64" || text == "long" || text == "i64") return DType::int64;
  return std::nullopt;
}

}  // namespace tandem

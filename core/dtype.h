// Element types. Activations are float32, indices int64.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tandem {

enum class DType : uint8_t { float32, int64 };

constexpr size_t dtype_size(DType t) { return t == DType::float32 ? 4 : 8; }
constexpr std::string_view dtype_name(DType t) { return t == DType::float32 ? "float32" : "int64"; }
/// "float32" / "float" / "f32", "int64" / "long" / "i64".
std::optional<DType> parse_dtype(std::string_view text);

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::float32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::int64; }

}  // namespace tandem

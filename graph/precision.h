// Precision: the number format a layer's matrix work runs in (`precision:` in the YAML,
// `--precision` on the CLI). It follows torch.autocast: only the ops whose cost is a
// matrix product (linear, matmul, conv2d and conv1d, multi_head_attention's projections and
// products, gru's and lstm's gate GEMMs) take their inputs and weights in bf16 or fp16,
// accumulate in fp32 and write fp32; every other op (softmax, layer_norm, losses, reductions) and
// everything the optimizer holds (master weights, gradients, state) stay fp32.
//
// Header-only: the CUDA module compiles the parts of graph/ it uses itself, and this is
// read by every backend's kernel factory.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tandem {

enum class Precision : uint8_t { fp32, bf16, fp16 };

constexpr std::string_view precision_name(Precision p) {
  switch (p) {
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
    default: return "fp32";
  }
}

/// "fp32", "bf16", "fp16" (and torch's names "float32", "bfloat16", "float16"); nullopt else.
constexpr std::optional<Precision> parse_precision(std::string_view text) {
  if (text == "fp32" || text == "float32") return Precision::fp32;
  if (text == "bf16" || text == "bfloat16") return Precision::bf16;
  if (text == "fp16" || text == "float16") return Precision::fp16;
  return std::nullopt;
}

/// What a message offers when a precision is unknown.
inline constexpr std::string_view kPrecisionChoices = "fp32, bf16 or fp16";

/// Whether `op` does matrix work that a reduced precision applies to (torch.autocast's
/// "lower precision" list, for the ops Tandem has). The rest run in fp32 whatever the
/// layer's precision says.
constexpr bool op_runs_in_reduced_precision(std::string_view op) {
  return op == "linear" || op == "matmul" || op == "conv2d" || op == "conv1d" || op == "multi_head_attention" ||
         op == "gru" || op == "lstm";
}

}  // namespace tandem

#include "runtime/cli/precision_option.h"

#include "core/error.h"

namespace tandem::cli {

void add_precision_flag(CLI::App& app, std::string& text) {
  app.add_option("--precision", text,
                 "what the matrix work (linear, matmul, conv2d, attention, GRU/LSTM) runs in: fp32, bf16 or fp16; "
                 "replaces the model's precision: (default: the model file's, else fp32)");
}

std::optional<Precision> parse_precision_option(const std::string& text) {
  if (text.empty()) return std::nullopt;
  const std::optional<Precision> precision = parse_precision(text);
  if (!precision)
    throw UserError("--precision '" + text + "' is not a precision; use " + std::string(kPrecisionChoices));
  return precision;
}

}  // namespace tandem::cli

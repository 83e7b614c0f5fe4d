// --precision fp32|bf16|fp16, shared by `tandem plan`, `run` and `train`: the model's
// precision for this run, in place of its file's top-level `precision:` (layers and blocks
// that declare their own keep it; docs/precision.md).
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "graph/precision.h"

namespace tandem::cli {

/// Registers --precision; the text is checked by parse_precision_option.
void add_precision_flag(CLI::App& app, std::string& text);
/// The precision --precision gave (nullopt when it was not given). UserError naming the
/// flag and the choices for anything else.
std::optional<Precision> parse_precision_option(const std::string& text);

}  // namespace tandem::cli

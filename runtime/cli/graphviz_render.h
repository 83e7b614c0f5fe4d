// Rendering a plan's Graphviz text to SVG or PNG with Graphviz's own `dot` program (the
// graphviz package; scripts/setup.sh installs it). Tandem does not link Graphviz: the DOT
// it writes for --dot is the whole interface, and a machine without it can still plan.
#pragma once

#include <string>

namespace tandem::cli {

/// The path of the `dot` program on PATH; empty when Graphviz is not installed.
std::string find_dot_program();

/// UserError (exit code 2) for `flag` ("--svg") when there is no `dot` on PATH, saying how
/// to install Graphviz; called before any work, with the output paths' check.
void require_dot_program(const std::string& flag);

/// Writes `dot_text` rendered as `format` ("svg" or "png") to `path`. UserError naming
/// `flag` and dot's complaint when dot fails.
void render_dot(const std::string& dot_text, const std::string& format, const std::string& path, const std::string& flag);

}  // namespace tandem::cli

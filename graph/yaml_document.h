// The one YAML document of a model file, read strictly. yaml-cpp accepts things a model
// file must not hold silently: a second document after `---` (ignored by YAML::Load), the
// same key twice in a mapping (node[key] finds the first), a double-quoted string left
// open across a line break (read to the end of the file as one string), and bytes that are
// not UTF-8 text. Private to graph/.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

namespace tandem {

/// Containers (mappings and lists) open at once that a model file may use: a model nests
/// a few levels per block, and blocks nest at most 64 deep (graph/load_graph.cpp).
constexpr int kMaxYamlDepth = 256;

/// Parses `text` as one YAML document and returns its root (null when the text holds
/// none). ModelError "FILE:LINE:COLUMN: ..." for text that is not UTF-8 or holds control
/// characters, invalid YAML, nesting past kMaxYamlDepth, a key repeated in a mapping (with
/// where it was first), a quoted string without its closing quote, or a second document
/// with content.
YAML::Node load_yaml_document(const std::string& text, const std::string& file_name);

}  // namespace tandem

// Loading a model file: YAML -> validated Graph with every tensor's shape inferred.
#pragma once

#include <string>

#include "core/error.h"
#include "graph/graph.h"

namespace tandem {

/// A problem in a model file; what() reads "FILE:LINE:COLUMN: layer 'PATH': what is wrong".
class ModelError : public UserError {
 public:
  ModelError(const std::string& message, SourceLocation location)
      : UserError(message), location_(std::move(location)) {}
  const SourceLocation& location() const { return location_; }

 private:
  SourceLocation location_;
};

/// Reads and validates `path`. Throws ModelError for anything wrong with the file;
/// never crashes on malformed input (size, nesting and repetition are bounded).
Graph load_graph(const std::string& path);
/// The same from text; `file_name` is used in messages.
Graph load_graph_from_string(const std::string& text, const std::string& file_name);

}  // namespace tandem

// The files a command will write, checked before it does any work: a training run that
// fails to save its checkpoint after an hour, or an inference run that overwrites its own
// inputs, is refused in the first millisecond instead (docs/training.md).
#pragma once

#include <string>
#include <vector>

namespace tandem::cli {

/// A path a command reads or writes, with the flag (or argument) that named it.
struct NamedPath {
  std::string flag;  // "--save", "the model file", ...
  std::string path;  // empty: not given, skipped
};

/// UserError "--save 'PATH': ..." (exit code 2) unless every non-empty output can be
/// written: it is not a directory, its directory exists and may be written in, an
/// existing file may be replaced, and it is none of `inputs` (the same file under any
/// name) nor another output. Writes nothing.
void check_output_paths(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs);

/// UserError "--log-dir 'PATH': ..." (exit code 2) unless `dir` (skipped when empty) is a
/// directory that may be written in, or one that can be created: its nearest existing
/// ancestor is a directory that may be written in. Creates nothing.
void check_output_directory(const NamedPath& dir);

}  // namespace tandem::cli

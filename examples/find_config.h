// How the examples find a model file from any directory: as given (relative to the working
// directory), else relative to the source tree (configs/seed_mixed.yaml), else in its
// configs/ (seed_mixed.yaml). A path found nowhere is returned as given, so that loading
// it reports the name the user wrote.
#pragma once

#include <filesystem>
#include <string>

inline std::string find_config(const std::string& path) {
  namespace fs = std::filesystem;
  if (fs::exists(path) || fs::path(path).is_absolute()) return path;
  const fs::path source(TANDEM_EXAMPLE_SOURCE_DIR);
  for (const fs::path& candidate : {source / path, source / "configs" / path})
    if (fs::exists(candidate)) return candidate.string();
  return path;
}

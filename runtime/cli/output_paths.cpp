#include "runtime/cli/output_paths.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/printable_text.h"

namespace tandem::cli {
namespace {

namespace fs = std::filesystem;

/// The same file: equal (device, inode) when both exist, else equal normalised absolute
/// paths (an output that does not exist yet can only clash with another output).
bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  std::error_code ec;
  return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

void check_one(const NamedPath& out) {
  auto fail = [&](const std::string& why) {
    throw UserError(out.flag + " '" + printable_text(out.path) + "': " + why);
  };
  struct stat st {};
  if (::stat(out.path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) fail("is a directory; give a file name inside it");
    if (!S_ISREG(st.st_mode)) fail("exists and is not a regular file; give another file name");
  }
  fs::path parent = fs::path(out.path).parent_path();
  if (parent.empty()) parent = ".";
  struct stat dir {};
  if (::stat(parent.c_str(), &dir) != 0)
    fail("the directory '" + printable_text(parent.string()) + "' does not exist (" + std::strerror(errno) + "); create it first");
  if (!S_ISDIR(dir.st_mode)) fail("'" + printable_text(parent.string()) + "' is not a directory");
  // The file is written to a temporary beside it and renamed (checkpoints), or created
  // there: either way the directory must take new files.
  if (::access(parent.c_str(), W_OK | X_OK) != 0)
    fail("the directory '" + printable_text(parent.string()) + "' cannot be written in (" + std::strerror(errno) + ")");
}

}  // namespace

void check_output_directory(const NamedPath& dir) {
  if (dir.path.empty()) return;
  auto fail = [&](const std::string& why) {
    throw UserError(dir.flag + " '" + printable_text(dir.path) + "': " + why);
  };
  // the directory, or the nearest of its ancestors that exists: the one the run writes in
  fs::path existing = dir.path;
  struct stat st {};
  while (::stat(existing.c_str(), &st) != 0) {
    if (errno != ENOENT && errno != ENOTDIR) fail("'" + printable_text(existing.string()) + "' cannot be read (" + std::strerror(errno) + ")");
    fs::path parent = existing.parent_path();
    if (parent.empty() || parent == existing) parent = ".";
    existing = parent;
  }
  if (!S_ISDIR(st.st_mode))
    fail(existing == fs::path(dir.path) ? "is a file, not a directory; give a directory (it is created when missing)"
                                        : "'" + printable_text(existing.string()) + "' is not a directory");
  if (::access(existing.c_str(), W_OK | X_OK) != 0)
    fail("the directory '" + printable_text(existing.string()) + "' cannot be written in (" + std::strerror(errno) + ")");
}

void check_output_paths(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const NamedPath& out = outputs[i];
    if (out.path.empty()) continue;
    check_one(out);
    for (const NamedPath& in : inputs)
      if (!in.path.empty() && same_file(out.path, in.path))
        throw UserError(out.flag + " '" + printable_text(out.path) + "' is the file " + in.flag +
                        " reads; writing it would destroy it: give another file name");
    for (size_t j = 0; j < i; ++j)
      if (!outputs[j].path.empty() && same_file(out.path, outputs[j].path))
        throw UserError(out.flag + " '" + printable_text(out.path) + "' is also " + outputs[j].flag +
                        "'s file; give them different file names");
  }
}

}  // namespace tandem::cli

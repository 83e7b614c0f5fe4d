// Opening a file a user named (weights, inputs, data, checkpoints, model files) for
// reading. Only a regular file is accepted, and opening never waits: a named pipe with no
// writer would block open() and read() forever, and a device such as /dev/zero never ends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tandem {

/// A regular file open for reading, with its size; closed on destruction. Not thread-safe
/// to move, safe to read_at from several threads.
class ReadableFile {
 public:
  /// Opens `path`. UserError "PATH: cannot open: WHY" when it is missing or unreadable, or
  /// is a directory, a named pipe, a device or a socket (naming which).
  explicit ReadableFile(const std::string& path);
  ~ReadableFile();
  ReadableFile(const ReadableFile&) = delete;
  ReadableFile& operator=(const ReadableFile&) = delete;

  const std::string& path() const { return path_; }
  /// The size when opened.
  uint64_t size() const { return size_; }
  int fd() const { return fd_; }

  /// Reads exactly `n` bytes at `offset`; UserError naming the file on a read error or
  /// when the file ends first (it changed while being read).
  void read_at(uint64_t offset, size_t n, void* dst) const;
  /// Up to `n` bytes at `offset` (fewer at the end of the file); how many were read.
  size_t read_some_at(uint64_t offset, size_t n, void* dst) const;
  /// The whole file.
  std::string read_all() const;

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string path_;
};

}  // namespace tandem

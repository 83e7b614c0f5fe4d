// Private to runtime/data: reads a text file line by line, gzip or plain, through zlib
// (gzread passes plain files through unchanged). Holds one chunk of the file at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace tandem {

/// Owns its zlib handle. Not thread-safe.
class LineReader {
 public:
  /// Opens `path`; UserError "PATH: cannot open: WHY" when it is missing, unreadable or
  /// not a regular file (core/readable_file.h), and
  /// "PATH: not a gzip file" when `gzip` is set and the file does not start like one.
  LineReader(const std::string& path, bool gzip);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  /// The next line without its "\n" (and "\r"), valid until the next call; false at the
  /// end. UserError naming the file for a read or decompression error (a corrupt .gz).
  bool next(std::string_view& line);
  /// 1-based number of the line last returned.
  int64_t line_number() const { return line_number_; }
  /// About how many bytes of text the file holds (the size a gzip trailer records, or
  /// the file size): a hint for reserving memory, never trusted for correctness.
  int64_t size_hint() const { return size_hint_; }

 private:
  bool fill();

  struct Handle;
  std::unique_ptr<Handle> handle_;
  std::string path_;
  std::string buffer_;
  size_t begin_ = 0;   // start of the unread part of buffer_
  bool eof_ = false;
  int64_t line_number_ = 0;
  int64_t size_hint_ = 0;
};

}  // namespace tandem

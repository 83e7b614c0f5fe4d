#include "runtime/data/line_reader.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/readable_file.h"

namespace tandem {

namespace {
constexpr unsigned kChunkBytes = 1 << 16;
}

struct LineReader::Handle {
  gzFile file = nullptr;
  ~Handle() {
    if (file != nullptr) gzclose(file);
  }
};

LineReader::LineReader(const std::string& path, bool gzip) : handle_(std::make_unique<Handle>()), path_(path) {
  ReadableFile file(path);  // refuses directories, pipes and devices before zlib waits on one
  const auto file_size = static_cast<int64_t>(file.size());
  size_hint_ = file_size;
  if (gzip) {
    // gzread would read a file without the gzip magic as plain text; a .gz that is not
    // one is better refused by name than parsed as garbage.
    unsigned char magic[2] = {0, 0};
    size_t got = file.read_some_at(0, 2, magic);
    if (got != 2 || magic[0] != 0x1f || magic[1] != 0x8b) throw UserError(path + ": not a gzip file");
    // The trailer's ISIZE: the text's size mod 2^32 (of the last member only).
    unsigned char isize[4] = {0, 0, 0, 0};
    if (file_size >= 18 && file.read_some_at(static_cast<uint64_t>(file_size - 4), 4, isize) == 4)
      size_hint_ = std::max<int64_t>(file_size, isize[0] | isize[1] << 8 | isize[2] << 16 | int64_t{isize[3]} << 24);
  }
  // zlib reads through its own descriptor, which gzclose closes.
  int fd = ::dup(file.fd());
  if (fd >= 0) handle_->file = gzdopen(fd, "rb");
  if (handle_->file == nullptr) {
    int err = errno;
    if (fd >= 0) ::close(fd);
    throw UserError(path + ": cannot open: " + std::strerror(err));
  }
  gzbuffer(handle_->file, kChunkBytes);
}

LineReader::~LineReader() = default;

bool LineReader::fill() {
  if (eof_) return false;
  buffer_.erase(0, begin_);
  begin_ = 0;
  size_t old = buffer_.size();
  buffer_.resize(old + kChunkBytes);
  int got = gzread(handle_->file, buffer_.data() + old, kChunkBytes);
  if (got < 0) {
    int code = Z_OK;
    const char* message = gzerror(handle_->file, &code);
    buffer_.resize(old);
    if (code == Z_ERRNO) throw UserError(path_ + ": read error: " + std::strerror(errno));
    throw UserError(path_ + ": corrupt gzip data: " + (message ? message : "unknown zlib error"));
  }
  buffer_.resize(old + static_cast<size_t>(got));
  if (got == 0) {
    int code = Z_OK;
    const char* message = gzerror(handle_->file, &code);
    if (code != Z_OK) throw UserError(path_ + ": corrupt gzip data: " + (message ? message : "unknown zlib error"));
    eof_ = true;
    return false;
  }
  return true;
}

bool LineReader::next(std::string_view& line) {
  size_t searched = begin_;
  for (;;) {
    size_t nl = buffer_.find('\n', searched);
    if (nl != std::string::npos) {
      line = std::string_view(buffer_).substr(begin_, nl - begin_);
      begin_ = nl + 1;
      break;
    }
    searched = buffer_.size() - begin_;  // offset of the unsearched part after fill() compacts
    if (!fill()) {
      if (begin_ == buffer_.size()) return false;
      line = std::string_view(buffer_).substr(begin_);  // a last line without "\n"
      begin_ = buffer_.size();
      break;
    }
  }
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  ++line_number_;
  return true;
}

}  // namespace tandem

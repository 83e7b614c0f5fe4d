#include "core/readable_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace tandem {
namespace {

/// What a file that is not a regular one is, for the message.
const char* kind_of_file(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a named pipe (FIFO)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

ReadableFile::ReadableFile(const std::string& path) : path_(path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer. It is
  // cleared below for the regular file that remains; fstat on the open descriptor (not
  // stat on the path) so that the file checked is the file read.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd_ < 0) {
    int err = errno;
    throw UserError(path + ": cannot open: " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    int err = errno;
    ::close(fd_);
    throw UserError(path + ": cannot open: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw UserError(path + ": cannot open: it is " + kind_of_file(st.st_mode) +
                    ", not a regular file; Tandem reads files whole, so give the path of a file");
  }
  int flags = ::fcntl(fd_, F_GETFL);
  if (flags >= 0) ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
  size_ = static_cast<uint64_t>(st.st_size);
}

ReadableFile::~ReadableFile() {
  if (fd_ >= 0) ::close(fd_);
}

size_t ReadableFile::read_some_at(uint64_t offset, size_t n, void* dst) const {
  auto* out = static_cast<char*>(dst);
  size_t done = 0;
  while (done < n) {
    ssize_t got = ::pread(fd_, out + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      int err = errno;
      throw UserError(path_ + ": cannot read: " + std::strerror(err));
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

void ReadableFile::read_at(uint64_t offset, size_t n, void* dst) const {
  if (read_some_at(offset, n, dst) != n)
    throw UserError(path_ + ": file ended early; was it changed while being read?");
}

std::string ReadableFile::read_all() const {
  std::string text(size_, '\0');
  read_at(0, text.size(), text.data());
  return text;
}

}  // namespace tandem

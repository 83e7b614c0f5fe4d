#include "runtime/io/mapped_file.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/readable_file.h"

namespace tandem {

MappedFile::MappedFile(const ReadableFile& file) : size_(static_cast<size_t>(file.size())) {
  if (size_ == 0) return;  // mmap refuses a length of 0; an empty span says it all
  // MAP_POPULATE maps every page of the page cache in one call instead of one fault per
  // page as the data is touched. Read-only: populating a writable private mapping would
  // copy every page.
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE | MAP_POPULATE, file.fd(), 0);
  if (p == MAP_FAILED) {
    int err = errno;
    throw UserError(file.path() + ": cannot map the file into memory: " + std::strerror(err));
  }
  data_ = static_cast<std::byte*>(p);
  ::madvise(p, size_, MADV_SEQUENTIAL);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

}  // namespace tandem

// A file a user named, mapped into memory rather than read: loading a 2 GiB weights file
// with read() copied every byte through the kernel into fresh pages (9.3 s of an 11.5 s
// load was system time). Mapped, the page cache's pages are the data.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

namespace tandem {

class ReadableFile;

/// `file`'s bytes, mapped read-only and private, unmapped on destruction. The mapping stays valid after `file` closes. A file
/// that another program truncates while it is mapped makes reading past the new end fault
/// (SIGBUS): what is mapped is read at once and copied or dropped (safetensors.h).
class MappedFile {
 public:
  /// UserError naming the file when it cannot be mapped.
  explicit MappedFile(const ReadableFile& file);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const { return {data_, size_}; }

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tandem

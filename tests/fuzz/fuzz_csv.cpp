// Fuzz target: a CSV training file, plain or gzip, read by load_dataset through its real
// path (a file: the reader streams from one). The first byte picks the settings (a header
// line, gzip, a column mapping), the rest is the file. It either loads or is refused
// naming the file (and the line and column, where there is one).
#include <sys/mman.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/error.h"
#include "fuzz_target.h"
#include "runtime/data/dataset.h"

namespace {

/// One in-memory file, reached by two names: data.csv and data.csv.gz (symbolic links to
/// /proc/self/fd/N), so that an input costs no disk and the reader still opens a path.
struct MemoryFile {
  int fd = -1;
  std::filesystem::path dir;
  MemoryFile() {
    fd = ::memfd_create("fuzz_csv", MFD_CLOEXEC);
    if (fd < 0) tandem::fuzz::crash("memfd_create failed");
    dir = std::filesystem::temp_directory_path() / ("tandem-fuzz-csv-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::string target = "/proc/self/fd/" + std::to_string(fd);
    for (const char* name : {"data.csv", "data.csv.gz"}) {
      std::filesystem::remove(dir / name);
      std::filesystem::create_symlink(target, dir / name);
    }
  }
  ~MemoryFile() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  void write(const uint8_t* data, size_t size) const {
    if (::ftruncate(fd, 0) != 0) tandem::fuzz::crash("ftruncate failed");
    size_t done = 0;
    while (done < size) {
      ssize_t n = ::pwrite(fd, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) tandem::fuzz::crash("pwrite failed");
      done += static_cast<size_t>(n);
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const MemoryFile file;
  if (size == 0) return 0;
  const uint8_t settings = data[0];
  file.write(data + 1, size - 1);
  tandem::DataSpec spec;
  spec.path = (file.dir / (settings & 2 ? "data.csv.gz" : "data.csv")).string();
  spec.header = settings & 1;
  if (settings & 4) spec.columns = {{"label", "0"}, {"x", "1:4"}};
  tandem::ColumnSpec x;
  x.name = "x";
  x.sample_shape = {3};
  tandem::ColumnSpec label;
  label.name = "label";
  label.dtype = tandem::DType::int64;
  label.high = 5;
  label.ignored = -100;  // a loss's ignore_index
  try {
    tandem::Dataset d = tandem::load_dataset(spec, {x, label});
    if (d.size() < 1) tandem::fuzz::crash("a dataset of no samples loaded");
  } catch (const tandem::UserError& e) {
    tandem::fuzz::require_prefix(e.what(), spec.path);
  }
  return 0;
}

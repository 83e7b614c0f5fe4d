// TensorBoard's event file, written by hand: Debian packages no C or C++ library that writes
// it (TensorFlow and tensorboardX are Python, and not in Debian). The format is small: a
// TFRecord file `events.out.tfevents.<seconds>.<host>` whose records are
//   uint64 length, uint32 masked crc32c of the length, the data, uint32 masked crc32c of it
// (little-endian) and whose data is a serialized tensorflow.Event protobuf: wall_time
// (field 1, double), step (2, int64), file_version (3, "brain.Event:2", the first event
// only) or summary (5) with values {tag (1, string), simple_value (2, float)}. Those few
// fields are encoded here; TensorBoard reads the scalars under their tags.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem::cli {

/// CRC-32C (Castagnoli) of `data`, and TFRecord's masked form of it.
uint32_t crc32c(std::string_view data);
uint32_t masked_crc32c(std::string_view data);

class TensorBoardEvents {
 public:
  /// Creates a new event file in `directory` (which must exist): UserError naming it when
  /// it cannot be written.
  explicit TensorBoardEvents(const std::string& directory);
  ~TensorBoardEvents();
  TensorBoardEvents(const TensorBoardEvents&) = delete;
  TensorBoardEvents& operator=(const TensorBoardEvents&) = delete;

  /// One event of scalars at `step`, flushed: a dashboard reading the file as the run goes
  /// sees every step written so far.
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  void record(const std::string& data);
};

}  // namespace tandem::cli

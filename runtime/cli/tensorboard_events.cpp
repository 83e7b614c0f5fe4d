#include "runtime/cli/tensorboard_events.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/printable_text.h"

namespace tandem::cli {
namespace {

/// The table of the reflected Castagnoli polynomial, built once.
const std::array<uint32_t, 256>& crc32c_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

// Protobuf's wire format, the few pieces an Event needs.
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void tag(std::string& out, int field, int wire_type) { varint(out, (static_cast<uint64_t>(field) << 3) | wire_type); }
template <typename T>
void little_endian(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // x86 and arm64 are little-endian, as the format
  out.append(bytes, sizeof(T));
}
void length_delimited(std::string& out, int field, const std::string& bytes) {
  tag(out, field, 2);
  varint(out, bytes.size());
  out += bytes;
}

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// An Event with its wall time and step, to which the caller adds field 3 or 5.
std::string event_head(int64_t step) {
  std::string e;
  tag(e, 1, 1);
  little_endian(e, wall_time());
  tag(e, 2, 0);
  varint(e, static_cast<uint64_t>(step));
  return e;
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  const auto& table = crc32c_table();
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char byte : data) c = table[(c ^ byte) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

TensorBoardEvents::TensorBoardEvents(const std::string& directory) {
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch());
  // the pid too: two runs started in the same second into one directory get a file each
  path_ = (std::filesystem::path(directory) /
           ("events.out.tfevents." + std::to_string(seconds.count()) + "." + host + "." + std::to_string(getpid())))
              .string();
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_)
    throw UserError("--log-dir: cannot create the TensorBoard file '" + printable_text(path_) + "' (" + std::strerror(errno) + ")");
  std::string first = event_head(0);
  length_delimited(first, 3, "brain.Event:2");
  record(first);
}

TensorBoardEvents::~TensorBoardEvents() {
  if (file_) std::fclose(file_);
}

void TensorBoardEvents::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  std::string summary;
  for (const auto& [name, value] : values) {
    std::string v;
    length_delimited(v, 1, name);
    tag(v, 2, 5);
    little_endian(v, static_cast<float>(value));
    length_delimited(summary, 1, v);
  }
  std::string e = event_head(step);
  length_delimited(e, 5, summary);
  record(e);
}

void TensorBoardEvents::record(const std::string& data) {
  std::string r;
  little_endian(r, static_cast<uint64_t>(data.size()));
  little_endian(r, masked_crc32c(r));
  r += data;
  little_endian(r, masked_crc32c(data));
  if (std::fwrite(r.data(), 1, r.size(), file_) != r.size() || std::fflush(file_) != 0)
    throw UserError("--log-dir: cannot write the TensorBoard file '" + printable_text(path_) + "' (" + std::strerror(errno) + ")");
}

}  // namespace tandem::cli

#include "runtime/io/file_kind.h"

#include <algorithm>
#include <cstring>
#include <string_view>
#include <vector>

#include "core/readable_file.h"

namespace tandem {
namespace {

std::string_view as_text(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

bool starts_with(std::span<const std::byte> bytes, std::string_view prefix) {
  return as_text(bytes).starts_with(prefix);
}

uint64_t le(std::span<const std::byte> bytes, size_t offset, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t(std::to_integer<uint8_t>(bytes[offset + i])) << (8 * i);
  return v;
}

/// An 8-byte header length that fits the file, then the JSON object's '{'.
bool looks_like_safetensors(std::span<const std::byte> start, uint64_t file_size) {
  if (start.size() < 9 || file_size < 10) return false;
  uint64_t n = le(start, 0, 8);
  return n >= 2 && n <= file_size - 8 && start[8] == std::byte{'{'};
}

/// The name of the zip's first member, from its local header ("" when cut off).
std::string_view first_zip_member(std::span<const std::byte> start) {
  if (start.size() < 30) return {};
  size_t name_length = le(start, 26, 2);
  return as_text(start).substr(30, name_length);
}

/// No NUL and few control characters: what a text editor or a spreadsheet writes.
bool looks_like_text(std::span<const std::byte> start) {
  if (start.empty()) return false;
  size_t control = 0;
  for (std::byte b : start) {
    auto c = std::to_integer<unsigned char>(b);
    if (c == 0) return false;
    if (c < 0x20 && c != '\n' && c != '\r' && c != '\t') ++control;
  }
  return control * 50 < start.size();
}

/// Lines of comma-separated cells, the first line holding at least one comma.
bool looks_like_csv(std::string_view text) {
  std::string_view first_line = text.substr(0, text.find('\n'));
  return first_line.find(',') != std::string_view::npos && !first_line.starts_with('{') &&
         !first_line.starts_with('[');
}

bool ends_with(const std::string& s, std::string_view suffix) { return std::string_view(s).ends_with(suffix); }

}  // namespace

FileKind kind_of_file_start(std::span<const std::byte> start, uint64_t file_size) {
  if (looks_like_safetensors(start, file_size)) return FileKind::safetensors;
  if (starts_with(start, "\x93NUMPY")) return FileKind::npy;
  if (starts_with(start, "PK\x03\x04")) {
    std::string_view member = first_zip_member(start);
    if (member.ends_with(".npy")) return FileKind::npz;
    if (member.ends_with("data.pkl") || member.ends_with("/version") || member.ends_with(".data/version"))
      return FileKind::torch_zip;
    return FileKind::zip;
  }
  if (starts_with(start, "PK\x05\x06")) return FileKind::zip;  // an empty archive
  if (start.size() >= 2 && start[0] == std::byte{0x80} && std::to_integer<int>(start[1]) >= 2 &&
      std::to_integer<int>(start[1]) <= 5)
    return FileKind::pickle;
  if (starts_with(start, "\x1f\x8b")) return FileKind::gzip;
  if (looks_like_text(start)) return FileKind::text;
  return FileKind::unknown;
}

FileKind kind_of_file(const ReadableFile& file) {
  std::vector<std::byte> start(std::min<uint64_t>(file.size(), kFileKindProbeBytes));
  start.resize(file.read_some_at(0, start.size(), start.data()));
  return kind_of_file_start(start, file.size());
}

std::string describe_file_kind(FileKind kind, const std::string& path, std::span<const std::byte> start) {
  switch (kind) {
    case FileKind::safetensors: return "safetensors";
    case FileKind::npy: return "a NumPy array (.npy, numpy.save)";
    case FileKind::npz: return "a NumPy archive (.npz, numpy.savez)";
    case FileKind::torch_zip: return "a PyTorch file (torch.save)";
    case FileKind::pickle: return "a Python pickle (torch.save's legacy format or pickle.dump)";
    case FileKind::zip: return "a zip archive";
    case FileKind::gzip: return ends_with(path, ".csv.gz") ? "gzip-compressed CSV" : "a gzip file";
    case FileKind::text:
      if (ends_with(path, ".csv") || looks_like_csv(as_text(start))) return "CSV";
      if (ends_with(path, ".yaml") || ends_with(path, ".yml")) return "YAML";
      if (ends_with(path, ".json")) return "JSON";
      return "text";
    case FileKind::unknown: break;
  }
  return "not a format Tandem knows";
}

std::string wrong_kind_message(const ReadableFile& file, FileKind kind, const std::string& wanted) {
  std::vector<std::byte> start(std::min<uint64_t>(file.size(), kFileKindProbeBytes));
  start.resize(file.read_some_at(0, start.size(), start.data()));
  std::string message = file.path() + " is " + describe_file_kind(kind, file.path(), start) + ", not " + wanted;
  switch (kind) {
    case FileKind::torch_zip:
    case FileKind::pickle:
      return message + "; save the state_dict with safetensors.torch.save_file(state_dict, 'weights.safetensors'), " +
             "or with Tandem's Python package: model.load_state_dict(torch.load(...)), then " +
             "model.save_weights('weights.safetensors')";
    case FileKind::npy:
    case FileKind::npz:
      return message + "; save the arrays with safetensors.numpy.save_file({'name': array, ...}, 'x.safetensors')";
    default:
      return message + "; write it with safetensors' save_file (safetensors.torch or safetensors.numpy)";
  }
}

}  // namespace tandem

// What a file a user named is, judged by its first bytes rather than its name: a weights
// file saved with torch.save, or a CSV given where safetensors is read, is then refused as
// what it is ("x.csv is CSV, not safetensors") instead of as a corrupt safetensors file.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace tandem {

class ReadableFile;

enum class FileKind {
  safetensors,
  npy,          ///< numpy.save
  npz,          ///< numpy.savez / savez_compressed: a zip of .npy files
  torch_zip,    ///< torch.save since PyTorch 1.6: a zip holding data.pkl
  pickle,       ///< a Python pickle (torch.save's legacy format, pickle.dump)
  zip,          ///< any other zip archive
  gzip,
  text,         ///< printable text: CSV, JSON, YAML, ...
  unknown,
};

/// How many bytes of its start kind_of_file_start needs to judge a file.
constexpr size_t kFileKindProbeBytes = 512;

/// The kind of a file from its first bytes (up to kFileKindProbeBytes of them) and its size.
/// Text that looks like comma-separated numbers is `text` too: callers name it "CSV" when
/// the file's name or content says so (describe_file_kind).
FileKind kind_of_file_start(std::span<const std::byte> start, uint64_t file_size);
/// The same, reading the start of `file`.
FileKind kind_of_file(const ReadableFile& file);

/// The kind in words for a message: "CSV", "a NumPy .npy array", "a PyTorch file saved with
/// torch.save", ... `path` and `start` tell CSV from other text.
std::string describe_file_kind(FileKind kind, const std::string& path, std::span<const std::byte> start);

/// "PATH is CSV, not safetensors; HOW" for a file of the wrong kind, with advice on how to
/// convert it (torch.save -> safetensors.torch.save_file, ...). `wanted` is "safetensors".
std::string wrong_kind_message(const ReadableFile& file, FileKind kind, const std::string& wanted);

}  // namespace tandem

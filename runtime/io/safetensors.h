// Safetensors files (the format of Hugging Face's `safetensors`, readable by Python's
// safetensors.torch.load_file): an 8-byte little-endian header length N, N bytes of
// JSON naming each tensor's dtype, shape and byte range, then the raw data.
//
// Tandem holds float32 and int64 only. The reader takes F32 and I64 as they are and
// widens what a saved torch state_dict may hold: F64, F16, BF16 -> float32;
// I32, I16, I8, U8, BOOL -> int64. Any other dtype is refused by name.
//
// Every function here is reentrant; none keeps state between calls.
#pragma once

#include <cstddef>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tandem {

/// Named tensors, ordered by name (a safetensors file keeps no meaningful order).
using TensorMap = std::map<std::string, Tensor>;

/// Reads a safetensors file into fresh host tensors, copying from the file mapped into
/// memory. Throws UserError naming the file and what is wrong with it: missing, not a
/// regular file, of another kind ("x.csv is CSV, not safetensors"), malformed, or truncated.
TensorMap read_safetensors(const std::string& path);

/// As read_safetensors, for a caller that copies the tensors elsewhere at once (loading
/// weights into a model): the F32 and I64 tensors are views of the file's read-only
/// mapping where their bytes are aligned, so that nothing is copied twice and no memory
/// the file's size is allocated. Writing to such a view faults; the mapping lives as long
/// as any view of it, and it sees the file change if another program writes it meanwhile.
TensorMap map_safetensors(const std::string& path);

/// Parses the bytes of a safetensors file; `what_for_messages` (usually the path)
/// begins every error message. The result owns its memory; `bytes` may be freed after.
TensorMap parse_safetensors(std::span<const std::byte> bytes, const std::string& what_for_messages);

/// Reads only the "__metadata__" string map of a safetensors file (empty when absent).
std::map<std::string, std::string> read_safetensors_metadata(const std::string& path);
/// The same from the bytes of a file, checked as parse_safetensors checks them.
std::map<std::string, std::string> parse_safetensors_metadata(std::span<const std::byte> bytes,
                                                              const std::string& what_for_messages);

/// Writes `tensors` (host tensors, any names except "__metadata__") and `metadata` to
/// `path` atomically: into "<path>.tmp-<pid>", fsync, then rename over `path`, so a
/// crash leaves either the old file or the new one, never half of one. Temporaries of
/// `path` left by writers that were killed (their process is gone) are removed first.
/// Throws UserError on an I/O failure (the temporary file is removed) or bad input.
void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata = {});

/// Removes the "<path>.tmp-PID" files of writers of `path` whose process is gone (killed
/// mid-write); a live process's file is left alone. write_safetensors does it first; a run
/// calls it when it starts, so that a run that writes nothing cleans up too.
void remove_stale_temporaries(const std::string& path);

/// The temporary file this process's write_safetensors is writing now, or nullptr. For a
/// signal handler, which may unlink it: async-signal-safe (a lock-free atomic read).
const char* safetensors_temporary_in_progress();

/// The bytes write_safetensors would write: names sorted, data packed in that order,
/// the JSON header padded with spaces to a multiple of 8 bytes so the data is aligned.
std::vector<std::byte> serialize_safetensors(const TensorMap& tensors,
                                             const std::map<std::string, std::string>& metadata = {});

}  // namespace tandem

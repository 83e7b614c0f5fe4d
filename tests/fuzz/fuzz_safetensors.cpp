// Fuzz target: the bytes of a safetensors file, as weights, inputs, data or a checkpoint.
// The tensors and the metadata either parse or are refused naming the file; metadata that
// marks a checkpoint is then read field by field as tandem train --resume reads it.
#include <span>
#include <string>

#include "core/error.h"
#include "fuzz_target.h"
#include "runtime/checkpoint_metadata.h"
#include "runtime/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    tandem::TensorMap tensors = tandem::parse_safetensors(bytes, "fuzz.safetensors");
    // what was read must write back and read again to the same names
    tandem::TensorMap again = tandem::parse_safetensors(tandem::serialize_safetensors(tensors), "again.safetensors");
    if (again.size() != tensors.size()) tandem::fuzz::crash("a round trip changed the number of tensors");
  } catch (const tandem::UserError& e) {
    tandem::fuzz::require_prefix(e.what(), "fuzz.safetensors");
  }
  try {
    auto meta = tandem::parse_safetensors_metadata(bytes, "fuzz.safetensors");
    if (tandem::is_checkpoint_metadata(meta)) tandem::parse_checkpoint_metadata(meta, "fuzz.safetensors");
  } catch (const tandem::UserError& e) {
    tandem::fuzz::require_prefix(e.what(), "fuzz.safetensors");
  }
  return 0;
}

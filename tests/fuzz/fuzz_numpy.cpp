// Fuzz target: the bytes of a NumPy file given to tandem run --inputs, read both as an
// .npy and as an .npz (a zip of .npy members, stored or deflated). Each either reads or is
// refused naming the file.
#include <span>
#include <string>

#include "core/error.h"
#include "fuzz_target.h"
#include "runtime/io/npy.h"
#include "runtime/io/zip_archive.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    tandem::parse_npy(bytes, "fuzz.npy");
  } catch (const tandem::UserError& e) {
    tandem::fuzz::require_prefix(e.what(), "fuzz.npy");
  }
  try {
    for (const tandem::ZipMember& m : tandem::zip_members(bytes, "fuzz.npz"))
      tandem::parse_npy(tandem::zip_member_bytes(bytes, m, "fuzz.npz"), "fuzz.npz");
  } catch (const tandem::UserError& e) {
    tandem::fuzz::require_prefix(e.what(), "fuzz.npz");
  }
  return 0;
}

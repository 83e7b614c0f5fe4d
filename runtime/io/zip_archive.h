// Private to runtime/io: the members of a zip archive, as numpy.savez (stored) and
// numpy.savez_compressed (deflated) write them; zlib inflates. Only what those need is
// read: the central directory (with its ZIP64 forms, which numpy asks for), stored and
// deflated members, their CRC-32 checked. No library for zip is linked: Debian's minizip
// and libzip are not installed where Tandem builds, and this is the part of them used.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tandem {

struct ZipMember {
  std::string name;
  uint16_t method = 0;  ///< 0 stored, 8 deflated
  uint32_t crc32 = 0;
  uint64_t compressed_size = 0;
  uint64_t size = 0;
  uint64_t local_header_offset = 0;
};

/// The archive's members in the order of its central directory. UserError "WHAT: ..."
/// naming what is wrong when `bytes` is not a whole zip archive.
std::vector<ZipMember> zip_members(std::span<const std::byte> bytes, const std::string& what);

/// A member's uncompressed bytes, its CRC-32 checked. UserError naming the member when it
/// is encrypted, compressed by another method, corrupt, or reaches past the archive.
std::vector<std::byte> zip_member_bytes(std::span<const std::byte> bytes, const ZipMember& member,
                                        const std::string& what);

}  // namespace tandem

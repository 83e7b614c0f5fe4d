#include "runtime/io/zip_archive.h"

#include <zlib.h>

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace tandem {
namespace {

constexpr uint32_t kEndOfDirectory = 0x06054b50;
constexpr uint32_t kZip64EndLocator = 0x07064b50;
constexpr uint32_t kZip64End = 0x06064b50;
constexpr uint32_t kDirectoryEntry = 0x02014b50;
constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr size_t kEndOfDirectoryBytes = 22;
constexpr size_t kDirectoryEntryBytes = 46;
constexpr size_t kLocalHeaderBytes = 30;
constexpr uint16_t kZip64ExtraId = 0x0001;
/// deflate cannot compress by more than about 1032:1; a size claimed past that is a lie.
constexpr uint64_t kMaxDeflateRatio = 1032;

constexpr const char* kCorrupt = "the archive is corrupt or truncated; save it again";

[[noreturn]] void fail(const std::string& message) { throw UserError(message); }

/// Reads little-endian integers at checked offsets of the archive.
class Bytes {
 public:
  Bytes(std::span<const std::byte> bytes, const std::string& what) : bytes_(bytes), what_(what) {}
  uint64_t size() const { return bytes_.size(); }
  uint64_t le(uint64_t offset, size_t n) const {
    need(offset, n);
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint64_t(std::to_integer<uint8_t>(bytes_[offset + i])) << (8 * i);
    return v;
  }
  std::span<const std::byte> slice(uint64_t offset, uint64_t n) const {
    need(offset, n);
    return bytes_.subspan(offset, n);
  }
  void need(uint64_t offset, uint64_t n) const {
    if (offset > bytes_.size() || n > bytes_.size() - offset)
      fail(what_ + ": a record at byte " + std::to_string(offset) + " reaches past the end of the file (" +
           std::to_string(bytes_.size()) + " bytes); " + kCorrupt);
  }

 private:
  std::span<const std::byte> bytes_;
  const std::string& what_;
};

struct Directory {
  uint64_t entries = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};

/// The end-of-central-directory record: the last 22 bytes, or earlier when a comment
/// follows it; its ZIP64 form when the plain one says its fields overflowed.
Directory find_directory(const Bytes& b, const std::string& what) {
  if (b.size() < kEndOfDirectoryBytes) fail(what + ": too short for a zip archive; " + kCorrupt);
  const uint64_t lowest = b.size() >= kEndOfDirectoryBytes + 0xffff ? b.size() - kEndOfDirectoryBytes - 0xffff : 0;
  for (uint64_t at = b.size() - kEndOfDirectoryBytes + 1; at-- > lowest;) {
    if (b.le(at, 4) != kEndOfDirectory) continue;
    Directory d{b.le(at + 10, 2), b.le(at + 16, 4), b.le(at + 12, 4)};
    if (b.le(at + 4, 2) != 0 || b.le(at + 6, 2) != 0)
      fail(what + ": a zip archive split over several files is not supported");
    const bool overflowed = d.entries == 0xffff || d.offset == 0xffffffff || d.size == 0xffffffff;
    if (overflowed && at >= 20 && b.le(at - 20, 4) == kZip64EndLocator) {
      uint64_t end64 = b.le(at - 20 + 8, 8);
      if (b.le(end64, 4) != kZip64End) fail(what + ": the ZIP64 end record is missing; " + kCorrupt);
      d = {b.le(end64 + 32, 8), b.le(end64 + 48, 8), b.le(end64 + 40, 8)};
    }
    return d;
  }
  fail(what + ": no zip end-of-directory record; " + kCorrupt);
}

/// Replaces the 32-bit fields that say 0xffffffff with their ZIP64 extra field's values.
void apply_zip64_extra(const Bytes& b, uint64_t extra, uint64_t extra_length, ZipMember& m, const std::string& what) {
  const bool wants_size = m.size == 0xffffffff, wants_compressed = m.compressed_size == 0xffffffff,
             wants_offset = m.local_header_offset == 0xffffffff;
  if (!wants_size && !wants_compressed && !wants_offset) return;
  for (uint64_t at = extra; at + 4 <= extra + extra_length;) {
    uint64_t id = b.le(at, 2), length = b.le(at + 2, 2);
    uint64_t field = at + 4;
    at = field + length;
    if (id != kZip64ExtraId) continue;
    if (at > extra + extra_length) break;
    auto next = [&](uint64_t& value) {
      if (field + 8 > at) fail(what + ": member '" + m.name + "': its ZIP64 field is too short; " + kCorrupt);
      value = b.le(field, 8);
      field += 8;
    };
    if (wants_size) next(m.size);
    if (wants_compressed) next(m.compressed_size);
    if (wants_offset) next(m.local_header_offset);
    return;
  }
  fail(what + ": member '" + m.name + "' has 32-bit sizes that overflowed but no ZIP64 field; " + kCorrupt);
}

}  // namespace

std::vector<ZipMember> zip_members(std::span<const std::byte> bytes, const std::string& what) {
  Bytes b(bytes, what);
  Directory d = find_directory(b, what);
  // every entry takes at least 46 bytes: a count past that is corrupt, not a reason to reserve
  if (d.entries > b.size() / kDirectoryEntryBytes)
    fail(what + ": the zip directory claims " + std::to_string(d.entries) + " members; " + kCorrupt);
  std::vector<ZipMember> members;
  members.reserve(d.entries);
  uint64_t at = d.offset;
  for (uint64_t i = 0; i < d.entries; ++i) {
    if (b.le(at, 4) != kDirectoryEntry)
      fail(what + ": zip directory entry " + std::to_string(i) + " at byte " + std::to_string(at) +
           " has no signature; " + kCorrupt);
    ZipMember m;
    const uint64_t flags = b.le(at + 8, 2);
    m.method = static_cast<uint16_t>(b.le(at + 10, 2));
    m.crc32 = static_cast<uint32_t>(b.le(at + 16, 4));
    m.compressed_size = b.le(at + 20, 4);
    m.size = b.le(at + 24, 4);
    const uint64_t name_length = b.le(at + 28, 2), extra_length = b.le(at + 30, 2), comment_length = b.le(at + 32, 2);
    m.local_header_offset = b.le(at + 42, 4);
    auto name = b.slice(at + kDirectoryEntryBytes, name_length);
    m.name.assign(reinterpret_cast<const char*>(name.data()), name.size());
    b.need(at + kDirectoryEntryBytes + name_length, extra_length + comment_length);
    apply_zip64_extra(b, at + kDirectoryEntryBytes + name_length, extra_length, m, what);
    if (flags & 1) fail(what + ": member '" + m.name + "' is encrypted; save the archive without a password");
    members.push_back(std::move(m));
    at += kDirectoryEntryBytes + name_length + extra_length + comment_length;
  }
  return members;
}

std::vector<std::byte> zip_member_bytes(std::span<const std::byte> bytes, const ZipMember& m, const std::string& what) {
  Bytes b(bytes, what);
  const std::string member = what + ": member '" + m.name + "'";
  if (b.le(m.local_header_offset, 4) != kLocalHeader) fail(member + " has no local header; " + kCorrupt);
  const uint64_t data = m.local_header_offset + kLocalHeaderBytes + b.le(m.local_header_offset + 26, 2) +
                        b.le(m.local_header_offset + 28, 2);
  std::span<const std::byte> packed = b.slice(data, m.compressed_size);
  std::vector<std::byte> out;
  if (m.method == 0) {
    if (m.size != m.compressed_size)
      fail(member + " is stored uncompressed but its two sizes differ; " + std::string(kCorrupt));
    out.assign(packed.begin(), packed.end());
  } else if (m.method == 8) {
    if (m.size > m.compressed_size * kMaxDeflateRatio + 1024)
      fail(member + " claims " + std::to_string(m.size) + " bytes from " + std::to_string(m.compressed_size) +
           " compressed, more than deflate can hold; " + kCorrupt);
    out.resize(m.size);
    z_stream z{};
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK) fail(member + ": zlib could not start");
    int rc = Z_OK;
    uint64_t in_at = 0, out_at = 0;
    constexpr uint64_t kChunk = std::numeric_limits<uInt>::max();  // z_stream counts in uInt
    while (rc == Z_OK) {
      if (z.avail_in == 0 && in_at < packed.size()) {
        z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(packed.data() + in_at));
        z.avail_in = static_cast<uInt>(std::min(kChunk, packed.size() - in_at));
        in_at += z.avail_in;
      }
      if (z.avail_out == 0 && out_at < out.size()) {
        z.next_out = reinterpret_cast<Bytef*>(out.data() + out_at);
        z.avail_out = static_cast<uInt>(std::min<uint64_t>(kChunk, out.size() - out_at));
        out_at += z.avail_out;
      }
      rc = inflate(&z, Z_NO_FLUSH);
      if (rc == Z_BUF_ERROR && (z.avail_in > 0 || in_at < packed.size()) && (z.avail_out > 0 || out_at < out.size()))
        rc = Z_OK;  // made no progress this call only because a chunk ran out
    }
    const uint64_t produced = out_at - z.avail_out;
    inflateEnd(&z);
    if (rc != Z_STREAM_END || produced != m.size)
      fail(member + ": its deflated data is corrupt (" + std::to_string(produced) + " of " + std::to_string(m.size) +
           " bytes inflated); " + kCorrupt);
  } else {
    fail(member + " is compressed with zip method " + std::to_string(m.method) +
         "; Tandem reads stored and deflated members (numpy.savez and numpy.savez_compressed)");
  }
  uLong crc = crc32(0L, Z_NULL, 0);
  for (uint64_t at = 0; at < out.size();) {
    uInt n = static_cast<uInt>(std::min<uint64_t>(std::numeric_limits<uInt>::max(), out.size() - at));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(out.data() + at), n);
    at += n;
  }
  if (crc != m.crc32) fail(member + ": its CRC-32 does not match its data; " + std::string(kCorrupt));
  return out;
}

}  // namespace tandem

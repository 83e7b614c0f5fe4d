// NumPy's .npy and .npz as Tandem reads them, from bytes built here: what numpy writes is
// taken, everything else is a UserError naming the file and the problem, never a crash.
// (tests/python/test_cli_user_files.py reads files numpy itself wrote.)
#include <zlib.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <string>

#include "runtime/io/file_kind.h"
#include "runtime/io/npy.h"
#include "runtime/io/zip_archive.h"

using namespace tandem;

namespace {

/// A version-1.0 .npy file: magic, version, header padded to 64 bytes, then `data`.
std::vector<std::byte> npy(const std::string& dict, const std::string& data, int major = 1) {
  std::string header = dict;
  const size_t preamble = major == 1 ? 10 : 12;
  header.append((64 - (preamble + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  for (size_t i = 0; i < preamble - 8; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  out += header + data;
  std::vector<std::byte> bytes(out.size());
  std::memcpy(bytes.data(), out.data(), out.size());
  return bytes;
}

template <class T>
std::string raw(std::vector<T> values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

void put(std::string& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

/// A zip archive of one stored member, as numpy.savez writes (without ZIP64 fields).
std::vector<std::byte> stored_zip(const std::string& name, const std::vector<std::byte>& data) {
  const std::string body(reinterpret_cast<const char*>(data.data()), data.size());
  const uint32_t crc = crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()));
  std::string out;
  put(out, 0x04034b50, 4), put(out, 20, 2), put(out, 0, 2), put(out, 0, 2), put(out, 0, 4), put(out, crc, 4);
  put(out, body.size(), 4), put(out, body.size(), 4), put(out, name.size(), 2), put(out, 0, 2);
  out += name + body;
  const size_t directory = out.size();
  put(out, 0x02014b50, 4), put(out, 20, 2), put(out, 20, 2), put(out, 0, 2), put(out, 0, 2), put(out, 0, 4);
  put(out, crc, 4), put(out, body.size(), 4), put(out, body.size(), 4), put(out, name.size(), 2), put(out, 0, 2);
  put(out, 0, 2), put(out, 0, 2), put(out, 0, 2), put(out, 0, 4), put(out, 0, 4);
  out += name;
  const size_t directory_size = out.size() - directory;
  put(out, 0x06054b50, 4), put(out, 0, 2), put(out, 0, 2), put(out, 1, 2), put(out, 1, 2);
  put(out, directory_size, 4), put(out, directory, 4), put(out, 0, 2);
  std::vector<std::byte> bytes(out.size());
  std::memcpy(bytes.data(), out.data(), out.size());
  return bytes;
}

std::string refusal(const std::vector<std::byte>& bytes) {
  try {
    parse_npy(bytes, "a.npy");
  } catch (const UserError& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST_CASE("npy: numpy's float32, float64, int32 and bool arrays, versions 1 to 3") {
  Tensor f = parse_npy(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", raw<float>({1, 2, 3, 4, 5, 6})),
                       "a.npy");
  CHECK(f.shape() == Shape{2, 3});
  CHECK(f.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  Tensor d = parse_npy(npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", raw<double>({0.5, -2}), 2), "a.npy");
  CHECK(d.dtype() == DType::float32);
  CHECK(d.to_vector<float>() == std::vector<float>{0.5f, -2});
  Tensor i = parse_npy(npy("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", raw<int32_t>({-1, 7, 9}), 3),
                       "a.npy");
  CHECK(i.dtype() == DType::int64);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{-1, 7, 9});
  Tensor b = parse_npy(npy("{'descr': '|b1', 'fortran_order': False, 'shape': (), }", std::string(1, '\x01')), "a.npy");
  CHECK(b.shape() == Shape{});
  CHECK(b.to_vector<int64_t>() == std::vector<int64_t>{1});
  Tensor empty = parse_npy(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4), }", ""), "a.npy");
  CHECK(empty.shape() == Shape{0, 4});
}

TEST_CASE("npy: what Tandem cannot take is refused by name") {
  const std::string f4 = raw<float>({1, 2});
  CHECK_THAT(refusal(npy("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", f4)),
             Catch::Contains("a.npy: the array is big-endian ('>f4')"));
  CHECK_THAT(refusal(npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", f4)),
             Catch::Contains("a.npy: the array is in Fortran order"));
  CHECK_THAT(refusal(npy("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", f4)),
             Catch::Contains("a.npy: the array holds Python objects"));
  CHECK_THAT(refusal(npy("{'descr': '<u8', 'fortran_order': False, 'shape': (1,), }", f4)),
             Catch::Contains("a.npy: dtype '<u8' is not supported"));
  CHECK_THAT(refusal(npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", f4)),
             Catch::Contains("a.npy: the .npy header describes a structured array"));
  CHECK_THAT(refusal(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", f4)),
             Catch::Contains("a.npy: shape [3] needs 12 bytes of data, the file holds 8; the file is truncated"));
  CHECK_THAT(refusal(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", f4)),
             Catch::Contains("a.npy: 4 bytes follow the array's data"));
  CHECK_THAT(refusal(npy("{'descr': '<f4', 'shape': (2,), }", f4)), Catch::Contains("descr, fortran_order and shape"));
  CHECK_THAT(refusal(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", f4)),
             Catch::Contains("a.npy: the .npy header"));
  CHECK_THAT(refusal(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999), }", f4)),
             Catch::Contains("has too many elements"));
  CHECK_THAT(refusal(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", f4, 4)),
             Catch::Contains("a.npy: .npy format version 4.0"));
}

TEST_CASE("zip: a stored member reads back, and a wrong CRC or a cut archive is refused") {
  const auto array = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", raw<float>({1, 2}));
  const auto zip = stored_zip("x.npy", array);
  auto members = zip_members(zip, "a.npz");
  REQUIRE(members.size() == 1);
  CHECK(members[0].name == "x.npy");
  CHECK(zip_member_bytes(zip, members[0], "a.npz") == array);
  auto damaged = zip;
  damaged[40] ^= std::byte{1};  // inside the member's data
  CHECK_THROWS_WITH(zip_member_bytes(damaged, members[0], "a.npz"),
                    Catch::Contains("a.npz: member 'x.npy': its CRC-32 does not match"));
  auto cut = zip;
  cut.resize(cut.size() - 30);
  CHECK_THROWS_WITH(zip_members(cut, "a.npz"), Catch::Contains("a.npz: no zip end-of-directory record"));
}

TEST_CASE("npy and zip: random damage is a UserError naming the file, never a crash") {
  const auto array = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 2), }", raw<float>({1, 2, 3, 4, 5, 6, 7, 8}));
  const auto zip = stored_zip("x.npy", array);
  std::mt19937 gen(7);
  for (int trial = 0; trial < 3000; ++trial) {
    auto bytes = trial % 2 ? array : zip;
    const int flips = 1 + trial % 4;
    for (int i = 0; i < flips; ++i) bytes[gen() % bytes.size()] = std::byte(gen() & 0xff);
    if (trial % 5 == 0) bytes.resize(gen() % bytes.size());
    try {
      parse_npy(bytes, "a.npy");
    } catch (const UserError& e) {
      REQUIRE(std::string(e.what()).starts_with("a.npy: "));
    }
    try {
      for (const ZipMember& m : zip_members(bytes, "a.npz")) parse_npy(zip_member_bytes(bytes, m, "a.npz"), "a.npz");
    } catch (const UserError& e) {
      REQUIRE(std::string(e.what()).starts_with("a.npz: "));
    }
  }
}

TEST_CASE("file kinds are told by content") {
  auto kind = [](const std::string& text) {
    std::vector<std::byte> bytes(text.size());
    std::memcpy(bytes.data(), text.data(), text.size());
    return kind_of_file_start(bytes, bytes.size());
  };
  CHECK(kind(std::string("\x0e\0\0\0\0\0\0\0{\"x\":{}}     ", 22)) == FileKind::safetensors);
  CHECK(kind("\x93NUMPY\x01") == FileKind::npy);
  CHECK(kind(std::string("PK\x03\x04", 4) + std::string(22, '\0') + std::string("\x05\0\0\0x.npy", 9)) == FileKind::npz);
  CHECK(kind(std::string("PK\x03\x04", 4) + std::string(22, '\0') + std::string("\x10\0\0\0archive/data.pkl", 20)) ==
        FileKind::torch_zip);
  CHECK(kind("\x80\x02}q\x00") == FileKind::pickle);
  CHECK(kind("\x1f\x8b\x08") == FileKind::gzip);
  CHECK(kind("1.5,2,3\n4,5,6\n") == FileKind::text);
  CHECK(kind(std::string("\x01\x02\0\xff", 4)) == FileKind::unknown);
  std::vector<std::byte> csv(8, std::byte{'1'});
  CHECK(describe_file_kind(FileKind::text, "x.txt", csv) == "text");
  CHECK(describe_file_kind(FileKind::text, "x.csv", csv) == "CSV");
}

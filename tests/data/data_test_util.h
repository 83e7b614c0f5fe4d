// Helpers shared by the data tests: a per-test temporary folder, a random seed printed
// once per run, text files, and a gzip writer that needs no zlib (stored blocks).
#pragma once

#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "runtime/data/dataset.h"

namespace data_test {

namespace fs = std::filesystem;

/// A DataSpec for `path` with every other field at its default.
inline tandem::DataSpec spec_of(const std::string& path) {
  tandem::DataSpec spec;
  spec.path = path;
  return spec;
}

inline const char* kDigitsPath = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz";

/// A fresh folder under the system temp dir, removed with the object.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            ("tandem_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

/// A seed fresh per run (TANDEM_TEST_SEED overrides it), printed the first time.
inline uint64_t run_seed() {
  static const uint64_t seed = [] {
    uint64_t s = 0;
    if (const char* env = std::getenv("TANDEM_TEST_SEED")) {
      s = std::stoull(env);
    } else {
      std::random_device rd;
      s = (uint64_t{rd()} << 32) ^ rd();
    }
    std::printf("data tests: random seed %llu (set TANDEM_TEST_SEED to repeat)\n",
                static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline uint32_t crc32(const std::string& data) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = table[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

/// `text` as a gzip member whose deflate stream is stored (uncompressed) blocks.
inline std::string gzip_stored(const std::string& text) {
  std::string out = {'\x1f', '\x8b', '\x08', 0, 0, 0, 0, 0, 0, '\x03'};
  auto put32 = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  };
  size_t pos = 0;
  do {
    size_t len = std::min<size_t>(65535, text.size() - pos);
    bool last = pos + len == text.size();
    out.push_back(last ? 1 : 0);
    out.push_back(static_cast<char>(len & 0xFF));
    out.push_back(static_cast<char>(len >> 8));
    out.push_back(static_cast<char>(~len & 0xFF));
    out.push_back(static_cast<char>((~len >> 8) & 0xFF));
    out.append(text, pos, len);
    pos += len;
  } while (pos < text.size());
  put32(crc32(text));
  put32(static_cast<uint32_t>(text.size()));
  return out;
}

}  // namespace data_test

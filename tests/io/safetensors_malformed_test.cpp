// Safetensors: every malformed input is a UserError naming the file and the problem,
// never a crash, an out-of-bounds read or another exception type.
#include <catch2/catch.hpp>
#include <cstring>
#include <random>

#include "runtime/io/safetensors.h"

using namespace tandem;

namespace {

/// Length prefix, the header text as given, then `data_bytes` bytes of data.
std::vector<std::byte> make_file(const std::string& header, size_t data_bytes = 64) {
  std::vector<std::byte> out(8 + header.size() + data_bytes, std::byte{0});
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

std::vector<std::byte> with_length(uint64_t n, size_t total) {
  std::vector<std::byte> out(total, std::byte{' '});
  std::memcpy(out.data(), &n, 8);
  return out;
}

/// One F32 entry named "t" with the given fields spliced in.
std::string entry(const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return R"({"t":{"dtype":)" + dtype + R"(,"shape":)" + shape + R"(,"data_offsets":)" + offsets + "}}";
}

enum class Outcome { ok, user_error, other_exception };

/// Parses, reporting how it ended; any other exception escaping is a bug.
Outcome try_parse(std::span<const std::byte> bytes, std::string* message = nullptr) {
  try {
    parse_safetensors(bytes, "bad.safetensors");
    return Outcome::ok;
  } catch (const UserError& e) {
    if (message) *message = e.what();
    return Outcome::user_error;
  } catch (...) {
    return Outcome::other_exception;
  }
}

/// A small valid file of three tensors of different dtypes and some metadata.
std::vector<std::byte> valid_file() {
  TensorMap m;
  m["a"] = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  m["b"] = Tensor::from_vector<int64_t>({}, {9});
  m["c"] = Tensor::from_vector<float>({2}, {0.5f, -0.5f});
  return serialize_safetensors(m, {{"format", "pt"}});
}

}  // namespace

TEST_CASE("safetensors: malformed inputs are UserErrors that say what is wrong", "[io]") {
  struct Case {
    const char* what;
    std::vector<std::byte> bytes;
    std::string fragment;
  };
  const std::string big = "18446744073709551615";  // 2^64 - 1
  std::vector<Case> cases = {
      {"empty file", {}, "file is 0 bytes, shorter than the 8-byte"},
      {"5 bytes", std::vector<std::byte>(5), "file is 5 bytes"},
      {"header longer than file", with_length(1000, 100), "header length 1000 is more than the 92 bytes"},
      {"absurd header length", with_length(1ULL << 40, 100), "over the 100 MB limit"},
      {"header length 2^64-1", with_length(~0ULL, 100), "over the 100 MB limit"},
      {"not JSON", make_file("{abc"), "header is not valid JSON"},
      {"empty header", make_file(""), "header is not valid JSON"},
      {"trailing garbage", make_file("{}x"), "header is not valid JSON"},
      {"invalid UTF-8", make_file("{\"\xff\xfe\":1}"), "header is not valid JSON"},
      {"header is an array", make_file("[1,2]"), "header must be a JSON object, not array"},
      {"header is a number", make_file("7"), "header must be a JSON object, not number"},
      {"entry is a number", make_file(R"({"w":5})"), "tensor 'w': entry must be an object"},
      {"entry is an array", make_file(R"({"w":[]})"), "tensor 'w': entry must be an object"},
      {"no dtype", make_file(R"({"t":{"shape":[1],"data_offsets":[0,4]}})"), "tensor 't': entry has no \"dtype\""},
      {"no shape", make_file(R"({"t":{"dtype":"F32","data_offsets":[0,4]}})"), "no \"shape\" field"},
      {"no offsets", make_file(R"({"t":{"dtype":"F32","shape":[1]}})"), "no \"data_offsets\" field"},
      {"dtype is a number", make_file(entry("5", "[1]", "[0,4]")), "\"dtype\" must be a string, not number"},
      {"unknown dtype", make_file(entry("\"F33\"", "[1]", "[0,4]")), "tensor 't': unknown dtype 'F33'"},
      {"lowercase dtype", make_file(entry("\"f32\"", "[1]", "[0,4]")), "unknown dtype 'f32'"},
      {"unsupported dtype", make_file(entry("\"U16\"", "[1]", "[0,2]")), "dtype U16 is not supported"},
      {"fp8 dtype", make_file(entry("\"F8_E4M3\"", "[1]", "[0,1]")), "dtype F8_E4M3 is not supported"},
      {"shape is a number", make_file(entry("\"F32\"", "1", "[0,4]")), "\"shape\" must be an array, not number"},
      {"negative dim", make_file(entry("\"F32\"", "[2,-1]", "[0,4]")), "\"shape\" holds the negative number -1"},
      {"fractional dim", make_file(entry("\"F32\"", "[2.5]", "[0,4]")), "must hold non-negative integers, not number"},
      {"string dim", make_file(entry("\"F32\"", "[\"2\"]", "[0,4]")), "must hold non-negative integers, not string"},
      {"dim past u64", make_file(entry("\"F32\"", "[18446744073709551616]", "[0,4]")), "non-negative integers"},
      {"huge dim", make_file(entry("\"F32\"", "[" + big + "]", "[0,4]")), "shape dimension " + big + " is absurd"},
      {"numel overflow", make_file(entry("\"F32\"", "[4294967296,4294967296]", "[0,4]")), "has too many elements"},
      {"bytes overflow", make_file(entry("\"F64\"", "[2305843009213693952]", "[0,4]")), "has too many elements"},
      {"offsets not array", make_file(entry("\"F32\"", "[1]", "0")), "array of two integers"},
      {"one offset", make_file(entry("\"F32\"", "[1]", "[0]")), "array of two integers"},
      {"three offsets", make_file(entry("\"F32\"", "[1]", "[0,4,8]")), "array of two integers"},
      {"offset is a string", make_file(entry("\"F32\"", "[1]", "[\"0\",4]")),
       "\"data_offsets\" must hold non-negative"},
      {"negative offset", make_file(entry("\"F32\"", "[1]", "[-4,0]")),
       "\"data_offsets\" holds the negative number -4"},
      {"begin after end", make_file(entry("\"F32\"", "[0]", "[8,4]")), "data_offsets [8, 4] begin after they end"},
      {"size mismatch", make_file(R"({"fc.weight":{"dtype":"F32","shape":[10,20],"data_offsets":[0,400]}})", 800),
       "tensor 'fc.weight': data_offsets [0, 400] do not match shape [10, 20] of F32 (800 bytes)"},
      {"end past data", make_file(entry("\"F32\"", "[16]", "[16,80]")), "reach past the end of the data (64 bytes)"},
      {"huge end", make_file(entry("\"F32\"", "[1]", "[" + big + "," + big + "]")), "do not match shape [1]"},
      {"overlap",
       make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                 R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})"),
       "tensors 'a' [0, 8] and 'b' [4, 12] overlap"},
      {"same bytes twice",
       make_file(R"({"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},)"
                 R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})"),
       "overlap"},
      {"duplicate tensor",
       make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                 R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})"),
       "names the key 'a' twice"},
      {"duplicate field", make_file(R"({"a":{"dtype":"F32","dtype":"I64","shape":[1],"data_offsets":[0,4]}})"),
       "names the key 'dtype' twice"},
      {"metadata is a string", make_file(R"({"__metadata__":"x"})"), "\"__metadata__\" must be an object of strings"},
      {"metadata value is a number", make_file(R"({"__metadata__":{"step":5}})"),
       "\"__metadata__\" entry 'step' must be a string, not number"},
      {"deep nesting", make_file(std::string(10000, '[') + std::string(10000, ']')), "nests deeper"},
      {"deep in an entry", make_file(R"({"t":{"dtype":"F32","shape":[[[[1]]]],"data_offsets":[0,4]}})"),
       "nests deeper"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    std::string message;
    REQUIRE(try_parse(c.bytes, &message) == Outcome::user_error);
    CHECK_THAT(message, Catch::Matchers::StartsWith("bad.safetensors: "));
    CHECK_THAT(message, Catch::Matchers::Contains(c.fragment));
  }
}

TEST_CASE("safetensors: every truncation of a valid file is a UserError", "[io]") {
  std::vector<std::byte> file = valid_file();
  REQUIRE(try_parse(file) == Outcome::ok);
  for (size_t n = 0; n < file.size(); ++n) {
    INFO("prefix of " << n << " of " << file.size() << " bytes");
    REQUIRE(try_parse(std::span(file).first(n)) == Outcome::user_error);
  }
}

TEST_CASE("safetensors: random mutations never crash or throw anything but UserError", "[io]") {
  const std::vector<std::byte> file = valid_file();
  uint64_t header_end;
  std::memcpy(&header_end, file.data(), 8);
  header_end += 8;
  // Bytes that change JSON structure are likelier to reach deep validation than noise.
  const std::string tokens = "{}[]\",:0123456789-+.eE \\ntfaul\x80\xff";
  std::mt19937 rng(1234);
  int ok = 0, user_errors = 0, others = 0;
  for (int round = 0; round < 6000; ++round) {
    std::vector<std::byte> bytes = file;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      // Most edits land in the length prefix or the header, where the parsing is.
      size_t pos = rng() % 8 == 0 ? rng() % bytes.size() : rng() % header_end;
      switch (rng() % 4) {
        case 0:
          bytes[pos] = static_cast<std::byte>(rng());
          break;
        case 1:
          bytes[pos] = static_cast<std::byte>(tokens[rng() % tokens.size()]);
          break;
        case 2:
          bytes[pos] ^= static_cast<std::byte>(1u << (rng() % 8));
          break;
        case 3:
          bytes.erase(bytes.begin() + static_cast<std::ptrdiff_t>(pos));
          break;
      }
      if (bytes.empty()) break;
    }
    switch (try_parse(bytes)) {
      case Outcome::ok:
        ++ok;
        break;
      case Outcome::user_error:
        ++user_errors;
        break;
      case Outcome::other_exception:
        ++others;
        break;
    }
  }
  INFO("ok " << ok << ", UserError " << user_errors);
  CHECK(others == 0);
  CHECK(user_errors > 3000);  // the mutations did reach the validation
}

// nlohmann's parse-with-callback, which refused duplicate keys before, was quadratic in the
// entry count (20,000 entries took 7 s, 100,000 over a minute): a header this size now
// reads in well under a second, and a regression would run past ctest's timeout.
TEST_CASE("safetensors: a header of 200,000 tensors is read whole, and a key repeated at its end is found",
          "[io]") {
  constexpr int kTensors = 200000;
  std::string header = "{";
  for (int i = 0; i < kTensors; ++i)
    header += (i ? ",\"t" : "\"t") + std::to_string(i) + R"(":{"dtype":"I32","shape":[],"data_offsets":[)" +
              std::to_string(4 * i) + "," + std::to_string(4 * i + 4) + "]}";
  std::vector<std::byte> file = make_file(header + "}", 4 * kTensors);
  for (int i = 0; i < kTensors; ++i) {
    int32_t v = 3 * i;
    std::memcpy(file.data() + 8 + header.size() + 1 + 4 * i, &v, 4);
  }
  TensorMap m = parse_safetensors(file, "many.safetensors");
  REQUIRE(m.size() == static_cast<size_t>(kTensors));
  CHECK(m.at("t0").data<int64_t>()[0] == 0);
  CHECK(m.at("t123456").data<int64_t>()[0] == 3 * 123456);
  CHECK(m.at("t199999").data<int64_t>()[0] == 3 * 199999);

  std::string message;
  std::vector<std::byte> repeated =
      make_file(header + R"(,"t7":{"dtype":"I32","shape":[],"data_offsets":[0,4]}})", 4 * kTensors);
  REQUIRE(try_parse(repeated, &message) == Outcome::user_error);
  CHECK(message == "bad.safetensors: header names the key 't7' twice in one object; the file is corrupt or not a "
                   "safetensors file; export it again");
}

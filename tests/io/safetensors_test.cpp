// Safetensors: round trips, the exact on-disk layout, dtype conversions, atomic writes.
#include "runtime/io/safetensors.h"

#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

namespace fs = std::filesystem;
using namespace tandem;

namespace {

void append_bytes(std::vector<std::byte>& out, const void* p, size_t n) {
  auto b = static_cast<const std::byte*>(p);
  out.insert(out.end(), b, b + n);
}

/// A safetensors file built by hand: length prefix, the header text as given, the data.
std::vector<std::byte> make_file(const std::string& header, const std::vector<std::byte>& data) {
  std::vector<std::byte> out;
  uint64_t n = header.size();
  append_bytes(out, &n, 8);
  append_bytes(out, header.data(), header.size());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

template <class T>
std::vector<std::byte> raw(const std::vector<T>& values) {
  std::vector<std::byte> out;
  append_bytes(out, values.data(), values.size() * sizeof(T));
  return out;
}

/// A fresh directory under the system temp dir, removed with its contents at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path =
        fs::temp_directory_path() / ("tandem_io_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

std::vector<std::byte> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

/// The message of the UserError `f` throws; a marker when it throws none.
template <class F>
std::string user_error_of(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "<no UserError thrown>";
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         (a.nbytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0);
}

TensorMap random_tensors(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int64_t> any_int(std::numeric_limits<int64_t>::min(),
                                                 std::numeric_limits<int64_t>::max());
  auto floats = [&](Shape shape) {
    Tensor t = Tensor::empty(std::move(shape), DType::float32);
    for (float& v : t.span<float>()) v = normal(rng);
    return t;
  };
  auto ints = [&](Shape shape) {
    Tensor t = Tensor::empty(std::move(shape), DType::int64);
    for (int64_t& v : t.span<int64_t>()) v = any_int(rng);
    return t;
  };
  TensorMap m;
  m["fc.weight"] = floats({7, 5});
  m["fc.bias"] = floats({5});
  m["embed.weight"] = floats({3, 2, 4});
  m["scalar"] = floats({});
  m["step"] = ints({});
  m["token_ids"] = ints({2, 9});
  m["empty_rows"] = floats({0, 16});
  m["empty_ints"] = ints({4, 0});
  m["naïve ✓ unicode"] = floats({2});
  return m;
}

}  // namespace

TEST_CASE("safetensors: round trip in memory is bit-exact", "[io]") {
  TensorMap in = random_tensors(42);
  Tensor special =
      Tensor::from_vector<float>({6}, {std::numeric_limits<float>::quiet_NaN(), -0.0f,
                                       std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                                       std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max()});
  in["special"] = special;
  TensorMap out = parse_safetensors(serialize_safetensors(in), "memory");
  REQUIRE(out.size() == in.size());
  for (const auto& [name, t] : in) {
    INFO(name);
    REQUIRE(out.count(name) == 1);
    CHECK(same_bits(t, out.at(name)));
  }
  CHECK(out.at("scalar").shape().empty());
  CHECK(out.at("scalar").numel() == 1);
  CHECK(out.at("empty_rows").shape() == Shape{0, 16});
}

TEST_CASE("safetensors: round trip through a file with metadata", "[io]") {
  TempDir dir;
  std::string path = dir.file("model.safetensors");
  TensorMap in = random_tensors(7);
  std::map<std::string, std::string> metadata{{"format", "pt"}, {"tandem_step", "1200"}};
  write_safetensors(path, in, metadata);
  TensorMap out = read_safetensors(path);
  REQUIRE(out.size() == in.size());
  for (const auto& [name, t] : in) {
    INFO(name);
    CHECK(same_bits(t, out.at(name)));
  }
  CHECK(read_safetensors_metadata(path) == metadata);
  // The file holds exactly what serialize_safetensors makes.
  CHECK(read_bytes(path) == serialize_safetensors(in, metadata));
  CHECK(parse_safetensors_metadata(read_bytes(path), "m") == metadata);
  CHECK_THROWS_WITH(parse_safetensors_metadata(std::vector<std::byte>(3), "short.safetensors"),
                    Catch::Matchers::StartsWith("short.safetensors: file is 3 bytes"));
}

TEST_CASE("safetensors: serialize writes the bytes the Python writer writes", "[io]") {
  // What safetensors.torch.save_file({"a": torch.tensor([1.0, 2.0])}) writes: compact
  // JSON, then the header padded with spaces from 54 to 56 bytes.
  std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})"
                       "  ";
  REQUIRE(header.size() == 56);
  auto expected = make_file(header, raw(std::vector<float>{1.0f, 2.0f}));
  CHECK(serialize_safetensors({{"a", Tensor::from_vector<float>({2}, {1.0f, 2.0f})}}) == expected);

  // Names sorted, data packed in that order, header padded to 8 with spaces.
  auto bytes = serialize_safetensors(
      {{"z", Tensor::from_vector<int64_t>({1}, {5})}, {"b", Tensor::from_vector<float>({}, {3.0f})}}, {{"k", "v"}});
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n % 8 == 0);
  std::string text(reinterpret_cast<const char*>(bytes.data()) + 8, n);
  std::string unpadded = R"({"__metadata__":{"k":"v"},"b":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
                         R"("z":{"dtype":"I64","shape":[1],"data_offsets":[4,12]}})";
  CHECK(text.substr(0, unpadded.size()) == unpadded);
  CHECK(text.find_first_not_of(' ', unpadded.size()) == std::string::npos);
  float b;
  int64_t z;
  std::memcpy(&b, bytes.data() + 8 + n, 4);
  std::memcpy(&z, bytes.data() + 8 + n + 4, 8);
  CHECK(b == 3.0f);
  CHECK(z == 5);
  CHECK(bytes.size() == 8 + n + 12);
}

TEST_CASE("safetensors: parses a hand-built file", "[io]") {
  // Data deliberately out of name order, with a gap, and the header unpadded with
  // whitespace and an unknown extra field, as other writers may produce.
  std::vector<std::byte> data = raw(std::vector<int64_t>{-3, 1LL << 40});
  auto gap = raw(std::vector<uint32_t>{0xdeadbeef});
  data.insert(data.end(), gap.begin(), gap.end());
  auto w = raw(std::vector<float>{0.5f, -1.0f, 2.0f, 3.25f, 1e-30f, 7.0f});
  data.insert(data.end(), w.begin(), w.end());
  std::string header = R"({ "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [20, 44], "note": {"x": [1]}},
                            "ids": {"shape": [2], "dtype": "I64", "data_offsets": [0, 16]},
                            "none": {"dtype": "F32", "shape": [0], "data_offsets": [16, 16]},
                            "__metadata__": {"format": "pt", "empty": ""} })";
  TensorMap m = parse_safetensors(make_file(header, data), "hand.safetensors");
  REQUIRE(m.size() == 3);
  CHECK(m.at("w").shape() == Shape{2, 3});
  CHECK(m.at("w").dtype() == DType::float32);
  CHECK(m.at("w").to_vector<float>() == std::vector<float>{0.5f, -1.0f, 2.0f, 3.25f, 1e-30f, 7.0f});
  CHECK(m.at("ids").dtype() == DType::int64);
  CHECK(m.at("ids").to_vector<int64_t>() == std::vector<int64_t>{-3, 1LL << 40});
  CHECK(m.at("none").numel() == 0);

  // An empty file of tensors is valid too.
  CHECK(parse_safetensors(make_file("{}", {}), "empty").empty());
  CHECK(parse_safetensors(make_file(R"({"__metadata__":null})", {}), "empty").empty());
}

TEST_CASE("safetensors: converts F64 F16 BF16 to float32", "[io]") {
  float inf = std::numeric_limits<float>::infinity();
  SECTION("F64") {
    auto file = make_file(R"({"x":{"dtype":"F64","shape":[5],"data_offsets":[0,40]}})",
                          raw(std::vector<double>{1.5, -2.25, 0.1, 1e300, -1e-300}));
    auto v = parse_safetensors(file, "f64").at("x").to_vector<float>();
    CHECK(v == std::vector<float>{1.5f, -2.25f, 0.1f, inf, -0.0f});
  }
  SECTION("BF16") {
    auto file = make_file(R"({"x":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]}})",
                          raw(std::vector<uint16_t>{0x3f80, 0xc040, 0x7f80, 0x0000, 0x3e80, 0x0001}));
    Tensor t = parse_safetensors(file, "bf16").at("x");
    CHECK(t.shape() == Shape{2, 3});
    auto v = t.to_vector<float>();
    CHECK(v[0] == 1.0f);
    CHECK(v[1] == -3.0f);
    CHECK(v[2] == inf);
    CHECK(v[3] == 0.0f);
    CHECK(v[4] == 0.25f);
    CHECK(v[5] == std::bit_cast<float>(uint32_t{0x00010000}));
  }
  SECTION("F16") {
    auto file =
        make_file(R"({"x":{"dtype":"F16","shape":[9],"data_offsets":[0,18]}})",
                  raw(std::vector<uint16_t>{0x3c00, 0xc000, 0x7bff, 0x0001, 0x03ff, 0x8000, 0x7c00, 0xfc00, 0x3555}));
    auto v = parse_safetensors(file, "f16").at("x").to_vector<float>();
    CHECK(v[0] == 1.0f);
    CHECK(v[1] == -2.0f);
    CHECK(v[2] == 65504.0f);
    CHECK(v[3] == std::ldexp(1.0f, -24));         // smallest subnormal
    CHECK(v[4] == std::ldexp(1023.0f, -24));      // largest subnormal
    CHECK((v[5] == 0.0f && std::signbit(v[5])));  // -0
    CHECK(v[6] == inf);
    CHECK(v[7] == -inf);
    CHECK(v[8] == 0.333251953125f);
    auto nan =
        make_file(R"({"x":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}})", raw(std::vector<uint16_t>{0x7e00}));
    CHECK(std::isnan(parse_safetensors(nan, "f16").at("x").to_vector<float>()[0]));
  }
}

TEST_CASE("safetensors: converts I32 I16 I8 U8 BOOL to int64", "[io]") {
  std::vector<std::byte> data;
  auto add = [&](auto values) {
    auto r = raw(values);
    data.insert(data.end(), r.begin(), r.end());
  };
  add(std::vector<int32_t>{std::numeric_limits<int32_t>::min(), -1, 7, std::numeric_limits<int32_t>::max()});  // 0..16
  add(std::vector<int16_t>{-32768, 12345});                                                                    // 16..20
  add(std::vector<int8_t>{-128, 127, -1});                                                                     // 20..23
  add(std::vector<uint8_t>{255, 0});                                                                           // 23..25
  add(std::vector<uint8_t>{1, 0, 1});                                                                          // 25..28
  std::string header = R"({"i32":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]},)"
                       R"("i16":{"dtype":"I16","shape":[2],"data_offsets":[16,20]},)"
                       R"("i8":{"dtype":"I8","shape":[3],"data_offsets":[20,23]},)"
                       R"("u8":{"dtype":"U8","shape":[2],"data_offsets":[23,25]},)"
                       R"("mask":{"dtype":"BOOL","shape":[3],"data_offsets":[25,28]}})";
  TensorMap m = parse_safetensors(make_file(header, data), "ints");
  for (const auto& [name, t] : m) CHECK(t.dtype() == DType::int64);
  CHECK(m.at("i32").to_vector<int64_t>() ==
        std::vector<int64_t>{std::numeric_limits<int32_t>::min(), -1, 7, std::numeric_limits<int32_t>::max()});
  CHECK(m.at("i32").shape() == Shape{2, 2});
  CHECK(m.at("i16").to_vector<int64_t>() == std::vector<int64_t>{-32768, 12345});
  CHECK(m.at("i8").to_vector<int64_t>() == std::vector<int64_t>{-128, 127, -1});
  CHECK(m.at("u8").to_vector<int64_t>() == std::vector<int64_t>{255, 0});
  CHECK(m.at("mask").to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1});
}

TEST_CASE("safetensors: reading a missing file or a directory says cannot open", "[io]") {
  TempDir dir;
  CHECK_THAT(user_error_of([&] { read_safetensors(dir.file("nope.safetensors")); }),
             Catch::Matchers::Contains("cannot open") && Catch::Matchers::Contains("nope.safetensors"));
  CHECK_THAT(user_error_of([&] { read_safetensors(dir.path.string()); }),
             Catch::Matchers::Contains("cannot open") && Catch::Matchers::Contains("directory"));
  std::ofstream(dir.file("short.safetensors")) << "abc";
  CHECK_THAT(user_error_of([&] { read_safetensors(dir.file("short.safetensors")); }),
             Catch::Matchers::StartsWith(dir.file("short.safetensors") + ": file is 3 bytes"));
}

TEST_CASE("safetensors: write is atomic and replaces an existing file", "[io]") {
  TempDir dir;
  std::string path = dir.file("ckpt.safetensors");
  auto tmp_files = [&] {
    int n = 0;
    for (const auto& entry : fs::directory_iterator(dir.path))
      if (entry.path().filename().string().find(".tmp-") != std::string::npos) ++n;
    return n;
  };

  write_safetensors(path, random_tensors(1));
  CHECK(tmp_files() == 0);
  CHECK(read_safetensors(path).size() == random_tensors(1).size());

  TensorMap second{{"only", Tensor::from_vector<int64_t>({3}, {1, 2, 3})}};
  write_safetensors(path, second);
  CHECK(tmp_files() == 0);
  TensorMap back = read_safetensors(path);
  REQUIRE(back.size() == 1);
  CHECK(back.at("only").to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3});
  CHECK(read_safetensors_metadata(path).empty());

  SECTION("a failed write leaves the old file and no temporary") {
    // Renaming over a non-empty directory fails after the temporary was written.
    fs::create_directories(dir.path / "taken" / "child");
    CHECK_THROWS_AS(write_safetensors(dir.file("taken"), second), UserError);
    CHECK(tmp_files() == 0);
    CHECK_THAT(user_error_of([&] { write_safetensors(dir.file("no_such_dir/x.safetensors"), second); }),
               Catch::Matchers::Contains("cannot write"));
    CHECK(read_safetensors(path).at("only").to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3});
  }
}

TEST_CASE("safetensors: a write removes the temporaries of writers that were killed, and only those", "[io]") {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  pid_t child = ::fork();  // a process that has exited and been reaped: its PID is free
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  REQUIRE(::waitpid(child, nullptr, 0) == child);
  const std::string dead = std::to_string(child), alive = std::to_string(::getppid());
  const std::vector<std::string> stale = {"ckpt.safetensors.tmp-" + dead};
  const std::vector<std::string> kept = {"ckpt.safetensors.tmp-" + alive, "ckpt.safetensors.tmp-" + dead + "x",
                                         "ckpt.safetensors.tmp-", "other.safetensors.tmp-" + dead,
                                         "ckpt.safetensors.tmp-" + dead + ".bak"};
  for (const auto& name : stale) std::ofstream(dir.file(name)) << "half a checkpoint";
  for (const auto& name : kept) std::ofstream(dir.file(name)) << "not ours";

  write_safetensors(path, random_tensors(1));
  for (const auto& name : stale) CHECK_FALSE(fs::exists(dir.file(name)));
  for (const auto& name : kept) CHECK(fs::exists(dir.file(name)));
  CHECK(read_safetensors(path).size() == random_tensors(1).size());
}

TEST_CASE("safetensors: the writer refuses what it cannot write", "[io]") {
  using Catch::Matchers::Contains;
  Tensor t = Tensor::from_vector<float>({1}, {1.0f});
  TensorMap reserved{{"__metadata__", t}};
  TensorMap undefined{{"x", Tensor()}};
  TensorMap bad_name{{"bad\xff", t}};
  CHECK_THAT(user_error_of([&] { serialize_safetensors(reserved); }), Contains("reserves"));
  CHECK_THAT(user_error_of([&] { serialize_safetensors(undefined); }), Contains("undefined"));
  CHECK_THAT(user_error_of([&] { serialize_safetensors(bad_name); }), Contains("UTF-8"));
  CHECK_THAT(user_error_of([&] { serialize_safetensors({{"x", t}}, {{"k", "\xc3"}}); }), Contains("UTF-8"));
  TempDir dir;
  CHECK_THROWS_AS(write_safetensors(dir.file("x.safetensors"), undefined), UserError);
  CHECK(fs::is_empty(dir.path));
}

TEST_CASE("safetensors: reading a file converts dtypes too", "[io]") {
  TempDir dir;
  std::string path = dir.file("half.safetensors");
  auto bytes = make_file(R"({"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
                         R"("m":{"dtype":"BOOL","shape":[3],"data_offsets":[4,7]}})",
                         raw(std::vector<uint8_t>{0x00, 0x3c, 0x00, 0xc0, 1, 0, 1}));
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  TensorMap m = read_safetensors(path);
  CHECK(m.at("h").to_vector<float>() == std::vector<float>{1.0f, -2.0f});
  CHECK(m.at("m").to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1});
}

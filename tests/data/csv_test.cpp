// CSV loading: the real digits file, gzip against plain text, column mappings, and a
// table of broken files whose messages must name the file and line.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "runtime/data/dataset.h"
#include "tests/data/data_test_util.h"

using namespace tandem;
using namespace data_test;

namespace {

std::vector<ColumnSpec> digits_columns() {
  return {ColumnSpec{"x", {64}, DType::float32, std::nullopt}, ColumnSpec{"label", {}, DType::int64, 10}};
}

/// Writes `data` back as CSV text: x then label, one sample per line.
std::string to_csv(const Dataset& data) {
  const Tensor& x = data.tensors().at("x");
  const Tensor& label = data.tensors().at("label");
  int64_t width = x.size(1);
  std::string text;
  char cell[64];
  for (int64_t i = 0; i < data.size(); ++i) {
    for (int64_t j = 0; j < width; ++j) {
      std::snprintf(cell, sizeof cell, "%.9g,", x.data<float>()[i * width + j]);
      text += cell;
    }
    text += std::to_string(label.data<int64_t>()[i]) + "\n";
  }
  return text;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

void require_same(const Dataset& a, const Dataset& b) {
  REQUIRE(a.tensors().size() == b.tensors().size());
  for (const auto& [name, t] : a.tensors()) {
    INFO("tensor " << name);
    REQUIRE(b.tensors().count(name) == 1);
    CHECK(same_bytes(t, b.tensors().at(name)));
  }
}

}  // namespace

TEST_CASE("digits.csv.gz loads 1797 samples of 64 pixels and a label", "[csv]") {
  REQUIRE(std::filesystem::exists(kDigitsPath));  // python3-sklearn (scripts/setup.sh)
  auto start = std::chrono::steady_clock::now();
  Dataset digits = load_dataset(spec_of(kDigitsPath), digits_columns());
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  auto again = std::chrono::steady_clock::now();
  (void)load_dataset(spec_of(kDigitsPath), digits_columns());
  double ms_again = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - again).count();
  std::printf("digits.csv.gz: loaded in %.2f ms (again: %.2f ms)\n", ms, ms_again);
  CHECK(ms < 250);  // a few ms in a release build; generous for a debug build on a busy machine

  REQUIRE(digits.size() == 1797);
  const Tensor& x = digits.tensors().at("x");
  const Tensor& label = digits.tensors().at("label");
  CHECK(x.shape() == Shape{1797, 64});
  CHECK(x.dtype() == DType::float32);
  CHECK(label.shape() == Shape{1797});
  CHECK(label.dtype() == DType::int64);

  // The first and last lines of the file, as zcat prints them (label last).
  const std::vector<float> first = {0, 0, 5,  13, 9, 1, 0,  0,  0,  0,  13, 15, 10, 15, 5,  0, 0, 3,  15, 2,  0, 11,
                                    8, 0, 0,  4,  12, 0, 0,  8,  8,  0,  0,  5,  8,  0,  0,  9, 8, 0,  0,  4,  11, 0,
                                    1, 12, 7, 0,  0,  2, 14, 5,  10, 12, 0,  0,  0,  0,  6,  13, 10, 0, 0, 0};
  const std::vector<float> last = {0, 0, 10, 14, 8,  1,  0,  0,  0,  2,  16, 14, 6,  1,  0,  0,
                                   0, 0, 15, 15, 8,  15, 0,  0,  0,  0,  5,  16, 16, 10, 0,  0,
                                   0, 0, 12, 15, 15, 12, 0,  0,  0,  4,  16, 6,  4,  16, 6,  0,
                                   0, 8, 16, 10, 8,  16, 8,  0,  0,  1,  8,  12, 14, 12, 1,  0};
  REQUIRE(first.size() == 64);
  REQUIRE(last.size() == 64);
  auto xs = x.span<float>();
  CHECK(std::vector<float>(xs.begin(), xs.begin() + 64) == first);
  CHECK(std::vector<float>(xs.end() - 64, xs.end()) == last);
  CHECK(label.data<int64_t>()[0] == 0);
  CHECK(label.data<int64_t>()[1] == 1);
  CHECK(label.data<int64_t>()[1796] == 8);

  std::vector<int64_t> counts(10, 0);
  for (int64_t v : label.span<int64_t>()) {
    REQUIRE(v >= 0);
    REQUIRE(v < 10);
    ++counts[v];
  }
  CHECK(counts == std::vector<int64_t>{178, 182, 177, 183, 181, 182, 181, 179, 174, 180});
  double sum = 0;
  for (float v : xs) sum += v;
  CHECK(sum == 561718.0);
}

TEST_CASE("digits as plain csv gives the same tensors as the gzip file", "[csv]") {
  TempDir dir;
  Dataset gz = load_dataset(spec_of(kDigitsPath), digits_columns());
  std::string plain = dir.file("digits.csv");
  write_bytes(plain, to_csv(gz));
  require_same(gz, load_dataset(spec_of(plain), digits_columns()));
}

TEST_CASE("random csv reads the same plain and gzipped", "[csv]") {
  uint64_t seed = run_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 100.0f);
  TempDir dir;
  const int64_t n = 1000 + static_cast<int64_t>(rng() % 3000), width = 7;
  std::vector<float> x(static_cast<size_t>(n * width));
  std::vector<int64_t> label(static_cast<size_t>(n));
  for (float& v : x) v = normal(rng);
  for (int64_t& v : label) v = static_cast<int64_t>(rng() % 5);
  Dataset expected(TensorMap{{"x", Tensor::from_vector({n, width}, x)}, {"label", Tensor::from_vector({n}, label)}});
  std::string text = to_csv(expected);  // > 64 KiB: crosses read chunks and stored blocks

  std::vector<ColumnSpec> columns = {{"x", {width}, DType::float32, std::nullopt}, {"label", {}, DType::int64, 5}};
  write_bytes(dir.file("r.csv"), text);
  write_bytes(dir.file("r.csv.gz"), gzip_stored(text));
  Dataset plain = load_dataset(spec_of(dir.file("r.csv")), columns);
  Dataset gzip = load_dataset(spec_of(dir.file("r.csv.gz")), columns);
  require_same(plain, expected);
  require_same(gzip, expected);

  SECTION("without a final newline and with CRLF line ends") {
    std::string crlf;
    for (char c : text) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
    crlf.resize(crlf.size() - 2);
    write_bytes(dir.file("crlf.csv"), crlf);
    require_same(load_dataset(spec_of(dir.file("crlf.csv")), columns), expected);
  }
}

TEST_CASE("csv header trailing blank lines and integer labels written as floats", "[csv]") {
  TempDir dir;
  std::string path = dir.file("h.csv");
  write_bytes(path, "x_0,x_1,label\n1.5,-2,3.0\n 4 , 5e1 ,+1\n\n  \n");
  DataSpec spec = spec_of(path);
  spec.header = true;
  Dataset d = load_dataset(spec, {{"x", {2}, DType::float32, std::nullopt}, {"label", {}, DType::int64, 4}});
  REQUIRE(d.size() == 2);
  CHECK(d.tensors().at("x").to_vector<float>() == std::vector<float>{1.5f, -2.0f, 4.0f, 50.0f});
  CHECK(d.tensors().at("label").to_vector<int64_t>() == std::vector<int64_t>{3, 1});
}

TEST_CASE("csv column mapping by name", "[csv]") {
  TempDir dir;
  std::string path = dir.file("m.csv");
  write_bytes(path, "7,1,2,3,99\n8,4,5,6,99\n");
  DataSpec spec = spec_of(path);
  spec.columns = {{"label", "0"}, {"x", "1:4"}};
  std::vector<ColumnSpec> columns = {{"x", {3}, DType::float32, std::nullopt}, {"label", {}, DType::int64, 10}};
  Dataset d = load_dataset(spec, columns);
  CHECK(d.tensors().at("x").to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(d.tensors().at("label").to_vector<int64_t>() == std::vector<int64_t>{7, 8});

  SECTION("a 2-d sample shape takes its columns row-major") {
    spec.columns = {{"label", "4"}, {"x", "0:4"}};
    Dataset e = load_dataset(spec, {{"x", {2, 2}, DType::float32, std::nullopt}, {"label", {}, DType::int64, 100}});
    CHECK(e.tensors().at("x").shape() == Shape{2, 2, 2});
    CHECK(e.tensors().at("x").to_vector<float>() == std::vector<float>{7, 1, 2, 3, 8, 4, 5, 6});
  }
  SECTION("a mapping past the last column names the line") {
    spec.columns = {{"label", "5"}, {"x", "1:4"}};
    CHECK_THROWS_WITH(load_dataset(spec, columns), path + ":1: expected at least 6 columns, found 5; no value for 'label' (column 5)");
  }
  SECTION("a range whose width differs from the sample shape") {
    spec.columns = {{"label", "0"}, {"x", "1:3"}};
    CHECK_THROWS_WITH(load_dataset(spec, columns), Catch::Contains("'x' maps 2 columns"));
  }
  SECTION("a malformed range") {
    spec.columns = {{"label", "0"}, {"x", "3:1"}};
    CHECK_THROWS_WITH(load_dataset(spec, columns), Catch::Contains("'3:1' is not a column index"));
  }
  SECTION("a column without an entry") {
    spec.columns = {{"x", "1:4"}};
    CHECK_THROWS_WITH(load_dataset(spec, columns), path + ": columns: no entry for 'label'");
  }
  SECTION("an entry for an unknown name") {
    spec.columns = {{"label", "0"}, {"x", "1:4"}, {"y", "4"}};
    CHECK_THROWS_WITH(load_dataset(spec, columns), Catch::Contains("'y' is neither an input nor a target"));
  }
}

TEST_CASE("broken csv files are refused with file and line", "[csv]") {
  const std::string kNotFinite = "; training data must hold finite values (drop or fill in that row)";
  const std::string kInOrder =
      ". Without a header the inputs, then the targets, take the columns in order (x 0-1, label 2): if the file's "
      "columns differ, give it a header line naming them and header: true, or map them with columns: {name: "
      "\"a:b\"} under train: data:";
  struct Case {
    const char* what;
    std::string text;
    bool header;
    std::string message;  // after "PATH"
  };
  const std::vector<Case> cases = {
      {"too few columns", "1,2,3\n1,2\n", false, ":2: expected 3 columns, found 2; no value for 'label' (column 2)" + kInOrder},
      {"short of a wide input", "1\n", false, ":1: expected 3 columns, found 1; no value for 'x' (its columns 0-1)" + kInOrder},
      {"too many columns", "1,2,3\n1,2,3\n4,5,6,7\n", false, ":3: expected 3 columns, found 4" + kInOrder},
      {"non-numeric cell", "1,2,3\n1,abc,3\n", false, ":2: column 1: 'abc' is not a number"},
      {"empty cell", "1,,3\n", false, ":1: column 1: '' is not a number"},
      {"trailing junk", "1,2x,3\n", false, ":1: column 1: '2x' is not a number"},
      {"label out of range", "1,2,3\n1,2,12\n", false, ":2: column 2: label 12 is outside [0, 10)"},
      {"negative label", "1,2,-1\n", false, ":1: column 2: label -1 is outside [0, 10)"},
      {"non-integer label", "1,2,3.5\n", false, ":1: column 2: label '3.5' is not an integer"},
      {"non-numeric label", "1,2,cat\n", false, ":1: column 2: 'cat' is not a number"},
      {"float out of range", "1e60,2,3\n", false, ":1: column 0: '1e60' is out of range for float32"},
      {"nan", "1,2,3\n1,nan,3\n", false,
       ":2: column 1: 'nan' is not a finite number" + kNotFinite},
      {"NaN", "1,NaN,3\n", false, ":1: column 1: 'NaN' is not a finite number" + kNotFinite},
      {"inf", "inf,2,3\n", false, ":1: column 0: 'inf' is not a finite number" + kNotFinite},
      {"-infinity", "1,2,3\n1,2,3\n-Infinity,2,3\n", false, ":3: column 0: '-Infinity' is not a finite number" + kNotFinite},
      {"+inf", "+inf,2,3\n", false, ":1: column 0: '+inf' is not a finite number" + kNotFinite},
      {"line numbers count the header", "x_0,x_1,label\n1,2,3\n1,2\n", true,
       ":3: expected 3 columns, found 2; no value for 'label' (column 2) (the header names 3)"},
      {"blank line between samples", "1,2,3\n\n1,2,3\n", false, ":2: blank line between samples"},
      {"empty file", "", false, ": no samples"},
      {"only blank lines", "\n\n \n", false, ": no samples"},
      {"header only", "x_0,x_1,label\n", true, ": no samples"},
  };
  std::vector<ColumnSpec> columns = {{"x", {2}, DType::float32, std::nullopt}, {"label", {}, DType::int64, 10}};
  TempDir dir;
  for (const Case& c : cases) {
    for (bool gz : {false, true}) {
      INFO(c.what << (gz ? " (gzip)" : ""));
      std::string path = dir.file(gz ? "broken.csv.gz" : "broken.csv");
      write_bytes(path, gz ? gzip_stored(c.text) : c.text);
      DataSpec spec = spec_of(path);
      spec.header = c.header;
      CHECK_THROWS_AS(load_dataset(spec, columns), UserError);
      CHECK_THROWS_WITH(load_dataset(spec, columns), path + c.message);
    }
  }
}

TEST_CASE("missing unreadable and corrupt files are user errors", "[csv]") {
  TempDir dir;
  std::vector<ColumnSpec> columns = digits_columns();
  std::string missing = dir.file("missing.csv");
  CHECK_THROWS_WITH(load_dataset(spec_of(missing), columns), missing + ": cannot open: No such file or directory");
  std::string missing_gz = dir.file("missing.csv.gz");
  CHECK_THROWS_WITH(load_dataset(spec_of(missing_gz), columns), missing_gz + ": cannot open: No such file or directory");
  std::string folder = dir.file("folder.csv");
  std::filesystem::create_directories(folder);
  CHECK_THROWS_WITH(load_dataset(spec_of(folder), columns), Catch::StartsWith(folder + ": cannot open: it is a directory"));

  std::string not_gz = dir.file("plain.csv.gz");
  write_bytes(not_gz, "1,2,3\n");
  CHECK_THROWS_WITH(load_dataset(spec_of(not_gz), columns), not_gz + ": not a gzip file");

  std::string gz = read_bytes(kDigitsPath);
  REQUIRE(gz.size() > 1000);
  SECTION("truncated") {
    for (size_t keep : {size_t{12}, gz.size() / 2, gz.size() - 4}) {
      INFO("kept " << keep << " bytes");
      std::string path = dir.file("truncated.csv.gz");
      write_bytes(path, gz.substr(0, keep));
      CHECK_THROWS_AS(load_dataset(spec_of(path), columns), UserError);
      CHECK_THROWS_WITH(load_dataset(spec_of(path), columns), Catch::StartsWith(path + ":"));
    }
  }
  SECTION("bytes flipped") {
    uint64_t seed = run_seed();
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    for (int trial = 0; trial < 20; ++trial) {
      std::string bad = gz;
      size_t at = 10 + rng() % (bad.size() - 10);
      bad[at] = static_cast<char>(bad[at] ^ (1 + rng() % 255));
      INFO("flipped byte " << at);
      std::string path = dir.file("flipped.csv.gz");
      write_bytes(path, bad);
      CHECK_THROWS_WITH(load_dataset(spec_of(path), columns), Catch::StartsWith(path + ":"));
    }
  }
  SECTION("a bad checksum") {
    std::string bad = gzip_stored("1,2,3\n");
    bad[bad.size() - 8] ^= 1;
    std::string path = dir.file("crc.csv.gz");
    write_bytes(path, bad);
    CHECK_THROWS_WITH(load_dataset(spec_of(path), columns), Catch::StartsWith(path + ": corrupt gzip data"));
  }
}

TEST_CASE("the format comes from the extension unless given", "[csv]") {
  TempDir dir;
  std::string path = dir.file("data.txt");
  write_bytes(path, "1,2,3\n");
  std::vector<ColumnSpec> columns = {{"x", {2}, DType::float32, std::nullopt}, {"label", {}, DType::int64, 10}};
  CHECK_THROWS_WITH(load_dataset(spec_of(path), columns), Catch::StartsWith(path + ": cannot tell the data format"));
  DataSpec spec = spec_of(path);
  spec.format = "csv";
  CHECK(load_dataset(spec, columns).size() == 1);
  spec.format = "parquet";
  CHECK_THROWS_WITH(load_dataset(spec, columns), Catch::Contains("unknown data format 'parquet'"));
  spec.format = "csv";
  CHECK_THROWS_WITH(load_dataset(spec, {}), Catch::Contains("no columns"));
  CHECK_THROWS_WITH(load_dataset(spec, {columns[0], columns[0]}), Catch::Contains("'x' is named twice"));
}

// CSV columns read by the names a header gives them (header: true): any order, extra
// columns left out, wide inputs numbered as pandas and numpy number them; a header that does
// not name the inputs and targets is refused at its line, naming the missing and the unknown.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "runtime/data/dataset.h"
#include "tests/data/data_test_util.h"

using namespace tandem;
using namespace data_test;

namespace {

struct Table {
  std::vector<float> x;        // samples x 3
  std::vector<int64_t> label;  // samples
};

Table random_table(int64_t samples) {
  std::mt19937_64 gen(run_seed());
  std::uniform_real_distribution<float> value(-100, 100);
  std::uniform_int_distribution<int64_t> cls(0, 9);
  Table t;
  for (int64_t i = 0; i < samples; ++i) {
    for (int j = 0; j < 3; ++j) t.x.push_back(std::round(value(gen) * 64) / 64);  // exact in text
    t.label.push_back(cls(gen));
  }
  return t;
}

std::vector<ColumnSpec> columns() {
  return {{"x", {3}, DType::float32, std::nullopt}, {"label", {}, DType::int64, 10}};
}

std::string cell(float v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", v);
  return text;
}

}  // namespace

TEST_CASE("csv header: columns by name in any order", "[csv][header]") {
  TempDir dir;
  const Table t = random_table(7);
  // label first, x's values reversed, an id column no input reads
  for (const std::string form : {"x_%d", "x.%d", "x[%d]", "x%d"}) {
    INFO("form " << form);
    char names[3][16];
    for (int j = 0; j < 3; ++j) std::snprintf(names[j], sizeof names[j], form.c_str(), j);
    std::string text = std::string("label,id,") + names[2] + "," + names[1] + "," + names[0] + "\n";
    for (size_t i = 0; i < t.label.size(); ++i)
      text += std::to_string(t.label[i]) + "," + std::to_string(1000 + i) + "," + cell(t.x[3 * i + 2]) + "," +
              cell(t.x[3 * i + 1]) + "," + cell(t.x[3 * i]) + "\n";
    const std::string path = dir.file("named.csv");
    write_bytes(path, text);
    DataSpec spec = spec_of(path);
    spec.header = true;
    Dataset d = load_dataset(spec, columns());
    CHECK(d.tensors().at("x").to_vector<float>() == t.x);
    CHECK(d.tensors().at("label").to_vector<int64_t>() == t.label);
  }
}

TEST_CASE("csv header: refused when it does not name the inputs and targets", "[csv][header]") {
  TempDir dir;
  const std::string path = dir.file("h.csv");
  DataSpec spec = spec_of(path);
  spec.header = true;
  SECTION("a misspelt target and an unknown column") {
    write_bytes(path, "x_0,x_1,x_2,lable\n1,2,3,4\n");
    CHECK_THROWS_WITH(load_dataset(spec, columns()),
                      Catch::StartsWith(path + ":1: the header does not name 'label'; it has 'lable', which no input "
                                               "or target is named. With header: true the columns are read by name") &&
                          Catch::Contains("columns: {name: \"a:b\"}"));
  }
  SECTION("a wide input with a value missing") {
    write_bytes(path, "label,x_0,x_1\n1,2,3\n");
    CHECK_THROWS_WITH(load_dataset(spec, columns()),
                      Catch::StartsWith(path + ":1: the header does not name 'x' (3 columns, 'x_0' to 'x_2'); it has "
                                               "'x_0', 'x_1', which no input or target is named"));
  }
  SECTION("a name given twice") {
    write_bytes(path, "x_0,x_1,x_2,label,label\n1,2,3,4,5\n");
    CHECK_THROWS_WITH(load_dataset(spec, columns()),
                      path + ":1: the header names 'label' twice (columns 3 and 4); rename one");
  }
  SECTION("a row shorter than the header") {
    write_bytes(path, "x_0,x_1,x_2,label\n1,2,3,4\n1,2,3\n");
    CHECK_THROWS_WITH(load_dataset(spec, columns()),
                      path + ":3: expected 4 columns, found 3; no value for 'label' (column 3) (the header names 4)");
  }
  SECTION("columns: still maps by position, the header skipped") {
    write_bytes(path, "a,b,c,d,e\n9,1,2,3,7\n");
    spec.columns = {{"label", "4"}, {"x", "1:4"}};
    Dataset d = load_dataset(spec, columns());
    CHECK(d.tensors().at("x").to_vector<float>() == std::vector<float>{1, 2, 3});
    CHECK(d.tensors().at("label").to_vector<int64_t>() == std::vector<int64_t>{7});
  }
  SECTION("a guessed header (run --inputs) that names nothing is skipped") {
    write_bytes(path, "a,b,c,d\n1,2,3,4\n");
    Dataset d = load_dataset(spec, columns(), CsvHeader::may_name_columns);
    CHECK(d.tensors().at("x").to_vector<float>() == std::vector<float>{1, 2, 3});
    CHECK(d.tensors().at("label").to_vector<int64_t>() == std::vector<int64_t>{4});
    write_bytes(path, "x_0,x_1,x_2,lbl\n1,2,3,4\n");  // naming some of them: a mistake, refused
    CHECK_THROWS_WITH(load_dataset(spec, columns(), CsvHeader::may_name_columns),
                      Catch::StartsWith(path + ":1: the header does not name 'label'"));
  }
}

TEST_CASE("csv: a text header without header: true gets a hint", "[csv][header]") {
  TempDir dir;
  const std::string path = dir.file("h.csv");
  write_bytes(path, "user,item,click\n1,2,1\n");
  CHECK_THROWS_WITH(load_dataset(spec_of(path), columns()),
                    path + ":1: 'user,item,click' is not numbers but looks like a header line: give header: true under "
                           "train: data: to read the columns by these names, or delete the line");
}

TEST_CASE("csv and safetensors: ids outside their table are refused when the data loads", "[csv][ids]") {
  TempDir dir;
  std::mt19937_64 gen(run_seed());
  const int64_t rows = std::uniform_int_distribution<int64_t>(5, 50)(gen);
  ColumnSpec item{"item", {}, DType::int64, rows};
  item.bound_by = "the table of layer 'item_emb' (embedding, num_embeddings " + std::to_string(rows) + ")";
  const std::vector<ColumnSpec> cols = {item, {"label", {}, DType::float32, std::nullopt}};
  const std::string path = dir.file("ids.csv");
  write_bytes(path, "0,1\n" + std::to_string(rows - 1) + ",0\n" + std::to_string(rows) + ",1\n");
  CHECK_THROWS_WITH(load_dataset(spec_of(path), cols),
                    path + ":3: column 0: input 'item' id " + std::to_string(rows) + " is outside [0, " +
                        std::to_string(rows) + "), the rows of " + item.bound_by +
                        "; fix the data, or give the table more rows");
  write_bytes(path, "0,1\n" + std::to_string(rows - 1) + ",0\n");
  CHECK(load_dataset(spec_of(path), cols).tensors().at("item").to_vector<int64_t>() ==
        std::vector<int64_t>{0, rows - 1});
}

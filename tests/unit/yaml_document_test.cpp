// The model file's YAML is read strictly (graph/yaml_document.h): what yaml-cpp accepts
// silently (a second document, a repeated key, a quote left open to the end of the file,
// bytes that are not UTF-8 text) is refused at its line and column.
#include <catch2/catch.hpp>

#include <string>

#include "graph/load_graph.h"

using namespace tandem;
using namespace std::string_literals;

namespace {

const std::string kHead = "name: m\ninputs:\n  x: {shape: [batch, 3]}\nlayers:\n";  // layers start on line 5
const std::string kTrain =
    "name: m\ninputs:\n  x: {shape: [batch, 3]}\ntargets:\n  y: {shape: [batch], dtype: int64}\n"
    "layers:\n  - {name: fc, op: linear, in_features: 3, out_features: 2}\n"
    "loss: {op: cross_entropy, input: fc, target: y}\n";  // train: starts on line 9

/// The message of the ModelError loading `yaml` throws, checked to start at line:column
/// (line 0: anywhere).
std::string refusal(const std::string& yaml, int line, int column) {
  try {
    load_graph_from_string(yaml, "m.yaml");
  } catch (const ModelError& e) {
    std::string message = e.what();
    if (line == 0) return message;
    CHECK(e.location().line == line);
    CHECK(e.location().column == column);
    CHECK_THAT(message, Catch::StartsWith("m.yaml:" + std::to_string(line) + ":" + std::to_string(column) + ": "));
    return message;
  }
  FAIL("loaded: " << yaml);
  return "";
}

}  // namespace

TEST_CASE("a second YAML document is refused, an empty one after --- is not content", "[graph][yaml]") {
  CHECK_THAT(refusal(kHead + "  - {op: relu}\n---\nname: other\n", 6, 1),
             Catch::Contains("a second YAML document starts here; a model file holds one document"));
  CHECK_THAT(refusal("---\n" + kHead + "  - {op: relu}\n...\n---\n[1]\n", 8, 1),
             Catch::Contains("a second YAML document"));
  CHECK(load_graph_from_string(kHead + "  - {op: relu}\n---\n", "m.yaml").nodes.size() == 1);
  CHECK(load_graph_from_string("---\n" + kHead + "  - {op: relu}\n...\n", "m.yaml").nodes.size() == 1);
}

TEST_CASE("a token that cannot begin a document is refused, not read as an empty file", "[graph][yaml]") {
  // yaml-cpp emits an empty document for it without consuming it: Load said "the file is
  // empty", and a loop over the documents never ended
  CHECK_THAT(refusal(", The seeds' memory story\nname: m\n", 1, 1), Catch::EndsWith("invalid YAML: unexpected ','"));
  CHECK_THAT(refusal("# a comment\n   , x\n", 2, 4), Catch::EndsWith("invalid YAML: unexpected ','"));
  CHECK_THAT(refusal(kHead + "  - {op: relu}\n...\n, x\n", 7, 1), Catch::EndsWith("invalid YAML: unexpected ','"));
}

TEST_CASE("a key written twice in any mapping is refused, naming where it was first", "[graph][yaml]") {
  CHECK_THAT(refusal(kHead + "  - {name: a, op: linear, in_features: 3, out_features: 2,\n"
                             "     init: {weight: zeros, bias: ones, weight: ones}}\n", 6, 40),
             Catch::EndsWith("duplicate key 'weight' (first at line 6, column 13)"));
  CHECK_THAT(refusal(kTrain + "train:\n  data:\n    path: d.csv\n    columns: {x: \"0:3\", y: \"3\", x: \"4:7\"}\n", 12,
                     33),
             Catch::EndsWith("duplicate key 'x' (first at line 12, column 15)"));
  CHECK_THAT(refusal("name: a\n" + kHead + "  - {op: relu}\n", 2, 1),
             Catch::EndsWith("duplicate key 'name' (first at line 1, column 1)"));
  // the same name in two mappings is no repeat
  CHECK(load_graph_from_string(kHead + "  - {name: a, op: relu}\n  - {name: b, op: relu}\n", "m.yaml").nodes.size() == 2);
}

TEST_CASE("a quote left open to the end of the file is refused where it opens", "[graph][yaml]") {
  // yaml-cpp reads the rest of the file as the string, which said "missing required key 'inputs'"
  CHECK_THAT(refusal("name: \"abc\ninputs: {x: {shape: [batch, 3]}}\nlayers: [{op: relu}]\n", 1, 7),
             Catch::EndsWith("the string quoted here has no closing \" before the end of the file; close the quote"));
  CHECK_THAT(refusal(kHead + "  - {op: relu, name: 'it''s\n", 5, 22), Catch::Contains("has no closing '"));
  // closed quotes across lines, escaped quotes and doubled single quotes are fine
  CHECK(load_graph_from_string("name: \"a \\\" b\n  c\"\ninputs: {x: {shape: [batch, 3]}}\nlayers: [{op: relu}]\n", "m.yaml")
            .name == "a \" b c");
  CHECK(load_graph_from_string("name: 'it''s'\ninputs: {x: {shape: [batch, 3]}}\nlayers: [{op: relu}]\n", "m.yaml").name ==
        "it's");
}

TEST_CASE("text that is not UTF-8, or holds control characters, is refused at the byte", "[graph][yaml]") {
  CHECK_THAT(refusal("name: m\n\xff\xfe", 2, 1),
             Catch::EndsWith("this is not a YAML text file: byte 0xff is not UTF-8; save the model file as UTF-8 text"));
  CHECK_THAT(refusal("name: caf\xc3\xa9\xc3", 1, 11), Catch::Contains("byte 0xc3 is not UTF-8"));
  CHECK_THAT(refusal("name: m\0x"s, 1, 8), Catch::Contains("this is not a YAML text file (it contains NUL bytes)"));
  CHECK_THAT(refusal("name: a\x1b[2Jb\n", 1, 8),
             Catch::Contains("control character '\\x1b' is not allowed in YAML text"));
  CHECK_THAT(refusal("name: a\xc2\x9b" "b\n", 1, 8), Catch::Contains("control character '\\xc2\\x9b'"));
  // letters of any script, tabs inside values and CRLF line ends are text
  CHECK(load_graph_from_string("name: \"caf\xc3\xa9\t\xe6\x97\xa5\"\r\ninputs: {x: {shape: [batch, 3]}}\r\nlayers: [{op: relu}]\r\n",
                               "m.yaml")
            .name == "caf\xc3\xa9\t\xe6\x97\xa5");
}

TEST_CASE("nesting past the limit is refused by name, and a long scalar is quoted cut short", "[graph][yaml]") {
  CHECK_THAT(refusal(std::string(100000, '[') + std::string(100000, ']'), 0, 0),
             Catch::Contains("the YAML nests more than 256 mappings and lists deep"));
  std::string nested = "name: m\ninputs: {x: {shape: [batch, 3]}}\nlayers:\n";
  for (int i = 0; i < 300; ++i) nested += std::string(2 * i + 2, ' ') + "- a:\n";
  CHECK_THAT(refusal(nested, 0, 0), Catch::Contains("nests more than 256"));
  std::string message = refusal("name: m\ninputs: " + std::string(5000, 'z') + "\nlayers: [{op: relu}]\n", 2, 9);
  CHECK(message.size() < 300);
  CHECK_THAT(message, Catch::Contains("zzz...'"));
}

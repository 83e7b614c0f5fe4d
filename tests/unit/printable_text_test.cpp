// Error messages quote what users give (core/printable_text.h): NUL bytes, control
// characters and bytes that are not UTF-8 come out escaped, letters of any script as they are.
#include <catch2/catch.hpp>

#include <string>

#include "core/error.h"
#include "core/printable_text.h"

using namespace tandem;
using namespace std::string_literals;

TEST_CASE("printable_text escapes control characters and keeps UTF-8 letters", "[printable]") {
  CHECK(printable_text("layer 'fc'") == "layer 'fc'");
  CHECK(printable_text("a\0b"s) == "a\\x00b");
  CHECK(printable_text("a\nb\tc\rd") == "a\\nb\\tc\\rd");
  CHECK(printable_text("\x1b[31mred\x7f") == "\\x1b[31mred\\x7f");
  CHECK(printable_text("caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x99\x82") == "caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x99\x82");
  CHECK(printable_text("\xc2\x9b" "2J") == "\\xc2\\x9b2J");         // C1 CSI
  CHECK(printable_text("\xff\xfe") == "\\xff\\xfe");                 // not UTF-8
  CHECK(printable_text("\xc0\xaf") == "\\xc0\\xaf");                 // overlong '/'
  CHECK(printable_text("\xed\xa0\x80") == "\\xed\\xa0\\x80");        // a surrogate
  CHECK(printable_text("\xe6\x97") == "\\xe6\\x97");                 // cut short
  CHECK(printable_text(printable_text("x\x01y")) == "x\\x01y");      // escaping twice changes nothing
}

TEST_CASE("UserError keeps the whole message, escaped", "[printable]") {
  const UserError e("data.csv:3: column 1: 'a\0b\x1b' is not a number"s);
  CHECK(std::string(e.what()) == "data.csv:3: column 1: 'a\\x00b\\x1b' is not a number");
}

// Memory sizes as users write them and as Tandem prints them.
#include <catch2/catch.hpp>

#include "core/error.h"
#include "core/memory_size.h"

using namespace tandem;

TEST_CASE("memory sizes parse with binary and decimal units", "[memory_size]") {
  CHECK(parse_memory_size("4096") == 4096);
  CHECK(parse_memory_size("8GiB") == (size_t{8} << 30));
  CHECK(parse_memory_size("512MiB") == (size_t{512} << 20));
  CHECK(parse_memory_size("1.5GB") == 1'500'000'000);
  CHECK(parse_memory_size("2G") == (size_t{2} << 30));
  CHECK(parse_memory_size("2 gib") == (size_t{2} << 30));
  CHECK(parse_memory_size("64k") == 65536);
  CHECK(parse_memory_size("1.5GiB") == (size_t{3} << 29));
  CHECK(parse_memory_size("3MB") == 3'000'000);
  CHECK(parse_memory_size("1TiB") == (size_t{1} << 40));
  CHECK(parse_memory_size("100B") == 100);
  CHECK(parse_memory_size(" 16GiB ") == (size_t{16} << 30));
  CHECK(parse_memory_size("0") == 0);
}

TEST_CASE("bad memory sizes are user errors with an example", "[memory_size]") {
  for (const char* bad : {"lots", "", "GiB", "-1GiB", "12XB", "1.2.3G", "99999999999999999999TiB", "."}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_memory_size(bad), UserError);
    CHECK_THROWS_WITH(parse_memory_size(bad), Catch::Contains("e.g. 16GiB") && Catch::Contains("'" + std::string(bad) + "'"));
  }
}

TEST_CASE("memory sizes print in binary units with one decimal", "[memory_size]") {
  CHECK(format_bytes(0) == "0 B");
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_bytes(4096) == "4.0 KiB");
  CHECK(format_bytes(size_t{96} << 20) == "96.0 MiB");
  CHECK(format_bytes(size_t{3} << 29) == "1.5 GiB");
  CHECK(format_bytes((size_t{1} << 30) - 1) == "1.0 GiB");  // not "1024.0 MiB"
  CHECK(format_bytes(size_t{2} << 40) == "2.0 TiB");
}

// Memory sizes as users write them ("16GiB", "512MiB", "1.5GB", "4096") and as Tandem
// prints them ("1.5 GiB").
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tandem {

/// Bytes from text: a number, optionally fractional, then an optional unit, case-insensitive,
/// with or without a space between. Binary units: K, KiB, M, MiB, G, GiB, T, TiB (powers of
/// 1024; a bare "G" is GiB, as memory is sold and reported in GiB). Decimal units: KB, MB, GB,
/// TB (powers of 1000). B or no unit: bytes. A fractional result is rounded to the nearest byte.
/// Throws UserError, with examples, for anything else (negative, empty, overflowing, unknown unit).
size_t parse_memory_size(std::string_view text);

/// As parse_memory_size, but a number without a unit is refused: a device's memory of "4"
/// is 4 GiB to anyone who writes it, never 4 bytes. "4B" says bytes.
size_t parse_device_memory_size(std::string_view text);

/// "512 B", "4.0 KiB", "96.0 MiB", "1.5 GiB", "2.0 TiB": binary units, one decimal.
std::string format_bytes(size_t bytes);

}  // namespace tandem

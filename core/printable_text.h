// Text that is safe to print to a terminal: what error messages quote comes from files
// and command lines, and may hold NUL bytes (which would cut a C string short), control
// characters (which a terminal obeys) or bytes that are not UTF-8.
#pragma once

#include <string>
#include <string_view>

namespace tandem {

/// `text` with every control character (C0, DEL and C1) and every byte that is not part
/// of well-formed UTF-8 written as an escape: \n, \r, \t, else \xNN per byte. Well-formed
/// UTF-8 letters stay as they are; backslashes are not doubled, so escaping twice changes
/// nothing.
std::string printable_text(std::string_view text);

/// The length of the well-formed UTF-8 sequence at the start of `text` (1 to 4), or 0
/// when its first byte does not begin one (an overlong form, a surrogate, past U+10FFFF
/// or cut short).
size_t utf8_sequence_length(std::string_view text);

/// A number as a message shows it: "NaN", "+inf", "65536", "1.5e-45" (printf's %g).
std::string short_number(double x);

}  // namespace tandem

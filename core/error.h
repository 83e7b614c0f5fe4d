// Two error channels (see STYLE.md): UserError for anything a user can cause (bad
// YAML, shapes, files, devices, memory) with a message they can act on; TANDEM_ASSERT
// for a bug in Tandem, which names the file and line. Neither exits the process.
#pragma once

#include <stdexcept>
#include <string>

namespace tandem {

/// A problem the user can fix: bad input, missing device, exhausted memory.
/// The CLI prints what() and exits with code 2.
class UserError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A broken invariant inside Tandem: a bug, not the user's fault.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

[[noreturn]] void fail_assertion(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace tandem

#define TANDEM_ASSERT(cond, ...)                                                        \
  do {                                                                                  \
    if (!(cond)) ::tandem::fail_assertion(#cond, __FILE__, __LINE__, std::string{__VA_ARGS__}); \
  } while (0)

// Two error channels (docs/architecture.md, "Errors"): UserError for anything a user can cause (bad
// YAML, shapes, files, devices, memory) with a message they can act on; TANDEM_ASSERT
// for a bug in Tandem, which names the file and line. Neither exits the process.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

#include "core/device.h"

namespace tandem {

/// A problem the user can fix: bad input, missing device, exhausted memory.
/// The CLI prints what() and exits with code 2.
/// The message is stored as printable_text (core/printable_text.h): what a user's file or
/// command line put in it cannot cut it short or reach the terminal as control characters.
class UserError : public std::runtime_error {
 public:
  explicit UserError(std::string_view message);
};

/// A device could not provide the memory asked for. The message says which device, how much
/// was asked for and is in use, and what to do: "out of memory on cuda:1: asked for 96.0 MiB
/// with 1.9 GiB of 2.0 GiB in use; try a smaller batch (--batch) or place fewer layers on
/// cuda:1 (--place / placement:)". The allocator does not know the layer: the runtime catches
/// this and rethrows `e.in("layer 'fc' (linear)")`, which puts the layer in front.
class OutOfMemory : public UserError {
 public:
  /// `capacity` 0: the device's capacity is not known (the host).
  OutOfMemory(Device device, size_t requested, size_t in_use, size_t capacity, std::string context = {});
  /// The same error with `context` and ": " before the message.
  OutOfMemory in(const std::string& context) const;

  Device device;
  size_t requested;  // bytes asked for
  size_t in_use;     // bytes allocated on the device when it was asked
  size_t capacity;   // the device's capacity in bytes; 0 when not known
  std::string context;  // where it happened, e.g. "layer 'fc' (linear)"; empty when not known
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

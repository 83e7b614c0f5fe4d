#include "core/error.h"

#include "core/memory_size.h"
#include "core/printable_text.h"

namespace tandem {
namespace {

std::string out_of_memory_message(Device device, size_t requested, size_t in_use, size_t capacity,
                                  const std::string& context) {
  std::string d = device.str();
  std::string text = context.empty() ? "" : context + ": ";
  text += "out of memory on " + d + ": asked for " + format_bytes(requested) + " with " + format_bytes(in_use);
  if (capacity > 0) text += " of " + format_bytes(capacity);
  text += " in use";
  if (capacity > 0) text += " (" + format_bytes(capacity > in_use ? capacity - in_use : 0) + " free)";
  text += "; try a smaller batch (--batch) or place fewer layers on " + d + " (--place / placement:)";
  return text;
}

}  // namespace

UserError::UserError(std::string_view message) : std::runtime_error(printable_text(message)) {}

OutOfMemory::OutOfMemory(Device device, size_t requested, size_t in_use, size_t capacity, std::string context)
    : UserError(out_of_memory_message(device, requested, in_use, capacity, context)),
      device(device),
      requested(requested),
      in_use(in_use),
      capacity(capacity),
      context(std::move(context)) {}

OutOfMemory OutOfMemory::in(const std::string& where) const {
  return OutOfMemory(device, requested, in_use, capacity, context.empty() ? where : where + ": " + context);
}

void fail_assertion(const char* expr, const char* file, int line, const std::string& msg) {
  std::string text = std::string("internal error (a bug in Tandem) at ") + file + ":" + std::to_string(line) +
                     ": assertion `" + expr + "` failed";
  if (!msg.empty()) text += ": " + msg;
  throw InternalError(text);
}

}  // namespace tandem

#include "core/error.h"

namespace tandem {

void fail_assertion(const char* expr, const char* file, int line, const std::string& msg) {
  std::string text = std::string("internal error (a bug in Tandem) at ") + file + ":" + std::to_string(line) +
                     ": assertion `" + expr + "` failed";
  if (!msg.empty()) text += ": " + msg;
  throw InternalError(text);
}

}  // namespace tandem

// What every fuzz target shares: the libFuzzer entry point's signature, and the rule that
// bad input may only end in a UserError whose message says where (anything else escaping,
// an assertion included, is a crash the fuzzer keeps).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace tandem::fuzz {

/// Stops the run as a crash: libFuzzer saves the input that did it.
[[noreturn]] inline void crash(const std::string& why) {
  std::fprintf(stderr, "fuzz target: %s\n", why.c_str());
  std::abort();
}

/// A refusal must name what it refused: `message` starts with `prefix` (the file name).
inline void require_prefix(std::string_view message, std::string_view prefix) {
  if (message.substr(0, prefix.size()) != prefix)
    crash("a refusal that does not start with '" + std::string(prefix) + "': " + std::string(message));
}

}  // namespace tandem::fuzz

// What several unit tests share: a fresh random generator whose seed the log shows, and
// running the tandem CLI for its output and exit code.
#pragma once

#include <sys/wait.h>

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <random>
#include <string>

namespace tandem::testing {

/// A generator from a fresh seed, printed under `test`'s name so that a failure can be
/// replayed.
inline std::mt19937_64 seeded_rng(const char* test) {
  const uint64_t seed = std::random_device{}();
  std::cout << test << ": seed " << seed << "\n";
  return std::mt19937_64(seed);
}

/// Runs `tandem ARGS` (the CLI this build made), stderr folded into the returned output;
/// its exit code in *code (-1 when it did not exit). `prefix` goes before the command
/// ("env -u TANDEM_SIM_GPUS "). A run past `deadline_seconds` is killed and exits 124
/// (coreutils' timeout), so a test of something that could hang fails instead.
inline std::string run_cli(const std::string& args, int* code, const std::string& prefix, int deadline_seconds = 600) {
  const std::string cmd = prefix + "timeout -k 5 " + std::to_string(deadline_seconds) + " " + std::string(TANDEM_CLI) +
                          " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  const int status = pclose(pipe);
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

inline std::string run_cli(const std::string& args, int* code, int deadline_seconds = 600) {
  return run_cli(args, code, "", deadline_seconds);
}

/// The summary of a `--json` run: its output's last line that starts with "{" (train's
/// JSON lines end with it; notes on stderr, folded in, come before).
inline std::string json_summary(const std::string& output) {
  size_t end = output.size();
  while (end > 0) {
    const size_t start = output.rfind('\n', end - 1);
    const size_t from = start == std::string::npos ? 0 : start + 1;
    if (from < end && output[from] == '{') return output.substr(from, end - from);
    if (start == std::string::npos) break;
    end = start;
  }
  return output;  // no JSON line: the parse that follows fails showing the output
}

}  // namespace tandem::testing

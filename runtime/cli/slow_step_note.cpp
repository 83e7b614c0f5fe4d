#include "runtime/cli/slow_step_note.h"

#include <fmt/core.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/memory_size.h"
#include "core/printable_text.h"

namespace tandem::cli {
namespace {

using Clock = std::chrono::steady_clock;

/// TANDEM_NOTE_AFTER seconds (a test sets 0 to see the notes), else 2.
std::chrono::duration<double> threshold() {
  if (const char* text = std::getenv("TANDEM_NOTE_AFTER")) {
    char* end = nullptr;
    const double seconds = std::strtod(text, &end);
    if (end != text && *end == '\0' && seconds >= 0) return std::chrono::duration<double>(seconds);
  }
  return std::chrono::seconds(2);
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

}  // namespace

SlowStepNote::SlowStepNote(std::string what, bool speaks) : what_(std::move(what)), start_(Clock::now()) {
  if (!speaks) return;
  watcher_ = std::thread([this] {
    std::unique_lock lock(mutex_);
    auto next = start_ + std::chrono::duration_cast<Clock::duration>(threshold());
    while (!done_changed_.wait_until(lock, next, [this] { return done_; })) {
      if (!noted_) fmt::print(stderr, "note: {} takes a while\n", what_);
      else fmt::print(stderr, "note: still {} ({:.0f} s)\n", what_, seconds_since(start_));
      std::fflush(stderr);
      noted_ = true;
      next = Clock::now() + std::chrono::seconds(10);
    }
  });
}

SlowStepNote::~SlowStepNote() {
  if (!watcher_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    done_ = true;
  }
  done_changed_.notify_one();
  watcher_.join();
  // an error on its way out says what happened itself; "done" would be wrong then
  if (noted_ && std::uncaught_exceptions() == 0) {
    fmt::print(stderr, "note: {}: done in {:.1f} s\n", what_, seconds_since(start_));
    std::fflush(stderr);
  }
}

std::string file_with_size(const std::string& path) {
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  const std::string name = "'" + printable_text(path) + "'";
  if (ec) return name;
  return name + " (" + format_bytes(static_cast<size_t>(bytes)) + ")";
}

}  // namespace tandem::cli

// A note on stderr when a step before training or inference takes long (loading large
// weights, initialising a large model, reading the data): a log, or a person watching a
// pipe, otherwise sees nothing for minutes and cannot tell work from a hang. Quiet on the
// fast path: nothing is printed for a step done within the threshold (2 seconds, or
// TANDEM_NOTE_AFTER seconds), and the watch costs a sleeping thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace tandem::cli {

class SlowStepNote {
 public:
  /// Watches the step `what` ("loading weights 'w.safetensors' (2.0 GiB)") until the end of
  /// this scope: past the threshold "note: loading weights ... takes a while", then a line
  /// each 10 seconds ("note: still loading weights ... (12 s)"), and at the end "note:
  /// loading weights ...: done in 14.2 s". `speaks` false (another rank): nothing.
  explicit SlowStepNote(std::string what, bool speaks = true);
  ~SlowStepNote();
  SlowStepNote(const SlowStepNote&) = delete;
  SlowStepNote& operator=(const SlowStepNote&) = delete;

 private:
  std::string what_;
  std::chrono::steady_clock::time_point start_;
  std::mutex mutex_;
  std::condition_variable done_changed_;
  bool done_ = false, noted_ = false;
  std::thread watcher_;
};

/// "'PATH' (2.0 GiB)": a file and its size, for a note; the path alone when it has none.
std::string file_with_size(const std::string& path);

}  // namespace tandem::cli

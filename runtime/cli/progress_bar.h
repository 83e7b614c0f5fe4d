// The progress bar `tandem train` draws on a terminal (docs/training.md, "Output"): one line,
// redrawn in place with \r, that says where the run is and how fast it goes:
//   epoch   2/10 [#########...............]   15/45  12038 samples/s  loss 0.3030  ETA 12s
// Redrawn at most ten times a second: a model that does thousands of steps a second would
// otherwise spend its time writing to the terminal, and an eye reads no faster. Erased
// before anything else is printed (the epoch's line, a note), so a line printed after it is
// whole. Python's fit() draws the same line (python/tandem/progress.py).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace tandem::cli {

/// Where a run is, as the bar shows it.
struct ProgressState {
  int64_t epoch = 1, epochs = 1;  // epoch from 1
  int64_t done = 0, total = 0;    // steps of the epoch
  int64_t samples = 0;            // trained in this epoch so far
  double loss = 0;                // the epoch's running mean
  double epoch_seconds = 0;       // since the epoch began
};

/// The bar's line for `state`, at most `columns` - 1 characters (a line as wide as the
/// terminal wraps on some, and \r then redraws only its second half): the bar narrows
/// first, then goes.
std::string progress_line(const ProgressState& state, int columns);

/// "12s", "3m05s", "1h02m": a time left, as short as it reads well.
std::string duration_text(double seconds);

/// Not thread-safe: one training thread draws.
class ProgressBar {
 public:
  /// Draws on `out` (a terminal) for a run of `epochs` epochs.
  ProgressBar(std::FILE* out, int64_t epochs);
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  /// After each step: `done` of `total` steps of `epoch` (from 1), `samples` trained by
  /// this step, the epoch's running loss. Redraws when kRedrawInterval has passed since the
  /// last drawing, and always at the epoch's last step.
  void step(int64_t epoch, int64_t done, int64_t total, int64_t samples, double loss);
  /// The next epoch's clock starts now (after validation and the checkpoint).
  void start_epoch();
  /// Erases the line drawn, leaving the cursor at its start; nothing when none is drawn.
  void clear();
  /// How many times the line was drawn (for tests of the rate).
  int64_t draws() const { return draws_; }

  static constexpr std::chrono::milliseconds kRedrawInterval{100};

 private:
  using Clock = std::chrono::steady_clock;
  std::FILE* out_;
  int64_t epochs_;
  Clock::time_point epoch_start_, last_draw_;
  int64_t samples_ = 0;
  size_t drawn_ = 0;  // characters on the line now
  int64_t draws_ = 0;
};

/// The terminal's width in columns on `fd`, 80 when it does not say.
int terminal_columns(int fd);

}  // namespace tandem::cli

// What `tandem train` reports as it goes, for a log or a dashboard to follow a run
// (docs/training.md, "Following a run"): step records (the step's loss, learning rate and
// throughput) at an interval, an epoch record after each epoch, each one
//   - a JSON line on stdout with --json ({"event": "step", ...}, {"event": "epoch", ...};
//     the command's summary, {"event": "summary", ...}, is always the last line),
//   - a text line on stdout when it is not a terminal and --json is not given (steps only:
//     the command prints the epoch's line itself),
//   - a row of DIR/metrics.csv and scalars in a TensorBoard event file with --log-dir DIR.
// Under mpirun rank 0 alone makes one.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "runtime/cli/tensorboard_events.h"

namespace tandem::cli {

struct TrainingLogOptions {
  bool json = false;        // --json: JSON lines on stdout
  bool text_steps = false;  // stdout is no terminal and no --json: a text line per step record
  int64_t every = 0;        // --log-every N: a step record every N steps; 0: by the clock
  std::string dir;          // --log-dir, "" for none
  bool resumed = false;     // --resume: metrics.csv goes on where the run left it
  int64_t epochs = 0;       // of the run, for the text lines
};

class TrainingLog {
 public:
  /// Opens DIR/metrics.csv and the event file (creating DIR): UserError naming --log-dir
  /// and the path when they cannot be written.
  explicit TrainingLog(TrainingLogOptions options);
  ~TrainingLog();
  TrainingLog(const TrainingLog&) = delete;
  TrainingLog& operator=(const TrainingLog&) = delete;

  /// After each optimizer step: `step` of the run (from 1), the step's loss, the learning
  /// rate it applied and its samples; `done` of `total` steps of `epoch` (from 1). Writes a
  /// step record when the interval has passed.
  void step(int64_t epoch, int64_t step, int64_t done, int64_t total, double loss, double lr, int64_t samples);
  /// After each epoch: `metrics` as the summary's "epochs" entry has it (without the step
  /// losses), at `step` of the run.
  void epoch(nlohmann::json metrics, int64_t step);
  /// Whether step records are written at all (otherwise step() need not be called).
  bool wants_steps() const { return options_.json || options_.text_steps || csv_; }

  /// The clock's interval between step records: long enough that a model doing thousands
  /// of steps a second writes a line a second, short enough that a dashboard looks alive.
  static constexpr std::chrono::milliseconds kRecordInterval{1000};
  /// A text line for a person reading a log: one each 10 seconds of an epoch at most.
  static constexpr std::chrono::milliseconds kTextInterval{10000};

 private:
  TrainingLogOptions options_;
  std::FILE* csv_ = nullptr;
  std::string csv_path_;
  std::unique_ptr<TensorBoardEvents> events_;
  using Clock = std::chrono::steady_clock;
  Clock::time_point last_record_, last_text_, epoch_start_;
  int64_t samples_since_record_ = 0;
  int64_t samples_in_epoch_ = 0;

  void csv_row(const nlohmann::ordered_json& record);
};

}  // namespace tandem::cli

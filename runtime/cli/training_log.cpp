#include "runtime/cli/training_log.h"

#include <fmt/core.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "core/printable_text.h"

namespace tandem::cli {
namespace {

namespace fs = std::filesystem;

/// metrics.csv's columns: a step row fills loss, lr and samples_per_second; an epoch row
/// train_loss, the validation metrics, samples_per_second and seconds. Fixed, so that a
/// resumed run appends rows under the same header.
const std::vector<std::string> kColumns{"event",         "epoch",           "step",
                                        "loss",          "lr",              "samples_per_second",
                                        "train_loss",    "validation_loss", "validation_accuracy",
                                        "validation_auc", "seconds"};

std::string header() {
  std::string line;
  for (const auto& c : kColumns) line += (line.empty() ? "" : ",") + c;
  return line;
}

/// A value as the JSON line has it: doubles in their shortest round-trip form, so that a
/// cell and the JSON line parse to the same number.
std::string cell(const nlohmann::ordered_json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return fmt::format("{}", v.get<double>());
  return v.dump();
}

}  // namespace

TrainingLog::TrainingLog(TrainingLogOptions options) : options_(std::move(options)) {
  last_record_ = last_text_ = epoch_start_ = Clock::now();
  if (options_.dir.empty()) return;
  std::error_code ec;
  fs::create_directories(options_.dir, ec);
  if (ec)
    throw UserError("--log-dir '" + printable_text(options_.dir) + "': cannot create the directory (" + ec.message() + ")");
  csv_path_ = (fs::path(options_.dir) / "metrics.csv").string();
  // A resumed run goes on with the file its run began, when it has the same columns; a
  // new run starts it afresh.
  bool append = false;
  if (options_.resumed) {
    std::ifstream in(csv_path_);
    std::string first;
    append = in && std::getline(in, first) && first == header();
  }
  csv_ = std::fopen(csv_path_.c_str(), append ? "a" : "w");
  if (!csv_)
    throw UserError("--log-dir: cannot write '" + printable_text(csv_path_) + "' (" + std::strerror(errno) + ")");
  if (!append) std::fprintf(csv_, "%s\n", header().c_str());
  std::fflush(csv_);
  events_ = std::make_unique<TensorBoardEvents>(options_.dir);
}

TrainingLog::~TrainingLog() {
  if (csv_) std::fclose(csv_);
}

void TrainingLog::step(int64_t epoch, int64_t step, int64_t done, int64_t total, double loss, double lr, int64_t samples) {
  const Clock::time_point now = Clock::now();
  samples_since_record_ += samples;
  samples_in_epoch_ += samples;
  const bool by_count = options_.every > 0;
  if ((options_.json || csv_) && (by_count ? step % options_.every == 0 : now - last_record_ >= kRecordInterval)) {
    const double seconds = std::chrono::duration<double>(now - last_record_).count();
    nlohmann::ordered_json record{{"event", "step"},
                          {"epoch", epoch},
                          {"step", step},
                          {"loss", loss},
                          {"lr", lr},
                          {"samples_per_second", samples_since_record_ / std::max(seconds, 1e-9)}};
    last_record_ = now;
    samples_since_record_ = 0;
    if (options_.json) {
      fmt::print("{}\n", record.dump());
      std::fflush(stdout);  // a pipe is block-buffered: a dashboard would see nothing until the end
    }
    if (csv_) {
      csv_row(record);
      events_->scalars(step, {{"train/loss", loss}, {"train/lr", lr}, {"train/samples_per_second", record["samples_per_second"].get<double>()}});
    }
  }
  if (options_.text_steps && done < total && (by_count ? step % options_.every == 0 : now - last_text_ >= kTextInterval)) {
    last_text_ = now;
    const double elapsed = std::chrono::duration<double>(now - epoch_start_).count();
    fmt::print("epoch {:>3}/{}  step {}/{}  loss {:.4f}  lr {:.4g}  {:.0f} samples/s  {:.0f}s left in the epoch\n", epoch,
               options_.epochs, done, total, loss, lr, samples_in_epoch_ / std::max(elapsed, 1e-9),
               elapsed / done * (total - done));
    std::fflush(stdout);
  }
}

void TrainingLog::epoch(nlohmann::json metrics, int64_t step) {
  epoch_start_ = last_text_ = Clock::now();  // the next epoch's clock: validation and saving are behind it
  samples_in_epoch_ = 0;
  // the event and where the run is first, for a person reading the lines
  nlohmann::ordered_json record{{"event", "epoch"}, {"epoch", metrics["epoch"]}, {"step", step}};
  for (const auto& [key, value] : metrics.items()) record[key] = value;
  if (options_.json) {
    fmt::print("{}\n", record.dump());
    std::fflush(stdout);
  }
  if (!csv_) return;
  csv_row(record);
  std::vector<std::pair<std::string, double>> scalars;
  for (const char* key : {"train_loss", "validation_loss", "validation_accuracy", "validation_auc", "samples_per_second"})
    if (record.contains(key) && record[key].is_number()) scalars.emplace_back(std::string("epoch/") + key, record[key].get<double>());
  events_->scalars(step, scalars);
}

void TrainingLog::csv_row(const nlohmann::ordered_json& record) {
  std::string line;
  for (size_t i = 0; i < kColumns.size(); ++i) {
    if (i) line += ',';
    if (record.contains(kColumns[i])) line += cell(record[kColumns[i]]);
  }
  line += '\n';
  if (std::fputs(line.c_str(), csv_) < 0 || std::fflush(csv_) != 0)
    throw UserError("--log-dir: cannot write '" + printable_text(csv_path_) + "' (" + std::strerror(errno) + ")");
}

}  // namespace tandem::cli

#include "runtime/checkpoint_metadata.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "graph/training_spec.h"

namespace tandem {
namespace {

constexpr const char* kMark = "tandem_checkpoint";
constexpr const char* kVersion = "1";
/// Counts past this are no run's: refusing them keeps ++step and step * batch from overflowing.
constexpr int64_t kMaxCount = int64_t{1} << 53;

class FieldReader {
 public:
  FieldReader(const std::map<std::string, std::string>& meta, const std::string& path) : meta_(meta), path_(path) {}

  const std::string& text(const char* key) const {
    auto it = meta_.find(key);
    if (it == meta_.end())
      fail(std::string("has no '") + key +
           "' (a checkpoint holds model, epoch, step, total_steps, seed, optimizer, lr, batch and epochs)");
    return it->second;
  }

  /// A whole number of digits only (no sign, space or suffix) within [low, high].
  template <class T>
  T whole(const char* key, T low, T high) const {
    const std::string& s = text(key);
    T value = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    bool digits = !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
    if (digits && ec == std::errc::result_out_of_range)
      fail_field(key, s, "is too large; expected a whole number from " + std::to_string(low) + " to " +
                             std::to_string(high));
    if (!digits || ec != std::errc() || end != s.data() + s.size())
      fail_field(key, s, "is not a whole number (digits only)");
    if (value < low || value > high)
      fail_field(key, s, "is out of range; expected a whole number from " + std::to_string(low) + " to " +
                             std::to_string(high));
    return value;
  }

  double number(const char* key) const {
    const std::string& s = text(key);
    double value = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(value) || value < 0)
      fail_field(key, s, "is not a finite number >= 0");
    return value;
  }

  [[noreturn]] void fail_field(const char* key, const std::string& value, const std::string& why) const {
    std::string shown = value.substr(0, 60) + (value.size() > 60 ? "..." : "");
    fail(std::string("field '") + key + "' = '" + shown + "' " + why);
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw UserError(path_ + ": the checkpoint's metadata " + what +
                    "; the file is damaged or was not written by tandem train --save");
  }

 private:
  const std::map<std::string, std::string>& meta_;
  const std::string& path_;
};

}  // namespace

std::map<std::string, std::string> checkpoint_metadata_map(const CheckpointMetadata& m) {
  char lr[32];
  auto [end, ec] = std::to_chars(lr, lr + sizeof lr, m.lr);  // shortest text that reads back exactly
  return {{kMark, kVersion},
          {"model", m.model},
          {"epoch", std::to_string(m.epoch)},
          {"step", std::to_string(m.step)},
          {"total_steps", std::to_string(m.total_steps)},
          {"seed", std::to_string(m.seed)},
          {"optimizer", m.optimizer},
          {"lr", ec == std::errc() ? std::string(lr, end) : std::to_string(m.lr)},
          {"batch", std::to_string(m.batch)},
          {"epochs", std::to_string(m.epochs)},
          {"accumulate", std::to_string(m.accumulate)},
          {"ranks", std::to_string(m.ranks)}};
}

bool is_checkpoint_metadata(const std::map<std::string, std::string>& meta) { return meta.count(kMark) > 0; }

CheckpointMetadata parse_checkpoint_metadata(const std::map<std::string, std::string>& meta, const std::string& path) {
  FieldReader r(meta, path);
  if (r.text(kMark) != kVersion)
    r.fail_field(kMark, r.text(kMark), "is not a version this Tandem reads (it writes and reads 1)");
  CheckpointMetadata m;
  m.model = r.text("model");
  m.epoch = r.whole<int64_t>("epoch", 0, kMaxCount);
  m.step = r.whole<int64_t>("step", 0, kMaxCount);
  m.total_steps = r.whole<int64_t>("total_steps", 0, kMaxCount);
  m.seed = r.whole<uint64_t>("seed", 0, std::numeric_limits<uint64_t>::max());
  m.optimizer = r.text("optimizer");
  if (std::find(optimizer_names().begin(), optimizer_names().end(), m.optimizer) == optimizer_names().end())
    r.fail_field("optimizer", m.optimizer,
                 "is not an optimizer; expected sgd, adam, adamw, adagrad, rowwise_adagrad or sparse_adam");
  m.lr = r.number("lr");
  m.batch = r.whole<int64_t>("batch", 1, kMaxCount);
  m.epochs = r.whole<int64_t>("epochs", 1, kMaxCount);
  // written since distributed training and accumulation: an older file trained without them
  if (meta.count("accumulate")) m.accumulate = r.whole<int64_t>("accumulate", 1, kMaxCount);
  if (meta.count("ranks")) m.ranks = r.whole<int64_t>("ranks", 1, 1 << 24);
  // Every epoch holds at least one step.
  if (m.step < m.epoch)
    r.fail(std::string("says ") + std::to_string(m.epoch) + " epochs done in " + std::to_string(m.step) +
           " steps, but every epoch takes at least one step");
  return m;
}

}  // namespace tandem

// The training state a checkpoint's safetensors metadata holds beside its tensors, and
// its validation on load: every field is checked as strictly as the weights (a whole
// number is all digits, in range), so that nothing a damaged or hand-edited file holds
// reaches the trainer as a wrong value or an assertion.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace tandem {

struct CheckpointMetadata {
  std::string model;      // the graph's name
  int64_t epoch = 0;      // epochs done
  int64_t step = 0;       // optimizer steps done
  int64_t total_steps = 0;  // the run's total, for schedules
  uint64_t seed = 0;
  std::string optimizer;  // sgd, adam or adamw
  double lr = 0;
  int64_t batch = 1;
  int64_t epochs = 1;     // the run's epochs when saved
  int64_t accumulate = 1;  // micro-batches a step (absent from older checkpoints: 1)
  int64_t ranks = 1;       // the processes of the job (absent from older checkpoints: 1)
};

/// The metadata map write_safetensors stores, marked as a Tandem checkpoint.
std::map<std::string, std::string> checkpoint_metadata_map(const CheckpointMetadata& m);

/// Whether `meta` carries the checkpoint mark (any value).
bool is_checkpoint_metadata(const std::map<std::string, std::string>& meta);

/// Reads and checks every field of `meta`, read from `path` (named in messages). UserError
/// "PATH: the checkpoint's metadata ..." naming the field, its value and what it must be:
/// a field missing, a number that is not all digits, negative or too large, a step count
/// below the epochs done, an unknown optimizer.
CheckpointMetadata parse_checkpoint_metadata(const std::map<std::string, std::string>& meta, const std::string& path);

}  // namespace tandem

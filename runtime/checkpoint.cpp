#include "runtime/checkpoint.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/printable_text.h"
#include "runtime/distributed/distributed_data_parallel.h"
#include "runtime/io/safetensors.h"

namespace tandem {
namespace {

/// A checkpoint's loss scaler state, checked against `run` and the `steps` done (UserError
/// naming `path`): present exactly when the run scales the loss, in range.
void check_loss_scaler_state(const TensorMap& tensors, const std::string& path, int64_t steps, const ResumingRun& run) {
  const bool held = tensors.count("loss_scaler.scale") > 0;
  if (held != run.scales_loss)
    throw UserError(path + (held ? ": the checkpoint holds fp16 loss scaling state, and this run does not scale the loss "
                                   "(no layer runs in fp16, or train: loss_scaling is disabled)"
                                 : ": the checkpoint holds no fp16 loss scaling state, and this run scales the loss (a "
                                   "layer runs in fp16)") +
                    ": resume with the precision and loss_scaling it was trained with");
  if (!held) return;
  auto scalar = [&](const char* name, DType dtype) -> const Tensor& {
    auto it = tensors.find(name);
    if (it == tensors.end() || it->second.dtype() != dtype || it->second.numel() != 1)
      throw UserError(path + ": the checkpoint's '" + name + "' must be one " + std::string(dtype_name(dtype)) +
                      " value; the file is damaged or was not written by tandem train --save");
    return it->second;
  };
  const float scale = scalar("loss_scaler.scale", DType::float32).data<float>()[0];
  const int64_t tracker = scalar("loss_scaler.growth_tracker", DType::int64).data<int64_t>()[0];
  const int64_t skipped = scalar("loss_scaler.skipped_steps", DType::int64).data<int64_t>()[0];
  auto refuse = [&](const std::string& what) {
    throw UserError(path + ": the checkpoint's " + what + "; the file is damaged or was not written by tandem train --save");
  };
  if (!(scale > 0) || !std::isfinite(scale))
    refuse("loss_scaler.scale " + short_number(scale) + " is not a positive finite number");
  if (tracker < 0 || tracker >= run.growth_interval)
    refuse("loss_scaler.growth_tracker " + std::to_string(tracker) + " is not within [0, growth_interval " +
           std::to_string(run.growth_interval) + ") (a run resumed with another growth_interval is refused " +
           "here when its count has passed it)");
  if (skipped < 0 || skipped > steps)
    refuse("loss_scaler.skipped_steps " + std::to_string(skipped) + " is not within [0, " + std::to_string(steps) +
           "], the steps done");
}

}  // namespace

void write_checkpoint(const std::string& path, const CheckpointContents& contents) {
  TensorMap tensors;
  for (const auto& [name, p] : contents.weights) tensors.emplace(name, p);
  for (const auto& [name, t] : contents.optimizer) tensors.emplace("optimizer." + name, t);
  for (const auto& [name, t] : contents.loss_scaler) tensors.emplace("loss_scaler." + name, t);
  write_safetensors(path, tensors, checkpoint_metadata_map(contents.metadata));
}

CheckpointMetadata check_checkpoint_metadata(const std::map<std::string, std::string>& meta, const std::string& path,
                                             const ResumingRun& run) {
  const CheckpointMetadata& r = run.settings;
  if (!is_checkpoint_metadata(meta))
    throw UserError(path + ": not a Tandem checkpoint (no training state); to start from these weights use --weights");
  const CheckpointMetadata m = parse_checkpoint_metadata(meta, path);
  if (m.model != r.model)
    throw UserError(path + ": a checkpoint of model '" + m.model + "', not of '" + r.model + "'");
  if (m.seed != r.seed || m.batch != r.batch || m.optimizer != r.optimizer)
    throw UserError(path + ": the checkpoint was trained with seed " + std::to_string(m.seed) + ", batch " +
                    std::to_string(m.batch) + " and optimizer " + m.optimizer +
                    "; resume with the same settings to continue the same run");
  if (m.accumulate != r.accumulate || m.ranks != r.ranks)
    throw UserError(path + ": the checkpoint was trained with accumulate " + std::to_string(m.accumulate) + " on " +
                    std::to_string(m.ranks) + " rank(s), this run has accumulate " + std::to_string(r.accumulate) +
                    " on " + std::to_string(r.ranks) + ": resume with the same settings to continue the same run" +
                    (m.ranks != r.ranks ? ", or start a new run from its weights with --weights " + path +
                                              " (the optimizer state and the step count start afresh)"
                                        : ""));
  return m;
}

std::pair<TensorMap, std::map<std::string, std::string>> read_checkpoint(const std::string& path,
                                                                         const ResumingRun& run,
                                                                         DistributedDataParallel* ddp) {
  // Every field is checked before the tensors are read and anything changes: a refused
  // checkpoint leaves the trainer as it was.
  auto read = [&] {
    std::map<std::string, std::string> meta = read_safetensors_metadata(path);
    check_checkpoint_metadata(meta, path, run);
    return std::make_pair(read_safetensors(path), std::move(meta));
  };
  if (!ddp) return read();
  // Rank 0 reads the file (the others' hosts need not have it) and tells the others what
  // it found, or why it could not.
  std::pair<TensorMap, std::map<std::string, std::string>> contents;
  std::string meta, error;
  if (ddp->rank() == 0) try {
      contents = read();
      meta = nlohmann::json(contents.second).dump();
    } catch (const UserError& e) {
      error = e.what();
    }
  ddp->group().broadcast(error, 0, "rank 0's reading of checkpoint " + path);
  if (!error.empty()) throw JobError(error);
  ddp->broadcast(contents.first, "the broadcast of checkpoint " + path);
  ddp->group().broadcast(meta, 0, "the broadcast of checkpoint " + path + "'s metadata");
  contents.second = nlohmann::json::parse(meta).get<std::map<std::string, std::string>>();
  return contents;
}

CheckpointContents checked_checkpoint(TensorMap tensors, const std::map<std::string, std::string>& meta,
                                      const std::string& path, const ResumingRun& run) {
  CheckpointContents contents;
  contents.metadata = check_checkpoint_metadata(meta, path, run);
  check_loss_scaler_state(tensors, path, contents.metadata.step, run);
  for (auto& [name, t] : tensors) {
    if (name.starts_with("optimizer.")) contents.optimizer.emplace(name.substr(10), t);
    else if (name.starts_with("loss_scaler.")) contents.loss_scaler.emplace(name.substr(12), t);
    else contents.weights.emplace(name, t);
  }
  return contents;
}

}  // namespace tandem

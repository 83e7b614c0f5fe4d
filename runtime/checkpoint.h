// A training checkpoint (Trainer::save_checkpoint, load_checkpoint): one safetensors file,
// written atomically (write_safetensors writes a temporary file and renames it over the
// path), holding the model's weights by name, the optimizer's state as "optimizer.<key>",
// fp16 loss scaling's state as "loss_scaler.<key>" when the run scales the loss, and the
// run's position and settings in its metadata (runtime/checkpoint_metadata.h). A
// checkpoint is checked against the run that resumes from it before any of it is used.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "core/tensor.h"
#include "runtime/checkpoint_metadata.h"

namespace tandem {

class DistributedDataParallel;

/// A checkpoint's contents, by kind: what a trainer saves and what it restores.
struct CheckpointContents {
  TensorMap weights;    // the model's parameters and buffers, by name
  TensorMap optimizer;  // the optimizer's state (Optimizer::state): "step", "<parameter>.<buffer>"
  /// fp16 loss scaling's "scale" and "growth_tracker" (GradScaler.state_dict()'s) and
  /// "skipped_steps" (the report's count); empty when the run does not scale the loss.
  TensorMap loss_scaler;
  CheckpointMetadata metadata;
};

/// What a run that resumes from a checkpoint must match.
struct ResumingRun {
  /// The run's own metadata: the checkpoint's model, seed, batch, optimizer, accumulate
  /// and ranks must be these.
  CheckpointMetadata settings;
  bool scales_loss = false;     // the checkpoint holds loss scaling state exactly then
  int64_t growth_interval = 0;  // and its growth tracker is below this
};

/// Writes `contents` to `path` (atomically; UserError when it cannot).
void write_checkpoint(const std::string& path, const CheckpointContents& contents);

/// The tensors and metadata of the checkpoint at `path`, read once its metadata passed
/// check_checkpoint_metadata against `run` (a refused file changes nothing). With `ddp`,
/// rank 0 reads the file (the other ranks' hosts need not have it) and broadcasts what it
/// found, or why it could not: then a JobError on every rank.
std::pair<TensorMap, std::map<std::string, std::string>> read_checkpoint(const std::string& path,
                                                                         const ResumingRun& run,
                                                                         DistributedDataParallel* ddp);

/// A checkpoint's metadata, read from `path`, checked against `run`: UserError when it is
/// not a checkpoint, is one of another model, or was trained with other settings.
CheckpointMetadata check_checkpoint_metadata(const std::map<std::string, std::string>& meta, const std::string& path,
                                             const ResumingRun& run);

/// What read_checkpoint returned, checked against `run` (the metadata, then the loss
/// scaler state: present exactly when `run` scales the loss, in range) and split by kind.
/// UserError naming `path`.
CheckpointContents checked_checkpoint(TensorMap tensors, const std::map<std::string, std::string>& meta,
                                      const std::string& path, const ResumingRun& run);

}  // namespace tandem

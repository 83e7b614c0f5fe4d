// DistributedDataParallel: one model trained by every process of a job (mpirun -np N), as
// PyTorch's DistributedDataParallel trains one: each rank runs its own batch (its share
// of the epoch, runtime/data/shard_order.h) through its own copy of the model, wherever
// that copy's layers are placed (the cpu, the rank's GPUs, a data_parallel: block among
// them), and the gradients are averaged over the ranks before every update, so that every
// rank applies the same update to the same weights.
//
// At the start every rank checks that it loaded the same model and the same training
// settings (the message names the rank that differs) and takes rank 0's parameters and
// buffers. In each step backward names each gradient as it completes (GradientReady) and
// the GradientReducer all-reduces them in buckets meanwhile; finish_backward() waits for
// the last. Trainer drives it (runtime/trainer.h); docs/distributed.md says what travels
// when.
//
// Not thread-safe: the training thread calls it.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "core/touched_rows.h"
#include "graph/training_spec.h"
#include "runtime/distributed/device_collectives.h"
#include "runtime/distributed/gradient_reducer.h"
#include "runtime/distributed/process_group.h"
#include "runtime/exec/gradient_ready.h"

namespace tandem {

class Model;

/// A UserError every rank of a job raises alike, having checked the same thing together
/// (the ranks loaded different models, rank 0 could not read the checkpoint): the CLI
/// prints it once, from rank 0, and every rank exits with code 2. Any other error on one
/// rank ends the job through ProcessGroup::abort().
class JobError : public UserError {
 public:
  using UserError::UserError;
};

/// How gradient buckets travel between ranks.
enum class GradientCompression {
  none,  // float32
  bf16,  // halved bytes: DDP's bf16_compress_hook (runtime/distributed/gradient_reducer.h)
};

struct DistributedOptions {
  /// DDP's bucket_cap_mb (25 MiB); the first bucket is smaller (1 MiB, or the cap if less).
  size_t bucket_cap_bytes = size_t{25} << 20;
  /// Parameters the loss does not reach count as zero gradients instead of being refused.
  bool find_unused_parameters = false;
  /// ZeRO stage 1: each rank keeps the optimizer state of its share of the parameters
  /// only, updates that share and sends it to the others (runtime/distributed/optimizer_sharding.h).
  bool shard_optimizer_state = false;
  /// Gradient buckets in bf16 on the wire (mean off by bf16's rounding); row gradients of
  /// `sparse: true` tables stay float32.
  GradientCompression gradient_compression = GradientCompression::none;
  /// Rank 0's buffers (batch norm's running statistics) go to every rank before each
  /// forward, as DDP's broadcast_buffers=True: every rank then evaluates and saves rank
  /// 0's statistics. Off: each rank keeps those of its own batches.
  bool broadcast_buffers = true;
  /// Gradients that GPUs hold are all-reduced between the ranks' GPUs (NCCL; simulated GPUs
  /// through MPI on their own thread: device_collectives.h) when every rank's GPUs offer it;
  /// off: they come to the host and travel over MPI, as every gradient did before
  /// (--device-collectives off). The sharded optimizer state and bf16 compression take the
  /// host path either way (docs/distributed.md says why).
  bool device_collectives = true;
};

class DistributedDataParallel {
 public:
  /// `trained`: the parameters the optimizer updates (those the loss reaches), with their
  /// touched rows. Checks the model and `spec` against rank 0's and takes rank 0's
  /// parameters and buffers; JobError (on every rank) when a rank differs. `group` must
  /// have more than one rank.
  DistributedDataParallel(std::shared_ptr<ProcessGroup> group, Model& model, const TrainingSpec& spec,
                          const std::vector<std::string>& trained, const std::vector<TouchedRows*>& rows,
                          DistributedOptions options = {});

  /// Rank 0's --seed: every rank's data order, split and dropout masks come from it (the
  /// ranks' own seeds may differ: their initial weights give way to rank 0's broadcast).
  uint64_t rank0_seed() const { return rank0_seed_; }
  /// What to tell the user when the ranks were given different seeds, else "".
  const std::string& seed_note() const { return seed_note_; }
  ProcessGroup& group() { return *group_; }
  int rank() const { return group_->rank(); }
  int size() const { return group_->size(); }

  /// The backward of optimizer step `step` starts; what the model tells of each completed
  /// gradient.
  const GradientReady* start_backward(int64_t step);
  /// Waits for every gradient's reduction: each is now the mean over the ranks.
  void finish_backward();

  /// Rank 0's buffers (running statistics) become every rank's, after each step's
  /// forward has updated them, when broadcast_buffers is on (DDP broadcasts them before
  /// the next forward: the same values reach the same places). Call parameters_changed()
  /// after it.
  void share_buffers();

  /// Every rank's `values` become their sums over the ranks.
  void sum(std::vector<double>& values, const std::string& what);
  /// Whether gradients that GPUs hold are reduced on the GPUs (DistributedOptions::
  /// device_collectives, when every rank's GPUs offer it).
  bool reduces_on_devices() const { return collectives_ != nullptr; }
  /// Bytes of gradients reduced so far over MPI and on the devices (GradientReducer), and
  /// what the GPUs' communicators report they ran.
  GradientReducer::Traffic gradient_traffic() const { return reducer_->traffic(); }
  InterProcessCommunicator::Counters device_collective_counters() const {
    return collectives_ ? collectives_->counters() : InterProcessCommunicator::Counters{};
  }

  /// Every rank's floats, concatenated in rank order (an AUC's scores).
  std::vector<float> gather(const std::vector<float>& mine, const std::string& what);
  /// Every rank's tensors become rank 0's: names, dtypes, shapes and values (the others
  /// start empty; a checkpoint that rank 0 read).
  void broadcast(TensorMap& tensors, const std::string& what);
  /// JobError on every rank unless every rank has the same `value` (a count each computed
  /// itself, such as its training samples), naming the first that differs.
  void check_same(const std::string& what, const std::string& value);

 private:
  std::shared_ptr<ProcessGroup> group_;
  Model& model_;
  std::unique_ptr<DeviceCollectives> collectives_;  // null: every gradient over MPI
  std::unique_ptr<GradientReducer> reducer_;
  std::vector<std::string> buffers_;  // shared after each step (none without broadcast_buffers)
  uint64_t rank0_seed_ = 0;
  std::string seed_note_;
  GradientReady ready_;
};

/// A line per parameter, buffer, input, target and output, and the training settings that
/// every rank must share: what ranks compare before they train together. Not the seed: it
/// may differ, as DDP users seed each rank (rank 0's then orders the data for all).
std::string model_fingerprint(const Model& model, const TrainingSpec& spec);

}  // namespace tandem

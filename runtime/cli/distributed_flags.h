// The flags of a distributed run (`mpirun -np N tandem train ...`, docs/distributed.md):
// the collectives' deadline, DDP's bucket size and find_unused_parameters; and how a rank
// of such a job ends on an error.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>

#include "runtime/cli/placement_options.h"
#include "runtime/distributed/distributed_data_parallel.h"
#include "runtime/distributed/process_group.h"

namespace tandem::cli {

struct DistributedFlags {
  double collective_timeout_s = static_cast<double>(ProcessGroup::default_timeout.count());
  double bucket_cap_mb = 25;
  bool find_unused_parameters = false;
  bool shard_optimizer_state = false;
  std::string compress_gradients = "none";
  bool own_buffers = false;  // --no-broadcast-buffers
  std::string device_collectives = "on";
};

/// Registers --collective-timeout, --bucket-cap-mb, --find-unused-parameters,
/// --shard-optimizer-state, --compress-gradients, --no-broadcast-buffers and
/// --device-collectives.
void add_distributed_flags(CLI::App& app, DistributedFlags& flags);
/// The job this process belongs to (a group of one without mpirun), with the flags'
/// deadline; UserError for a deadline or bucket size that is not positive.
std::shared_ptr<ProcessGroup> join_job(const DistributedFlags& flags);
DistributedOptions distributed_options(const DistributedFlags& flags);

/// Under mpirun, on real GPUs (not --sim-gpus): this rank's share of its host's GPUs
/// becomes its CUDA_VISIBLE_DEVICES before CUDA starts (runtime/distributed/gpu_assignment.h),
/// so that the model's cuda:0 is the local rank's GPU. JobError when the host has too few
/// or two ranks would share one.
void take_gpu_share(ProcessGroup& group, const PlacementFlags& placement);

/// Runs `body` as its rank of `group`'s job. An error every rank raised alike (JobError)
/// is printed by rank 0 alone and every rank returns 2; any other ends the whole job from
/// the rank that met it, named (ProcessGroup::abort), so that no rank waits for it.
/// Undistributed, `body` runs as is.
int run_as_rank(ProcessGroup& group, const std::function<int()>& body);

}  // namespace tandem::cli

#include "runtime/cli/distributed_flags.h"

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <new>

#include "core/error.h"
#include "runtime/distributed/gpu_assignment.h"

namespace tandem::cli {

void add_distributed_flags(CLI::App& app, DistributedFlags& flags) {
  app.add_option("--collective-timeout", flags.collective_timeout_s,
                 "under mpirun: seconds a rank waits in one collective before it ends the job, naming who is missing")
      ->capture_default_str();
  app.add_option("--bucket-cap-mb", flags.bucket_cap_mb,
                 "under mpirun: MiB of gradients averaged at once (DDP's bucket_cap_mb)")
      ->capture_default_str();
  app.add_flag("--find-unused-parameters", flags.find_unused_parameters,
               "under mpirun: train even when the loss reaches some parameters' gradients not (they stay as they are)");
  app.add_flag("--shard-optimizer-state", flags.shard_optimizer_state,
               "under mpirun: ZeRO stage 1, each rank keeps and updates the optimizer state of its share of the "
               "parameters only");
  app.add_option("--compress-gradients", flags.compress_gradients,
                 "under mpirun: gradients travel as none (float32) or bf16 (half the bytes, DDP's "
                 "bf16_compress_hook)")
      ->check(CLI::IsMember({"none", "bf16"}))
      ->capture_default_str();
  app.add_flag("--no-broadcast-buffers", flags.own_buffers,
               "under mpirun: each rank keeps the running statistics of its own batches (by default rank 0's reach "
               "every rank after each step, as DDP's broadcast_buffers)");
  app.add_option("--device-collectives", flags.device_collectives,
                 "under mpirun: gradients that GPUs hold are summed between the ranks' GPUs (on: NCCL, or the "
                 "simulated GPUs' own) or come to the host and travel over MPI (off)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
}

std::shared_ptr<ProcessGroup> join_job(const DistributedFlags& flags) {
  if (!(flags.collective_timeout_s > 0) || !std::isfinite(flags.collective_timeout_s))
    throw UserError("--collective-timeout must be a positive number of seconds, not " +
                    std::to_string(flags.collective_timeout_s));
  if (!(flags.bucket_cap_mb > 0) || !std::isfinite(flags.bucket_cap_mb))
    throw UserError("--bucket-cap-mb must be a positive number of MiB, not " + std::to_string(flags.bucket_cap_mb));
  return ProcessGroup::from_environment(
      std::chrono::milliseconds(static_cast<int64_t>(std::llround(flags.collective_timeout_s * 1000))));
}

DistributedOptions distributed_options(const DistributedFlags& flags) {
  DistributedOptions options;
  options.bucket_cap_bytes = std::max<size_t>(4, static_cast<size_t>(flags.bucket_cap_mb * (1 << 20)));
  options.find_unused_parameters = flags.find_unused_parameters;
  options.shard_optimizer_state = flags.shard_optimizer_state;
  options.gradient_compression =
      flags.compress_gradients == "bf16" ? GradientCompression::bf16 : GradientCompression::none;
  options.broadcast_buffers = !flags.own_buffers;
  options.device_collectives = flags.device_collectives == "on";
  return options;
}

void take_gpu_share(ProcessGroup& group, const PlacementFlags& placement) {
  if (!group.distributed()) return;
  const int sims = placement.sim_gpus >= 0 ? placement.sim_gpus : sim_gpus_from_environment();
  if (sims > 0) return;  // each rank its own simulated GPUs
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::optional<GpuAssignment> share =
      assign_gpus(group, visible ? std::optional<std::string>(visible) : std::nullopt, driver_gpus());
  if (!share) return;
  setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", /*overwrite=*/0);  // the indices driver_gpus() counts
  setenv("CUDA_VISIBLE_DEVICES", share->visible_devices.c_str(), /*overwrite=*/1);
}

int run_as_rank(ProcessGroup& group, const std::function<int()>& body) {
  if (!group.distributed()) return body();
  try {
    return body();
  } catch (const JobError& e) {
    if (group.rank() == 0) std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const UserError& e) {
    group.abort(e.what());
  } catch (const std::bad_alloc&) {
    group.abort("out of memory on the host; try a smaller batch or model");
  } catch (const std::exception& e) {
    group.abort(std::string("internal error (a bug in Tandem): ") + e.what());
  }
}

}  // namespace tandem::cli

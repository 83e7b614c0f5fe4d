// Which GPUs each rank of a job takes on its host: as torchrun's LOCAL_RANK and Horovod
// do, rank `local_rank` of the `local_size` ranks on a host takes its share of the host's
// visible GPUs (one each when there are as many GPUs as ranks), and the model's cuda:0,
// cuda:1, ... are that share. Decided before CUDA starts (CUDA_VISIBLE_DEVICES is read
// once, when it does), from the driver's list of GPUs in /proc, without loading CUDA.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runtime/distributed/process_group.h"

namespace tandem {

struct GpuAssignment {
  /// What this rank's CUDA_VISIBLE_DEVICES becomes: entries of the host's visible list.
  std::string visible_devices;
  /// The PCI bus ids of those GPUs where they can be told ("" where not: a UUID entry).
  std::vector<std::string> bus_ids;
};

/// The GPUs the NVIDIA driver lists in `proc_dir` (/proc/driver/nvidia/gpus: a folder per
/// GPU named by its PCI bus id), in PCI bus order; none when there is no driver.
std::vector<std::string> driver_gpus(const std::string& proc_dir = "/proc/driver/nvidia/gpus");

/// This rank's share of the host's GPUs, checked with every rank of `group`: a rank that
/// set CUDA_VISIBLE_DEVICES unlike the others on its host keeps its own choice; otherwise
/// the `visible` list (the variable's entries, or every GPU the driver lists) is cut into
/// equal shares by local rank. UserError (a JobError on every rank) when the host has
/// fewer GPUs than ranks, or when two ranks of a host would use the same GPU. nullopt
/// when the host has no GPU (the ranks run on the cpu or simulated GPUs).
std::optional<GpuAssignment> assign_gpus(ProcessGroup& group, const std::optional<std::string>& cuda_visible_devices,
                                         const std::vector<std::string>& gpus_by_bus);

}  // namespace tandem

// Placement asks the devices' backends what they cannot run (placement stays pure: it calls
// the function it is handed). A layer a GPU's backend cannot run (an op it lacks, a dtype, a
// limit of cuDNN) is planned on the cpu, and `tandem plan` prints the backend's reason.
#pragma once

#include "placement/place.h"
#include "runtime/devices/device_registry.h"

namespace tandem {

/// Sets policy.cannot_run, policy.runs_in and policy.backward_reads to ask registry's
/// backends (Backend::cannot_run, Backend::runs_in, the kernel's backward_reads_*) about
/// each layer at the concrete shapes of placement's symbol values.
/// `registry` must outlive the policy.
void ask_backends(PlacementPolicy& policy, DeviceRegistry& registry);

}  // namespace tandem

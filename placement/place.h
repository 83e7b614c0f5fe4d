// place(): the pure function (Graph, DeviceInventory, PlacementPolicy) -> Plan. No device
// call, no allocation beyond the plan itself; tested with simulated inventories.
//
// It runs in numbered passes, after ggml's scheduler; each decision records its reason:
//   0. replicate  data_parallel blocks become scatter, replicas and gather
//                 (replicate.h), for the plan's symbol values.
//   1. explicit   --place globs (later ones win), then the replicas (on their devices;
//                 --place does not move them), then device: annotations
//                 (inherited from blocks). Refuses devices the inventory lacks and layers
//                 whose parameters alone exceed their pinned device.
//   2. policy     every layer pass 1 left open: annotations -> cpu; embeddings-on-cpu ->
//                 embedding tables on the cpu, the rest balanced over the GPUs; balanced ->
//                 layers in graph order fill cuda:0, then cuda:1, ..., the rest on the cpu.
//      then each scatter goes where its input is.
//   3. fallback   a layer whose device cannot run it (the policy asks its backend) moves
//                 to the cpu, with the backend's reason.
//   4. partition  same-device segments and copy steps (docs/placement.md: the copy rule).
//   5. estimate   bytes per device: parameters, activations, gradients, optimizer state.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "graph/symbolic.h"
#include "placement/plan.h"

namespace tandem {

struct PlacementPolicy {
  /// "annotations" (only device: and --place; the rest on the cpu), "embeddings-on-cpu"
  /// or "balanced".
  std::string name = "annotations";
  /// Budget per GPU for the balancing policies; default each device's capacity. Never
  /// more than the capacity when that is known.
  std::optional<size_t> max_memory;
  /// Budgets of single devices, the cpu included (--max-memory cuda:0=6GiB,cpu=20GiB, as
  /// accelerate's max_memory): a GPU named here gets its own instead of max_memory. The
  /// balancer fills a GPU up to its budget; `tandem plan` refuses a plan whose predicted
  /// peak on a device passes its budget.
  std::map<Device, size_t> device_max_memory;
  /// --place PATTERN=DEVICE, in command-line order: later ones win. See glob_match.
  std::vector<std::pair<std::string, Device>> place_overrides;
  /// Training: gradients and optimizer state count, activations are kept for backward,
  /// and every forward copy of a value that needs a gradient has a backward twin.
  bool training = false;
  /// The value of the symbol `batch` for byte estimates.
  int64_t batch = 1;
  /// Other symbols; an unbound one counts as 1, with a note.
  Bindings bindings;
  /// Why `device` cannot run layer `node` of `graph` with these symbol values (its
  /// backend's word, such as "conv2d: cuDNN pads symmetrically"); empty when it can. Unset:
  /// every device runs every layer. The runtime asks the backends (backend_capabilities.h).
  std::function<std::string(Device, const Graph&, const Node&, const Bindings&)> cannot_run;
  /// The precision `device`'s kernel runs layer `node` in with these symbol values, and why
  /// when not the layer's (a small linear that the cpu keeps in fp32). Unset: the layer's
  /// (layer_precision). The runtime asks the backends (backend_capabilities.h).
  std::function<PrecisionChoice(Device, const Graph&, const Node&, const Bindings&)> runs_in;
  /// What `device`'s kernel for layer `node` reads in backward besides the gradients: one
  /// flag per input, then the output's (Kernel::backward_reads_input/output). The training
  /// estimate frees the rest after forward, as the executor does. Unset, or empty: all of
  /// it. The runtime asks the backends (backend_capabilities.h).
  std::function<std::vector<bool>(Device, const Graph&, const Node&, const Bindings&)> backward_reads;
};

/// The supported policy names, for help texts and errors.
const std::vector<std::string>& placement_policy_names();

/// Takes a model's `placement:` key into `policy` (name, and max_memory parsed as a byte
/// size). Throws UserError "FILE:LINE:COLUMN: ..." for a size that is not one.
void apply_placement_spec(const PlacementSpec& spec, PlacementPolicy& policy);

/// Reads a max_memory text into `policy`: a size for every GPU ("8GiB"), or items
/// separated by commas, each a size for every GPU or DEVICE=SIZE ("cuda:0=6GiB,cpu=20GiB").
/// Throws UserError naming the item that is not one (the caller adds the flag or line).
void parse_max_memory(std::string_view text, PlacementPolicy& policy);

/// The bytes `device` may use under `policy`: its own budget, else for a GPU max_memory,
/// never more than `capacity` when that is known (not 0); 0 when nothing limits it.
size_t memory_budget(const PlacementPolicy& policy, Device device, size_t capacity);

/// Places every layer of `graph` on a device of `inventory`. Throws UserError for a
/// placement that cannot work (a device that does not exist, a layer pinned to a device
/// too small for its parameters, an unknown policy); the message names the layer, the
/// device and what to do.
Plan place(const Graph& graph, const DeviceInventory& inventory, const PlacementPolicy& policy);

/// The plan of `graph` moved to the cpu as a whole (--place '*=cpu', Model::to(cpu)): every
/// layer on the cpu whatever its device: says, each data_parallel block as one replica
/// there, with the cpu's memory estimate; what `run` and `train` run with that flag. Only
/// the cpu of `inventory` counts, so it works on a machine without the GPUs the file names.
Plan place_on_cpu(const Graph& graph, const DeviceInventory& inventory, const PlacementPolicy& policy);

/// fnmatch-style glob over layer paths: `*` matches any run of characters, dots
/// included (`enc.*` matches `enc.fc` and `enc.0.fc`), `?` one character, `[abc]` /
/// `[a-z]` / `[!a]` one of a set. The whole path must match.
bool glob_match(std::string_view pattern, std::string_view text);

}  // namespace tandem

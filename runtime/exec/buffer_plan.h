// BufferPlan: an inference pass's intermediate tensors laid out in a few buffers per device,
// each buffer handed to a later tensor of the same device once the last reader of the one
// before has run, so that running allocates only what leaves the pass (the outputs) and what
// crosses between devices. Planned once per schedule, on every device alike: the cpu's
// layers and a GPU's reuse their buffers the same way.
//
// Why that is safe without events: a tensor gets a buffer only when every action that
// writes or reads it (through a view too) runs on its device's compute lane, which runs
// them in the order they were submitted. A tensor that a copy reads, or a layer on another
// device, or that lives in host memory a GPU copies from (Schedule::host_memory_of), or that
// leaves the pass, is allocated when the pass runs, as before.
#pragma once

#include <cstddef>
#include <vector>

#include "graph/graph.h"
#include "runtime/exec/schedule.h"

namespace tandem {

struct BufferPlan {
  struct Buffer {
    int device = 0;        // index into the schedule's devices
    size_t bytes = 0;
    int sized_by = -1;     // the action whose output set its size (named when memory runs out)
  };
  std::vector<Buffer> buffers;
  std::vector<int> buffer_of_slot;  // per slot: its buffer, or -1 (allocated when the pass runs)
};

/// Best fit among the device's free buffers, else the largest free one grown, else a new
/// one. `escaping`: slots that outlive the pass (the outputs). The plan's memory estimate
/// predicts this layout for the cpu (placement/estimate.cpp, cpu_inference_bytes, which
/// cannot call it: placement knows no schedule): change the two together.
BufferPlan plan_buffers(const Graph& graph, const Schedule& schedule, const std::vector<Shape>& shapes,
                        const std::vector<int>& escaping);

}  // namespace tandem

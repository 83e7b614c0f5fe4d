// GradientReducer: averages the gradients of every rank after each backward, as PyTorch's
// DistributedDataParallel does: the trainable parameters, in the order backward completes
// their gradients (the reverse of the layers), are cut into buckets, the first small (so
// that communication starts early) and the rest up to a cap; as soon as every gradient of
// a bucket is complete, the bucket's all-reduce starts, in bucket order on every rank, and
// runs while the rest of backward goes on; finish() waits for them and writes each
// gradient back as the mean over the ranks.
//
// Parameters that got no gradient in a backward are an error that names them, unless
// find_unused_parameters is set: then they count as zero on that rank, as DDP's flag does.
//
// With compress_bf16 a bucket travels as bf16, half the bytes (DDP's bf16_compress_hook);
// row gradients travel as float32 either way (DDP's hooks skip sparse gradients too).
//
// Gradients that GPUs hold (Note [where a master lives] in runtime/params/device_parameter_cache.h:
// parameters only GPUs run, their masters and gradients on the GPUs) are reduced on the GPUs
// when the ranks have communicators between their GPUs (device_collectives.h): they go into
// buckets of their own, in the same completion order and under the same caps, and a full one
// is all-reduced on the devices (NCCL between real GPUs) as soon as backward has completed
// it, while the rest of backward runs; they never cross MPI.
// The layout is taken at each backward's first gradient, when the forward has decided what
// the GPUs hold; every rank runs the same plan, so every rank takes the same.
//
// Embedding tables: a gradient whose touched rows are tracked (core/touched_rows.h) is
// all-reduced whole and then marked whole, since other ranks looked up other rows. A row
// gradient (`sparse: true`: no dense tensor, only the rows a batch looked up) is gathered
// instead, as DDP gathers sparse gradients: every rank sends its rows and their values,
// and each rank sums them in rank order into the union of the rows.
//
// Not thread-safe: the training thread calls it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "core/touched_rows.h"
#include "runtime/distributed/process_group.h"

namespace tandem {

struct GradientReducerOptions {
  /// The cap of a bucket (DDP's bucket_cap_mb, 25 MiB by default).
  size_t bucket_cap_bytes = size_t{25} << 20;
  /// The first bucket's cap (DDP's 1 MiB): the last layers' gradients leave early.
  size_t first_bucket_bytes = size_t{1} << 20;
  bool find_unused_parameters = false;
  /// Buckets travel as bf16 (DDP's bf16_compress_hook): each rank's gradient divided by the
  /// ranks and rounded to bf16, summed in bf16, widened back: half the bytes on the wire,
  /// each mean off by bf16's rounding (about 2^-8 of its terms).
  bool compress_bf16 = false;
};

class DeviceCollectives;

/// Where the gradients that GPUs hold are reduced: none (every gradient on the host) unless
/// both are set.
struct HeldGradientPath {
  DeviceCollectives* collectives = nullptr;
  /// The gradients of a parameter on the GPUs that hold it, one per replica; empty when its
  /// master is on the host.
  std::function<std::vector<Tensor>(const std::string& name)> held;
};

/// One trainable parameter's gradient, on the host.
struct ReducedGradient {
  std::string name;
  Tensor grad;                   // undefined for a row gradient
  TouchedRows* rows = nullptr;   // its touched rows, when they are tracked (or hold it)
};

class GradientReducer {
 public:
  /// `grads`: every trainable parameter's gradient, in the order backward completes them.
  /// `group` and the touched rows must outlive this.
  GradientReducer(ProcessGroup& group, std::vector<ReducedGradient> grads, GradientReducerOptions options = {},
                  HeldGradientPath held = {});
  /// Dense gradients alone (tests).
  GradientReducer(ProcessGroup& group, std::vector<std::pair<std::string, Tensor>> grads,
                  GradientReducerOptions options = {});

  /// A backward starts: no gradient is complete yet.
  void start();
  /// `name`'s gradient is complete for this backward. When its bucket is full, that
  /// bucket's all-reduce starts (after every earlier bucket's has). A name not reduced
  /// (a parameter the loss does not reach) is ignored.
  void ready(const std::string& name);
  /// Lets the all-reduces in flight advance (call between layers of backward).
  void progress();
  /// Waits for every bucket and writes each gradient back as the mean over the ranks.
  /// UserError naming the parameters that got no gradient (unless find_unused_parameters).
  void finish();

  /// The buckets' parameters, in launch order (for tests and logs): the host's.
  std::vector<std::vector<std::string>> buckets() const;

  /// Bytes of gradients this rank reduced so far, each way (a GPU-held gradient counted
  /// once per replica).
  struct Traffic {
    size_t over_mpi = 0;
    size_t on_devices = 0;
  };
  Traffic traffic() const { return traffic_; }

 private:
  struct Bucket {
    std::vector<size_t> members;   // indices into grads_
    std::vector<size_t> offsets;   // each member's place in `flat`, in floats
    std::vector<float> flat;
    std::vector<uint16_t> compressed;  // flat in bf16, when buckets travel compressed
    size_t waiting = 0;            // members not yet complete in this backward
    ProcessGroup::Request request;
    bool launched = false;
  };
  void launch_ready_buckets();
  /// Gradients GPUs hold, bucketed apart.
  struct DeviceBucket {
    std::vector<size_t> members;  // indices into grads_
    std::vector<Device> devices;  // of the members' replicas, in replica order
    size_t bytes = 0;             // of one replica's gradients
    size_t waiting = 0;
  };
  /// At the first gradient of a backward: what the GPUs hold now, and the buckets again if
  /// that changed.
  void take_layout();
  void lay_out();
  void launch_ready_device_buckets();
  /// A row gradient becomes the mean over the ranks of theirs, on the union of their rows.
  void gather_rows(ReducedGradient& g);

  ProcessGroup& group_;
  std::vector<ReducedGradient> grads_;
  GradientReducerOptions options_;
  HeldGradientPath held_path_;
  std::vector<std::vector<Tensor>> held_;  // grads_ index -> its replicas' gradients (empty: on the host)
  bool layout_taken_ = false;              // in this backward
  std::vector<DeviceBucket> device_buckets_;
  std::vector<size_t> device_bucket_of_;   // grads_ index -> its device bucket (none: not held)
  size_t next_device_launch_ = 0;
  Traffic traffic_;
  std::map<std::string, size_t> index_of_;
  std::vector<size_t> bucket_of_;      // grads_ index -> its bucket (none: a row gradient)
  std::vector<bool> complete_;         // grads_ index -> complete in this backward
  std::vector<Bucket> buckets_;
  size_t next_launch_ = 0;             // buckets launch in order
  int64_t backward_ = 0;               // counts backwards, for messages
};

}  // namespace tandem

// What a model file says about training: its loss and its `train:` section, validated at
// load time like the layers. Plain values; runtime/ turns them into optimizers, a data
// pipeline and a training loop (docs/training.md).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace tandem {

struct OptimizerConfig {
  std::string name = "sgd";  // sgd, adam, adamw
  double lr = 0.01;
  double momentum = 0, dampening = 0;  // sgd
  bool nesterov = false;               // sgd
  double weight_decay = 0;             // sgd, adam: L2 on the gradient; adamw: decoupled
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adam, adamw
};

struct ScheduleConfig {
  std::string name = "constant";  // constant, step, cosine
  int64_t step_size = 1;          // step
  double gamma = 0.1;             // step
  int64_t warmup_steps = 0;       // cosine
  int64_t total_steps = 0;        // cosine; 0: the run's total
  double min_lr = 0;              // cosine
};

struct DataSpec {
  /// A model file's relative path is resolved next to that file when it loads (a flag's
  /// stays relative to the working directory).
  std::string path;
  /// "FILE:LINE:COLUMN" of the `path:` that named it in a model file; empty when a flag or
  /// the API gave the path. A file that cannot be opened is reported there.
  std::string named_at;
  std::string format;                          // "csv" or "safetensors"; "" = from the extension
  bool header = false;                         // csv: skip the first line
  std::map<std::string, std::string> columns;  // csv: name -> "a:b" (columns a..b-1) or "a"; empty: consecutive
};

/// `loss_scaling:` of `train:`: torch.cuda.amp.GradScaler's dynamic loss scaling, with its
/// defaults and argument names. It applies when a layer of the model runs in fp16, whose
/// range flushes small gradients to zero unless the loss is scaled up first; bf16 and fp32
/// have fp32's range and train without it.
struct LossScalingConfig {
  bool enabled = true;           // GradScaler(enabled=...): false trains fp16 unscaled
  double init_scale = 65536.0;   // 2^16
  double growth_factor = 2.0;    // > 1
  double backoff_factor = 0.5;   // in (0, 1)
  int64_t growth_interval = 2000;  // clean steps in a row before the scale grows
};

struct TrainingSpec {
  int64_t epochs = 1;
  int64_t batch = 32;
  /// Micro-batches of `batch` samples whose gradients one optimizer step sums (gradient
  /// accumulation): a step takes batch x accumulate samples, a process of a distributed
  /// job communicates once per step.
  int64_t accumulate = 1;
  bool shuffle = true;
  bool drop_last = false;
  uint64_t seed = 0;
  double validation_split = 0.0;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  std::optional<double> clip_grad_norm;
  LossScalingConfig loss_scaling;
  std::optional<DataSpec> data;
};

/// `loss:` of a model file.
struct LossSpec {
  std::string op;      // cross_entropy, nll_loss, mse_loss, binary_cross_entropy_with_logits
  int input = -1;      // value id of the scored tensor
  int target = -1;     // value id of the target (a graph target)
  std::string reduction = "mean";
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  /// Each replica of the data_parallel block that makes `input` scores its own chunk on its
  /// device; only the scalars travel (placement/replicate.h).
  bool parallel = false;
};

}  // namespace tandem

#include "runtime/distributed/gradient_reducer.h"

#include <algorithm>
#include <cstring>
#include <span>

#include "core/bfloat16.h"
#include "core/error.h"
#include "runtime/distributed/device_collectives.h"

namespace tandem {

namespace {

constexpr size_t kNoBucket = static_cast<size_t>(-1);

std::vector<ReducedGradient> dense(std::vector<std::pair<std::string, Tensor>> grads) {
  std::vector<ReducedGradient> out;
  for (auto& [name, g] : grads) out.push_back({name, g, nullptr});
  return out;
}

}  // namespace

GradientReducer::GradientReducer(ProcessGroup& group, std::vector<std::pair<std::string, Tensor>> grads,
                                 GradientReducerOptions options)
    : GradientReducer(group, dense(std::move(grads)), options) {}

GradientReducer::GradientReducer(ProcessGroup& group, std::vector<ReducedGradient> grads, GradientReducerOptions options,
                                 HeldGradientPath held)
    : group_(group), grads_(std::move(grads)), options_(options), held_path_(std::move(held)) {
  complete_.assign(grads_.size(), false);
  held_.assign(grads_.size(), {});
  for (size_t i = 0; i < grads_.size(); ++i) index_of_.emplace(grads_[i].name, i);
  lay_out();
}

void GradientReducer::lay_out() {
  buckets_.clear();
  device_buckets_.clear();
  bucket_of_.assign(grads_.size(), kNoBucket);
  device_bucket_of_.assign(grads_.size(), kNoBucket);
  size_t bytes = 0;
  for (size_t i = 0; i < grads_.size(); ++i) {
    if (grads_[i].rows && grads_[i].rows->holds_values()) continue;  // gathered by rows in finish()
    if (!held_[i].empty()) {  // on GPUs: a device bucket, under the same caps
      std::vector<Device> devices;
      for (const Tensor& r : held_[i]) devices.push_back(r.device());
      const size_t n = held_[i].front().nbytes();
      const size_t cap = device_buckets_.size() <= 1 ? options_.first_bucket_bytes : options_.bucket_cap_bytes;
      DeviceBucket* last = device_buckets_.empty() ? nullptr : &device_buckets_.back();
      if (!last || last->devices != devices || (last->bytes > 0 && last->bytes + n > cap)) {
        device_buckets_.emplace_back();
        device_buckets_.back().devices = devices;
      }
      device_buckets_.back().members.push_back(i);
      device_buckets_.back().bytes += n;
      device_bucket_of_[i] = device_buckets_.size() - 1;
      continue;
    }
    const Tensor& g = grads_[i].grad;
    TANDEM_ASSERT(g.defined() && g.dtype() == DType::float32 && g.device() == Device::cpu(),
                  "gradient '" + grads_[i].name + "' is not a dense host float32 tensor");
    const size_t cap = buckets_.size() <= 1 ? options_.first_bucket_bytes : options_.bucket_cap_bytes;
    if (buckets_.empty() || (bytes > 0 && bytes + g.nbytes() > cap)) {
      buckets_.emplace_back();
      bytes = 0;
    }
    Bucket& b = buckets_.back();
    b.members.push_back(i);
    b.offsets.push_back(bytes / sizeof(float));
    bytes += g.nbytes();
    b.flat.resize(bytes / sizeof(float));
    if (options_.compress_bf16) b.compressed.resize(b.flat.size());
    bucket_of_[i] = buckets_.size() - 1;
  }
  for (Bucket& b : buckets_) b.waiting = b.members.size();
  for (DeviceBucket& b : device_buckets_) b.waiting = b.members.size();
}

void GradientReducer::take_layout() {
  if (layout_taken_) return;
  layout_taken_ = true;
  if (!held_path_.collectives || !held_path_.held) return;
  std::vector<std::vector<Tensor>> held(grads_.size());
  bool changed = false;
  for (size_t i = 0; i < grads_.size(); ++i) {
    if (!(grads_[i].rows && grads_[i].rows->holds_values())) held[i] = held_path_.held(grads_[i].name);
    std::vector<const Storage*> was, now;
    for (const Tensor& t : held_[i]) was.push_back(t.storage().get());
    for (const Tensor& t : held[i]) now.push_back(t.storage().get());
    changed = changed || was != now;
  }
  if (!changed) return;
  // Taken before this backward's first gradient is marked: nothing is complete yet.
  held_ = std::move(held);
  lay_out();
}

std::vector<std::vector<std::string>> GradientReducer::buckets() const {
  std::vector<std::vector<std::string>> out;
  for (const Bucket& b : buckets_) {
    out.emplace_back();
    for (size_t i : b.members) out.back().push_back(grads_[i].name);
  }
  return out;
}

void GradientReducer::start() {
  ++backward_;
  std::fill(complete_.begin(), complete_.end(), false);
  for (Bucket& b : buckets_) {
    b.waiting = b.members.size();
    b.launched = false;
  }
  for (DeviceBucket& b : device_buckets_) b.waiting = b.members.size();
  next_launch_ = 0;
  next_device_launch_ = 0;
  layout_taken_ = false;
}

void GradientReducer::ready(const std::string& name) {
  auto it = index_of_.find(name);
  if (it == index_of_.end()) return;  // not trained: the loss does not reach it
  take_layout();
  const size_t i = it->second;
  if (complete_[i]) return;
  complete_[i] = true;
  if (device_bucket_of_[i] != kNoBucket) {
    --device_buckets_[device_bucket_of_[i]].waiting;
    launch_ready_device_buckets();
    return;
  }
  if (bucket_of_[i] == kNoBucket) return;
  Bucket& b = buckets_[bucket_of_[i]];
  const Tensor& g = grads_[i].grad;
  size_t k = 0;
  while (b.members[k] != i) ++k;
  std::memcpy(b.flat.data() + b.offsets[k], g.raw_data(), g.nbytes());
  --b.waiting;
  launch_ready_buckets();
  progress();  // MPI advances collectives only inside its calls
}

void GradientReducer::launch_ready_buckets() {
  // In bucket order on every rank: a later bucket complete before an earlier one waits.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].waiting == 0) {
    Bucket& b = buckets_[next_launch_];
    std::string what =
        "the all-reduce of gradient bucket " + std::to_string(next_launch_) + " of backward " + std::to_string(backward_);
    if (options_.compress_bf16) {
      // divided before rounding, as the hook divides: the sum of the shares is the mean,
      // and large gradients summed over many ranks stay inside bf16's range
      const float ranks = static_cast<float>(group_.size());
      for (size_t e = 0; e < b.flat.size(); ++e) b.compressed[e] = float_to_bf16(b.flat[e] / ranks);
      b.request = group_.all_reduce_sum_bf16_async(b.compressed.data(), static_cast<int64_t>(b.compressed.size()),
                                                   std::move(what));
    } else {
      b.request = group_.all_reduce_sum_async(b.flat.data(), static_cast<int64_t>(b.flat.size()), std::move(what));
    }
    b.launched = true;
    ++next_launch_;
  }
}

void GradientReducer::launch_ready_device_buckets() {
  // In bucket order on every rank, as the host's: each communicator pairs its collectives in
  // the order they are queued.
  while (next_device_launch_ < device_buckets_.size() && device_buckets_[next_device_launch_].waiting == 0) {
    const DeviceBucket& b = device_buckets_[next_device_launch_];
    const std::string what = "the device all-reduce of gradient bucket " + std::to_string(next_device_launch_) +
                             " of backward " + std::to_string(backward_) +
                             (group_.phase().empty() ? "" : " (" + group_.phase() + ")");
    for (size_t r = 0; r < b.devices.size(); ++r) {  // each replica with its counterparts on the other ranks
      std::vector<Tensor> grads;
      for (size_t i : b.members) grads.push_back(held_[i][r]);
      held_path_.collectives->all_reduce_mean(grads, what);
      traffic_.on_devices += b.bytes;
    }
    ++next_device_launch_;
  }
}

void GradientReducer::progress() {
  for (size_t k = 0; k < next_launch_; ++k) buckets_[k].request.done();
}

void GradientReducer::finish() {
  take_layout();
  std::vector<std::string> unused;
  for (size_t i = 0; i < grads_.size(); ++i)
    if (!complete_[i]) unused.push_back(grads_[i].name);
  if (!unused.empty()) {
    if (!options_.find_unused_parameters) {
      std::string list;
      for (size_t i = 0; i < unused.size() && i < 8; ++i) list += (i ? ", '" : "'") + unused[i] + "'";
      if (unused.size() > 8) list += ", and " + std::to_string(unused.size() - 8) + " more";
      throw UserError("parameters that got no gradient in this backward: " + list +
                      "; every rank must reduce the same gradients (--find-unused-parameters, or "
                      "DistributedOptions::find_unused_parameters, counts them as zero)");
    }
    for (const std::string& name : unused) {  // zero on this rank, as DDP marks them
      ReducedGradient& g = grads_[index_of_.at(name)];
      if (g.rows && g.rows->holds_values()) g.rows->clear();
      else if (held_[index_of_.at(name)].empty()) std::memset(g.grad.raw_data(), 0, g.grad.nbytes());
      // (a gradient GPUs hold is zero there already: zeroed before the step, untouched since)
      ready(name);
    }
  }
  if (!device_buckets_.empty()) held_path_.collectives->wait_all();
  const float ranks = static_cast<float>(group_.size());  // the mean over the ranks, as DDP takes it
  for (Bucket& b : buckets_) {
    b.request.wait();
    traffic_.over_mpi += b.flat.size() * (options_.compress_bf16 ? sizeof(uint16_t) : sizeof(float));
    for (size_t k = 0; k < b.members.size(); ++k) {
      ReducedGradient& g = grads_[b.members[k]];
      float* out = g.grad.data<float>();
      if (options_.compress_bf16) {
        const uint16_t* in = b.compressed.data() + b.offsets[k];
        for (int64_t e = 0; e < g.grad.numel(); ++e) out[e] = bf16_to_float(in[e]);
      } else {
        const float* in = b.flat.data() + b.offsets[k];
        for (int64_t e = 0; e < g.grad.numel(); ++e) out[e] = in[e] / ranks;
      }
      if (g.rows) g.rows->mark_all();  // the other ranks' rows are in it now
    }
  }
  for (ReducedGradient& g : grads_)
    if (g.rows && g.rows->holds_values()) gather_rows(g);
}

void GradientReducer::gather_rows(ReducedGradient& g) {
  TouchedRows& rows = *g.rows;
  const int64_t width = rows.width();
  // this rank's rows, then their values, in one message
  std::span<const int64_t> mine = rows.list();
  std::string message(sizeof(int64_t) + mine.size() * (sizeof(int64_t) + static_cast<size_t>(width) * sizeof(float)), '\0');
  const int64_t count = static_cast<int64_t>(mine.size());
  char* at = message.data();
  std::memcpy(at, &count, sizeof(count));
  at += sizeof(count);
  std::memcpy(at, mine.data(), mine.size() * sizeof(int64_t));
  at += mine.size() * sizeof(int64_t);
  for (int64_t row : mine) {
    std::memcpy(at, rows.values_of(row), static_cast<size_t>(width) * sizeof(float));
    at += static_cast<size_t>(width) * sizeof(float);
  }
  const std::vector<std::string> all =
      group_.all_gather(message, "the gather of row gradient '" + g.name + "' of backward " + std::to_string(backward_));
  // the union of every rank's rows, then each rank's values added in rank order
  std::vector<int64_t> union_rows;
  for (const std::string& m : all) {
    int64_t n = 0;
    std::memcpy(&n, m.data(), sizeof(n));
    const auto* ids = reinterpret_cast<const int64_t*>(m.data() + sizeof(n));
    union_rows.insert(union_rows.end(), ids, ids + n);
  }
  std::sort(union_rows.begin(), union_rows.end());
  union_rows.erase(std::unique(union_rows.begin(), union_rows.end()), union_rows.end());
  rows.clear();
  rows.mark(union_rows);
  for (const std::string& m : all) {
    int64_t n = 0;
    std::memcpy(&n, m.data(), sizeof(n));
    const char* ids = m.data() + sizeof(n);
    const char* values = ids + static_cast<size_t>(n) * sizeof(int64_t);
    for (int64_t k = 0; k < n; ++k) {
      int64_t row = 0;
      std::memcpy(&row, ids + static_cast<size_t>(k) * sizeof(int64_t), sizeof(row));
      float* into = rows.values_of(row);
      const char* from = values + static_cast<size_t>(k * width) * sizeof(float);
      for (int64_t e = 0; e < width; ++e) {
        float v = 0;
        std::memcpy(&v, from + static_cast<size_t>(e) * sizeof(float), sizeof(v));
        into[e] += v;
      }
    }
  }
  const float ranks = static_cast<float>(group_.size());
  for (int64_t row : union_rows) {
    float* values = rows.values_of(row);
    for (int64_t e = 0; e < width; ++e) values[e] /= ranks;
  }
}

}  // namespace tandem

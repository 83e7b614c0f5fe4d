#include "runtime/distributed/gradient_reducer.h"

#include <algorithm>
#include <cstring>
#include <span>

#include "core/bfloat16.h"
#include "core/error.h"

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

GradientReducer::GradientReducer(ProcessGroup& group, std::vector<ReducedGradient> grads, GradientReducerOptions options)
    : group_(group), grads_(std::move(grads)), options_(options) {
  bucket_of_.assign(grads_.size(), kNoBucket);
  complete_.assign(grads_.size(), false);
  size_t bytes = 0;
  for (size_t i = 0; i < grads_.size(); ++i) {
    index_of_.emplace(grads_[i].name, i);
    if (grads_[i].rows && grads_[i].rows->holds_values()) continue;  // gathered by rows in finish()
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
  next_launch_ = 0;
}

void GradientReducer::ready(const std::string& name) {
  auto it = index_of_.find(name);
  if (it == index_of_.end()) return;  // not trained: the loss does not reach it
  const size_t i = it->second;
  if (complete_[i]) return;
  complete_[i] = true;
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

void GradientReducer::progress() {
  for (size_t k = 0; k < next_launch_; ++k) buckets_[k].request.done();
}

void GradientReducer::finish() {
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
      else std::memset(g.grad.raw_data(), 0, g.grad.nbytes());
      ready(name);
    }
  }
  const float ranks = static_cast<float>(group_.size());  // the mean over the ranks, as DDP takes it
  for (Bucket& b : buckets_) {
    b.request.wait();
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

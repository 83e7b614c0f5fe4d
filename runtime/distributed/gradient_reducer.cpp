#include "runtime/distributed/gradient_reducer.h"

#include <cstring>

#include "core/error.h"

namespace tandem {

GradientReducer::GradientReducer(ProcessGroup& group, std::vector<std::pair<std::string, Tensor>> grads,
                                 GradientReducerOptions options)
    : group_(group), grads_(std::move(grads)), options_(options) {
  bucket_of_.resize(grads_.size());
  complete_.assign(grads_.size(), false);
  size_t bytes = 0;
  for (size_t i = 0; i < grads_.size(); ++i) {
    const Tensor& g = grads_[i].second;
    TANDEM_ASSERT(g.defined() && g.dtype() == DType::float32 && g.device() == Device::cpu(),
                  "gradient '" + grads_[i].first + "' is not a dense host float32 tensor");
    index_of_.emplace(grads_[i].first, i);
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
    bucket_of_[i] = buckets_.size() - 1;
  }
}

std::vector<std::vector<std::string>> GradientReducer::buckets() const {
  std::vector<std::vector<std::string>> out;
  for (const Bucket& b : buckets_) {
    out.emplace_back();
    for (size_t i : b.members) out.back().push_back(grads_[i].first);
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
  TANDEM_ASSERT(it != index_of_.end(), "gradient of '" + name + "' is not reduced");
  const size_t i = it->second;
  if (complete_[i]) return;
  complete_[i] = true;
  Bucket& b = buckets_[bucket_of_[i]];
  const Tensor& g = grads_[i].second;
  size_t k = 0;
  while (b.members[k] != i) ++k;
  std::memcpy(b.flat.data() + b.offsets[k], g.raw_data(), g.nbytes());
  --b.waiting;
  launch_ready_buckets();
}

void GradientReducer::launch_ready_buckets() {
  // In bucket order on every rank: a later bucket complete before an earlier one waits.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].waiting == 0) {
    Bucket& b = buckets_[next_launch_];
    b.request = group_.all_reduce_sum_async(b.flat.data(), static_cast<int64_t>(b.flat.size()),
                                            "the all-reduce of gradient bucket " + std::to_string(next_launch_) +
                                                " of backward " + std::to_string(backward_));
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
    if (!complete_[i]) unused.push_back(grads_[i].first);
  if (!unused.empty()) {
    if (!options_.find_unused_parameters) {
      std::string list;
      for (size_t i = 0; i < unused.size() && i < 8; ++i) list += (i ? ", '" : "'") + unused[i] + "'";
      if (unused.size() > 8) list += ", and " + std::to_string(unused.size() - 8) + " more";
      throw UserError("parameters that got no gradient in this backward: " + list +
                      "; every rank must reduce the same gradients (set find_unused_parameters: true under "
                      "train: distributed: to count them as zero)");
    }
    for (const std::string& name : unused) {  // zero on this rank, as DDP marks them
      std::memset(grads_[index_of_.at(name)].second.raw_data(), 0, grads_[index_of_.at(name)].second.nbytes());
      ready(name);
    }
  }
  const float ranks = static_cast<float>(group_.size());  // the mean over the ranks, as DDP takes it
  for (Bucket& b : buckets_) {
    b.request.wait();
    for (size_t k = 0; k < b.members.size(); ++k) {
      const Tensor& g = grads_[b.members[k]].second;
      float* out = g.data<float>();
      const float* in = b.flat.data() + b.offsets[k];
      for (int64_t e = 0; e < g.numel(); ++e) out[e] = in[e] / ranks;
    }
  }
}

}  // namespace tandem

// BatchLoader: the consumer asks for batch k of the current epoch; worker threads
// gather batches k+1, k+2, ... ahead of it, each claiming the lowest batch not yet
// claimed, within a window of batches past the consumer. Finished batches wait in a map
// keyed by their number, so they come out in order however many workers there are.
//
// start_epoch bumps a generation counter: a worker that finishes a batch of an older
// generation drops it. The destructor sets `stopping`; a worker finishes the gather in
// hand (one batch) and exits, so joining never waits on the consumer.
#include "runtime/data/dataset.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "runtime/data/seeded_permutation.h"
#include "runtime/data/shard_order.h"

namespace tandem {

struct BatchLoader::Impl {
  std::shared_ptr<const Dataset> data;
  int64_t batch;
  bool shuffle;
  bool drop_last;
  uint64_t seed;
  int rank = 0, ranks = 1;  // shard(): this process's share of each epoch
  Allocator* memory = &cpu_allocator();  // gather_into(): where batches are gathered
  int64_t window;  // batches claimed but not yet taken by the consumer, at most

  std::mutex mutex;
  std::condition_variable work_ready;   // workers wait: a batch to claim, or stopping
  std::condition_variable batch_ready;  // the consumer waits: its batch, done or failed
  bool stopping = false;
  bool started = false;
  uint64_t generation = 0;
  std::shared_ptr<const std::vector<int64_t>> order;  // sample order of the current epoch
  int64_t end = 0;          // batches in the epoch
  int64_t next_claim = 0;   // the lowest batch no worker has claimed
  int64_t next_take = 0;    // the batch next() returns next
  std::map<int64_t, TensorMap> ready;
  std::map<int64_t, std::exception_ptr> failed;  // a gather that threw, rethrown by next() in its turn
  std::vector<std::thread> workers;

  int64_t batches_per_epoch() const {
    const int64_t all = data->size();
    const int64_t n = ranks == 1 ? all : drop_last ? all / ranks : (all + ranks - 1) / ranks;
    return drop_last ? n / batch : (n + batch - 1) / batch;
  }

  void work() {
    std::unique_lock lock(mutex);
    for (;;) {
      work_ready.wait(lock, [&] {
        return stopping || (started && next_claim < end && next_claim < next_take + window);
      });
      if (stopping) return;
      const int64_t k = next_claim++;
      const uint64_t gen = generation;
      std::shared_ptr<const std::vector<int64_t>> epoch_order = order;
      lock.unlock();

      TensorMap result;
      std::exception_ptr failure;
      try {
        int64_t begin = k * batch;
        int64_t count = std::min(batch, static_cast<int64_t>(epoch_order->size()) - begin);
        result = data->gather(std::span<const int64_t>(*epoch_order).subspan(static_cast<size_t>(begin),
                                                                             static_cast<size_t>(count)),
                              *memory);
      } catch (...) {
        failure = std::current_exception();
      }

      lock.lock();
      if (gen != generation) continue;  // start_epoch ran meanwhile: this batch is stale
      if (failure) {
        failed.emplace(k, failure);
      } else {
        ready.emplace(k, std::move(result));
      }
      batch_ready.notify_all();
    }
  }
};

BatchLoader::BatchLoader(std::shared_ptr<const Dataset> data, int64_t batch, bool shuffle, bool drop_last,
                         uint64_t seed, int workers, int prefetch)
    : impl_(std::make_unique<Impl>()) {
  if (data == nullptr) throw UserError("BatchLoader: no dataset");
  if (batch < 1) throw UserError("batch size must be at least 1, got " + std::to_string(batch));
  if (workers < 1) throw UserError("data loader workers must be at least 1, got " + std::to_string(workers));
  if (prefetch < 1) throw UserError("data loader prefetch must be at least 1, got " + std::to_string(prefetch));
  impl_->data = std::move(data);
  impl_->batch = batch;
  impl_->shuffle = shuffle;
  impl_->drop_last = drop_last;
  impl_->seed = seed;
  impl_->window = std::max(prefetch, workers);
  impl_->workers.reserve(static_cast<size_t>(workers));
  try {
    for (int i = 0; i < workers; ++i) impl_->workers.emplace_back([impl = impl_.get()] { impl->work(); });
  } catch (...) {
    {
      std::lock_guard lock(impl_->mutex);
      impl_->stopping = true;
    }
    impl_->work_ready.notify_all();
    for (std::thread& t : impl_->workers) t.join();
    throw;
  }
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->work_ready.notify_all();
  for (std::thread& t : impl_->workers) t.join();
}

int64_t BatchLoader::batches_per_epoch() const { return impl_->batches_per_epoch(); }

void BatchLoader::gather_into(Allocator& memory) {
  std::lock_guard lock(impl_->mutex);
  TANDEM_ASSERT(!impl_->started, "BatchLoader::gather_into() after start_epoch()");
  impl_->memory = &memory;
}

void BatchLoader::shard(int rank, int ranks) {
  if (ranks < 1 || rank < 0 || rank >= ranks)
    throw UserError("BatchLoader: rank " + std::to_string(rank) + " of " + std::to_string(ranks) + " does not exist");
  std::lock_guard lock(impl_->mutex);
  TANDEM_ASSERT(!impl_->started, "BatchLoader::shard() after start_epoch()");
  impl_->rank = rank;
  impl_->ranks = ranks;
}

void BatchLoader::start_epoch(int64_t epoch, int64_t skip_batches) {
  if (epoch < 0) throw UserError("epoch must not be negative, got " + std::to_string(epoch));
  if (skip_batches < 0) throw UserError("skip_batches must not be negative, got " + std::to_string(skip_batches));
  Impl& s = *impl_;
  // The permutation is computed outside the lock: workers keep gathering meanwhile.
  std::vector<int64_t> order;
  if (s.shuffle) {
    order = seeded_permutation(s.data->size(), s.seed, static_cast<uint64_t>(epoch));
  } else {
    order.resize(static_cast<size_t>(s.data->size()));
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  }
  if (s.ranks > 1) order = shard_order(order, s.rank, s.ranks, s.drop_last);
  {
    std::lock_guard lock(s.mutex);
    ++s.generation;
    s.started = true;
    s.order = std::make_shared<const std::vector<int64_t>>(std::move(order));
    s.end = s.batches_per_epoch();
    s.next_claim = s.next_take = std::min(skip_batches, s.end);
    s.ready.clear();
    s.failed.clear();
  }
  s.work_ready.notify_all();
}

std::optional<TensorMap> BatchLoader::next() {
  Impl& s = *impl_;
  std::unique_lock lock(s.mutex);
  TANDEM_ASSERT(s.started, "BatchLoader::next() before start_epoch()");
  if (s.next_take >= s.end) return std::nullopt;
  s.batch_ready.wait(lock, [&] { return s.ready.count(s.next_take) > 0 || s.failed.count(s.next_take) > 0; });
  if (auto it = s.failed.find(s.next_take); it != s.failed.end()) std::rethrow_exception(it->second);
  auto node = s.ready.extract(s.next_take);
  ++s.next_take;
  lock.unlock();
  s.work_ready.notify_all();  // the window moved: one more batch may be claimed
  return std::move(node.mapped());
}

}  // namespace tandem

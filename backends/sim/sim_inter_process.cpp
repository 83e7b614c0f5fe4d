#include "backends/sim/sim_inter_process.h"

#include <cstring>
#include <random>

#include "backends/trace.h"
#include "core/error.h"

namespace tandem {

namespace {

constexpr const char* kIdTag = "tandem simulated GPU communicator ";

std::string seconds_text(std::chrono::milliseconds t) {
  const double s = static_cast<double>(t.count()) / 1000.0;
  char text[32];
  std::snprintf(text, sizeof text, "%g", s);
  return text;
}

}  // namespace

std::string SimInterProcessCommunicator::make_id() {
  std::random_device random;
  std::string id = kIdTag;
  for (int i = 0; i < 4; ++i) {
    char part[16];
    std::snprintf(part, sizeof part, "%08x", random());
    id += part;
  }
  return id;
}

SimInterProcessCommunicator::SimInterProcessCommunicator(Device device, HostLaneEngine& engine,
                                                         const InterProcessSetup& setup)
    : device_(device),
      engine_(engine),
      rank_(setup.rank),
      size_(setup.size),
      timeout_(setup.timeout),
      transport_(setup.transport) {
  TANDEM_ASSERT(transport_ != nullptr, "a simulated GPU's communicator needs the runtime's transport");
  TANDEM_ASSERT(transport_->rank() == rank_ && transport_->size() == size_,
                "the transport's ranks are not the communicator's");
  const std::string where = device_.str() + " of rank " + std::to_string(rank_);
  if (setup.id.rfind(kIdTag, 0) != 0)
    throw UserError(where + ": the communicator id is not a simulated GPU's (rank 0's devices are of another kind)");
  // Every rank must hold rank 0's id: a rank that joined another communicator would pair
  // its collectives with strangers'.
  std::string rank0 = setup.id;
  uint64_t length = rank0.size();
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  const std::string late = where + ": the ranks did not all join the communicator between processes within " +
                           seconds_text(timeout_) + " s (the collective timeout, --collective-timeout)";
  if (!transport_->broadcast(&length, sizeof length, 0, deadline)) throw UserError(late);
  rank0.resize(length);
  if (!transport_->broadcast(rank0.data(), length, 0, deadline)) throw UserError(late);
  if (rank0 != setup.id)
    throw UserError(where + ": joined with another communicator id than rank 0 made (rank 0 has '" + rank0 +
                    "', this rank '" + setup.id + "')");
  proxy_ = std::thread([this] { serve(); });
}

SimInterProcessCommunicator::~SimInterProcessCommunicator() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  // Collectives still queued end without their result: the job is going.
  aborted_.store(true);
  transport_->cancel();
  handed_.notify_all();
  proxy_.join();
}

void SimInterProcessCommunicator::queue(Lane& lane, std::shared_ptr<Collective> c) {
  for (const Tensor& t : c->tensors)
    TANDEM_ASSERT(t.device() == device_ && t.dtype() == DType::float32,
                  c->what + ": a collective of " + device_.str() + " takes its float32 tensors");
  c->done = std::make_shared<HostLaneEvent>();
  const DeviceEvent done(c->done);
  {
    TraceLabel label(c->what, "handed to the proxy");
    lane.submit([this, c] {  // the lane has reached it: the tensors hold their values now
      {
        std::lock_guard lock(mutex_);
        handed_over_.push_back(c);
      }
      handed_.notify_one();
    });
  }
  lane.wait(done);
}

void SimInterProcessCommunicator::all_reduce_sum(Lane& lane, std::span<const Tensor> tensors, const std::string& what) {
  auto c = std::make_shared<Collective>();
  c->tensors.assign(tensors.begin(), tensors.end());
  c->what = what;
  queue(lane, std::move(c));
}

void SimInterProcessCommunicator::broadcast(Lane& lane, const Tensor& tensor, int root, const std::string& what) {
  TANDEM_ASSERT(root >= 0 && root < size_, what + ": no rank " + std::to_string(root));
  auto c = std::make_shared<Collective>();
  c->sum = false;
  c->root = root;
  c->tensors = {tensor};
  c->what = what;
  queue(lane, std::move(c));
}

void SimInterProcessCommunicator::serve() {
  for (;;) {
    std::shared_ptr<Collective> c;
    {
      std::unique_lock lock(mutex_);
      handed_.wait(lock, [&] { return stopping_ || !handed_over_.empty(); });
      if (handed_over_.empty()) return;  // stopping, nothing left
      c = std::move(handed_over_.front());
      handed_over_.pop_front();
    }
    if (!aborted_.load()) {
      const auto started = std::chrono::steady_clock::now();
      const bool finished = run(*c);
      const auto stopped = std::chrono::steady_clock::now();
      std::lock_guard lock(mutex_);
      if (finished) {
        ++counters_.collectives;
        size_t bytes = 0;
        for (const Tensor& t : c->tensors) bytes += t.nbytes();
        counters_.bytes += bytes;
        if (Trace* trace = Trace::active())
          trace->add("collectives (" + device_.str() + " between processes)", c->what, started, stopped, 1,
                     "{\"bytes\": " + std::to_string(bytes) + "}");
      } else if (error_.empty()) {
        error_ = c->what + " on " + device_.str() +
                 (stopping_ ? " was cancelled: the communicator was destroyed"
                            : " did not finish within " + seconds_text(timeout_) +
                                  " s (the collective timeout, --collective-timeout)");
        aborted_.store(true);
      }
    }
    // Reached with or without its result: the lane goes on, and error() tells the runtime.
    engine_.reach(*c->done);
  }
}

bool SimInterProcessCommunicator::run(Collective& c) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  // A transfer that did not finish may still write its memory later (MPI cannot cancel a
  // collective; the job is ending): that memory is never given back.
  auto keep_for_ever = [](auto kept) { new decltype(kept)(std::move(kept)); };
  if (!c.sum || c.tensors.size() == 1) {
    const bool done = c.sum ? transport_->all_reduce_sum(c.tensors[0].data<float>(), c.tensors[0].numel(), deadline)
                            : transport_->broadcast(c.tensors[0].raw_data(), c.tensors[0].nbytes(), c.root, deadline);
    if (!done) keep_for_ever(c.tensors[0].storage());
    return done;
  }
  // a bucket: one message, as NCCL's group launch is one
  int64_t total = 0;
  for (const Tensor& t : c.tensors) total += t.numel();
  std::vector<float> packed(static_cast<size_t>(total));
  size_t at = 0;
  for (const Tensor& t : c.tensors) {
    std::memcpy(packed.data() + at, t.raw_data(), t.nbytes());
    at += static_cast<size_t>(t.numel());
  }
  if (!transport_->all_reduce_sum(packed.data(), total, deadline)) {
    keep_for_ever(std::move(packed));
    return false;
  }
  at = 0;
  for (const Tensor& t : c.tensors) {
    std::memcpy(t.raw_data(), packed.data() + at, t.nbytes());
    at += static_cast<size_t>(t.numel());
  }
  return true;
}

std::string SimInterProcessCommunicator::error() {
  std::lock_guard lock(mutex_);
  return error_;
}

void SimInterProcessCommunicator::abort() {
  {
    std::lock_guard lock(mutex_);
    if (error_.empty()) error_ = "the communicator between processes of " + device_.str() + " was aborted";
  }
  aborted_.store(true);
  transport_->cancel();
}

SimInterProcessCommunicator::Counters SimInterProcessCommunicator::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

}  // namespace tandem

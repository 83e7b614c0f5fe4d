#include "runtime/distributed/device_collectives.h"

#include <cstring>
#include <thread>

#include "backends/backend.h"
#include "runtime/devices/device_registry.h"

namespace tandem {
namespace {

/// A simulated GPU's way between the processes: MPI, on a communicator of its own.
class ChannelTransport final : public HostTransport {
 public:
  explicit ChannelTransport(std::unique_ptr<ProcessGroup::Channel> channel) : channel_(std::move(channel)) {}
  int rank() const override { return channel_->rank(); }
  int size() const override { return channel_->size(); }
  bool all_reduce_sum(float* data, int64_t count, std::chrono::steady_clock::time_point deadline) override {
    return channel_->all_reduce_sum(data, count, deadline);
  }
  bool broadcast(void* data, size_t bytes, int root, std::chrono::steady_clock::time_point deadline) override {
    return channel_->broadcast(data, bytes, root, deadline);
  }
  void cancel() override { channel_->cancel(); }

 private:
  std::unique_ptr<ProcessGroup::Channel> channel_;
};

/// Ids of any bytes (NCCL's may hold zeros) in one string: each behind its length.
std::string pack(const std::vector<std::string>& ids) {
  std::string out;
  for (const std::string& id : ids) {
    const uint64_t n = id.size();
    out.append(reinterpret_cast<const char*>(&n), sizeof n);
    out += id;
  }
  return out;
}

std::vector<std::string> unpack(const std::string& packed) {
  std::vector<std::string> ids;
  for (size_t at = 0; at + sizeof(uint64_t) <= packed.size();) {
    uint64_t n = 0;
    std::memcpy(&n, packed.data() + at, sizeof n);
    at += sizeof n;
    ids.push_back(packed.substr(at, n));
    at += n;
  }
  return ids;
}

bool all_equal(const std::vector<std::string>& values) {
  for (const std::string& v : values)
    if (v != values.front()) return false;
  return true;
}

}  // namespace

std::shared_ptr<HostTransport> make_host_transport(ProcessGroup& group, const std::string& what) {
  std::unique_ptr<ProcessGroup::Channel> channel = group.open_channel(what);
  return channel ? std::make_shared<ChannelTransport>(std::move(channel)) : nullptr;
}

std::unique_ptr<DeviceCollectives> DeviceCollectives::open(ProcessGroup& group, DeviceRegistry* placed) {
  std::vector<Device> gpus;
  if (placed)
    for (const DeviceInfo& d : placed->inventory().devices)
      if (d.device != Device::cpu()) gpus.push_back(d.device);
  // What every rank has. Different GPUs (a rank on the cpu alone, another with simulated
  // GPUs), or MPI that lets no proxy thread in on some rank: every rank takes the host path,
  // which works whatever each has.
  std::string mine = "GPUs";
  for (Device d : gpus) mine += " " + d.str();
  mine += placed && placed->sim_gpu_count() > 0 ? " (simulated)" : "";
  mine += group.threads_allowed() ? ", MPI threads" : ", no MPI threads";
  if (!all_equal(group.all_gather(mine, "the check of the ranks' GPUs for collectives between processes")) ||
      gpus.empty())
    return nullptr;
  DeviceRegistry& registry = *placed;  // a rank with GPUs has one, and then every rank has
  std::vector<std::string> ids;
  if (group.rank() == 0)
    for (Device d : gpus) {
      std::string id = registry.backend(d).make_inter_process_id();
      if (id.empty()) {  // not offered: none at all
        ids.clear();
        break;
      }
      ids.push_back(std::move(id));
    }
  std::string packed = pack(ids);
  group.broadcast(packed, 0, "the broadcast of rank 0's communicator ids");
  ids = unpack(packed);
  if (ids.size() != gpus.size()) return nullptr;

  std::unique_ptr<DeviceCollectives> out(new DeviceCollectives(group, registry));
  bool joined = true;
  for (size_t k = 0; k < gpus.size(); ++k) {
    InterProcessSetup setup;
    setup.rank = group.rank();
    setup.size = group.size();
    setup.id = ids[k];
    setup.timeout = group.timeout();
    setup.transport = make_host_transport(group, "the channel of " + gpus[k].str() + "'s communicator between processes");
    std::unique_ptr<InterProcessCommunicator> communicator = registry.backend(gpus[k]).join_inter_process(setup);
    joined = joined && communicator != nullptr;
    if (communicator) out->communicators_.emplace(gpus[k], std::move(communicator));
  }
  // the same answer on every rank, or some would reduce on the device and others not
  const std::vector<std::string> all =
      group.all_gather(joined ? "joined" : "not offered", "the check that every rank joined its GPUs' communicators");
  for (const std::string& a : all)
    if (a != "joined") return nullptr;
  return out;
}

DeviceCollectives::~DeviceCollectives() = default;

void DeviceCollectives::all_reduce_mean(std::span<const Tensor> grads, const std::string& what) {
  if (grads.empty()) return;
  const Device device = grads.front().device();
  Backend& backend = registry_.backend(device);
  Lane& lane = backend.lane(LaneKind::compute);
  communicators_.at(device)->all_reduce_sum(lane, grads, what);
  const float inverse = 1.0f / static_cast<float>(group_.size());
  for (const Tensor& g : grads) backend.scale(lane, g, inverse);
  queued_.push_back({device, lane.record(), what, std::chrono::steady_clock::now()});
  // the rank computes on, but a rank that mpirun ends now was in the middle of this too
  group_.note_activity("computing " + group_.phase() + ", " + what + " queued on " + device.str());
}

void DeviceCollectives::check(const std::string& doing) {
  for (auto& [device, communicator] : communicators_) {
    const std::string error = communicator->error();
    if (!error.empty()) group_.abort_collective(error, doing);
  }
}

void DeviceCollectives::wait_all() {
  // Each communicator ends what it cannot finish by its deadline; this one is a net under
  // it, for a backend that would not.
  const auto grace = group_.timeout() + std::chrono::seconds(10);
  for (Queued& q : queued_) {
    if (!q.reached.done()) group_.note_activity("waiting in " + q.what + " on " + q.device.str());
    for (int spins = 0; !q.reached.done(); ++spins) {
      check(q.what);
      if (std::chrono::steady_clock::now() - q.since > grace) {
        communicators_.at(q.device)->abort();
        group_.abort_collective(q.what + " on " + q.device.str() + " did not end within the collective timeout " +
                                    "(--collective-timeout) and 10 s more, though its device should have ended it",
                                q.what);
      }
      if (spins < 1000) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    check(q.what);
    q.reached.wait();  // an error of the lane's own work comes out here
  }
  if (!queued_.empty()) group_.note_activity({});
  queued_.clear();
}

InterProcessCommunicator::Counters DeviceCollectives::counters() const {
  InterProcessCommunicator::Counters total;
  for (const auto& [device, communicator] : communicators_) {
    const InterProcessCommunicator::Counters c = communicator->counters();
    total.collectives += c.collectives;
    total.bytes += c.bytes;
  }
  return total;
}

}  // namespace tandem

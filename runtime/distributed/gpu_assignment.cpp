#include "runtime/distributed/gpu_assignment.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>

#include "runtime/distributed/distributed_data_parallel.h"

namespace tandem {
namespace {

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, separator);) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

/// The PCI bus id of a CUDA_VISIBLE_DEVICES entry: an index counts in PCI bus order (the
/// caller sets CUDA_DEVICE_ORDER=PCI_BUS_ID); a UUID or MIG name is kept as written.
std::string bus_id_of(const std::string& entry, const std::vector<std::string>& gpus_by_bus) {
  if (!entry.empty() && std::all_of(entry.begin(), entry.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    const size_t index = std::stoul(entry);
    if (index < gpus_by_bus.size()) return gpus_by_bus[index];
  }
  return "";
}

// What a rank tells the others: its host, then its GPUs or why it has none it can use.
struct Record {
  std::string host, error;
  std::vector<std::string> gpus;  // bus ids where known, else the entries as written
};

std::string encode(const Record& r) { return r.host + "\n" + (r.error.empty() ? join(r.gpus) : "!" + r.error); }

Record decode(const std::string& text) {
  Record r;
  const size_t newline = text.find('\n');
  r.host = text.substr(0, newline);
  const std::string rest = text.substr(newline + 1);
  if (!rest.empty() && rest[0] == '!') r.error = rest.substr(1);
  else r.gpus = split(rest, ',');
  return r;
}

}  // namespace

std::vector<std::string> driver_gpus(const std::string& proc_dir) {
  std::vector<std::string> ids;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(proc_dir, error))
    ids.push_back(entry.path().filename().string());
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::optional<GpuAssignment> assign_gpus(ProcessGroup& group, const std::optional<std::string>& cuda_visible_devices,
                                         const std::vector<std::string>& gpus_by_bus) {
  std::vector<std::string> visible;
  if (cuda_visible_devices) {
    visible = split(*cuda_visible_devices, ',');
  } else {
    for (size_t i = 0; i < gpus_by_bus.size(); ++i) visible.push_back(std::to_string(i));
  }
  // Which ranks share this host, and whether they were all given the same list (then it
  // is cut into shares) or each its own (a launcher script's per-rank choice: kept).
  const std::string setting = cuda_visible_devices ? *cuda_visible_devices : "(unset)";
  const std::vector<std::string> settings =
      group.all_gather(group.host() + "\n" + setting, "the exchange of each rank's host and visible GPUs");
  int local_index = 0, local_count = 0;
  bool same_setting = true;
  for (int r = 0; r < group.size(); ++r) {
    const std::string& theirs = settings[static_cast<size_t>(r)];
    if (theirs.substr(0, theirs.find('\n')) != group.host()) continue;
    if (r == group.rank()) local_index = local_count;
    ++local_count;
    same_setting = same_setting && theirs == group.host() + "\n" + setting;
  }

  Record mine;
  mine.host = group.host();
  std::vector<std::string> entries;
  if (!same_setting || local_count == 1) {
    entries = visible;
  } else if (!visible.empty() && visible.size() < static_cast<size_t>(local_count)) {
    mine.error = "host " + group.host() + " has " + std::to_string(visible.size()) + " GPU(s) visible (" +
                 (cuda_visible_devices ? "CUDA_VISIBLE_DEVICES=" + *cuda_visible_devices : "every GPU the driver lists") +
                 ") for its " + std::to_string(local_count) + " ranks: each rank needs a GPU of its own; start at most " +
                 std::to_string(visible.size()) + " ranks on it (mpirun -npernode), or train on simulated GPUs (--sim-gpus)";
  } else {
    const size_t share = visible.size() / static_cast<size_t>(local_count);
    entries.assign(visible.begin() + static_cast<std::ptrdiff_t>(share * local_index),
                   visible.begin() + static_cast<std::ptrdiff_t>(share * (local_index + 1)));
  }
  for (const std::string& e : entries) {
    const std::string bus = bus_id_of(e, gpus_by_bus);
    mine.gpus.push_back(bus.empty() ? e : bus);
  }

  // Every rank judges every rank's records alike, so that every rank raises the same error.
  const std::vector<std::string> records = group.all_gather(encode(mine), "the check of each rank's GPUs");
  std::map<std::pair<std::string, std::string>, int> user;  // (host, GPU) -> the first rank using it
  for (int r = 0; r < group.size(); ++r) {
    const Record theirs = decode(records[static_cast<size_t>(r)]);
    if (!theirs.error.empty()) throw JobError("rank " + std::to_string(r) + ": " + theirs.error);
    for (const std::string& gpu : theirs.gpus) {
      auto [it, fresh] = user.emplace(std::make_pair(theirs.host, gpu), r);
      if (!fresh)
        throw JobError("ranks " + std::to_string(it->second) + " and " + std::to_string(r) + " on host " + theirs.host +
                       " would both use GPU " + gpu + " (their CUDA_VISIBLE_DEVICES overlap): each rank needs GPUs of " +
                       "its own; leave CUDA_VISIBLE_DEVICES unset under mpirun, and Tandem gives each rank its share");
    }
  }
  if (entries.empty()) return std::nullopt;
  GpuAssignment assignment;
  assignment.visible_devices = join(entries);
  for (const std::string& e : entries) assignment.bus_ids.push_back(bus_id_of(e, gpus_by_bus));
  return assignment;
}

}  // namespace tandem

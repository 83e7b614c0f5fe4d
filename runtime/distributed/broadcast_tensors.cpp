#include "runtime/distributed/broadcast_tensors.h"

#include <sstream>
#include <vector>

namespace tandem {

void broadcast_tensors(ProcessGroup& group, TensorMap& tensors, int root, const std::string& what) {
  // a line per tensor: name, dtype, then its dimensions, tab-separated
  std::string header;
  if (group.rank() == root)
    for (const auto& [name, t] : tensors) {
      header += name + "\t" + std::to_string(static_cast<int>(t.dtype()));
      for (int64_t d : t.shape()) header += "\t" + std::to_string(d);
      header += "\n";
    }
  group.broadcast(header, root, what);
  if (group.rank() != root) {
    tensors.clear();
    std::istringstream lines(header);
    for (std::string line; std::getline(lines, line);) {
      std::vector<std::string> fields;
      std::istringstream in(line);
      for (std::string f; std::getline(in, f, '\t');) fields.push_back(f);
      Shape shape;
      for (size_t k = 2; k < fields.size(); ++k) shape.push_back(std::stoll(fields[k]));
      tensors.emplace(fields[0], Tensor::empty(shape, static_cast<DType>(std::stoi(fields[1]))));
    }
  }
  for (const auto& [name, t] : tensors) group.broadcast(t.raw_data(), t.nbytes(), root, what + " ('" + name + "')");
}

}  // namespace tandem

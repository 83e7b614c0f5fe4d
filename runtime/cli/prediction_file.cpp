#include "runtime/cli/prediction_file.h"

#include <fmt/core.h>

#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "runtime/io/safetensors.h"

namespace tandem::cli {
namespace {

enum class Kind { safetensors, npy, csv };

Kind kind_of(const std::string& path) {
  if (path.ends_with(".safetensors")) return Kind::safetensors;
  if (path.ends_with(".npy")) return Kind::npy;
  if (path.ends_with(".csv")) return Kind::csv;
  throw UserError("--outputs '" + path + "': its extension names no format tandem predict writes; end it in "
                  ".safetensors (every output by name), .npy (a one-output model's output) or .csv (a line per sample)");
}

/// Writes `bytes` to `path` (the directory was checked before the work began).
void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw UserError("--outputs '" + path + "': cannot write it: " + std::strerror(errno));
}

/// numpy.save's format 1.0: magic, version, header length, a dict padded to 64 bytes, data.
std::string npy_bytes(const Tensor& t) {
  std::string shape;  // a Python tuple: (3, 4), (3,), ()
  for (int64_t d : t.shape()) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  if (t.dim() == 1) shape += ",";
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}",
                                   t.dtype() == DType::float32 ? "<f4" : "<i8", shape);
  const size_t total = 10 + header.size() + 1;
  header += std::string((64 - total % 64) % 64, ' ') + "\n";
  std::string bytes = "\x93NUMPY";
  bytes += '\x01';
  bytes += '\x00';
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  bytes += header;
  bytes.append(static_cast<const char*>(t.raw_data()), t.nbytes());
  return bytes;
}

std::string csv_text(const TensorMap& outputs, const std::vector<std::string>& order) {
  int64_t samples = -1;
  std::string header;
  for (const std::string& name : order) {
    const Tensor& t = outputs.at(name);
    if (t.dim() == 0) throw UserError("--outputs: output '" + name + "' is a scalar, not one value per sample; write "
                                      ".safetensors or .npy");
    if (samples >= 0 && t.size(0) != samples)
      throw UserError(fmt::format("--outputs: output '{}' has {} rows and '{}' has {}: a CSV holds one line per "
                                  "sample; write .safetensors", name, t.size(0), order.front(), samples));
    samples = t.size(0);
    const int64_t width = samples == 0 ? 0 : t.numel() / samples;
    for (int64_t k = 0; k < width; ++k)
      header += (header.empty() ? "" : ",") + (width == 1 ? name : name + "_" + std::to_string(k));
  }
  std::string text = header + "\n";
  char cell[32];
  for (int64_t i = 0; i < samples; ++i) {
    bool first = true;
    for (const std::string& name : order) {
      const Tensor& t = outputs.at(name);
      const int64_t width = t.numel() / samples;
      for (int64_t k = 0; k < width; ++k) {
        if (t.dtype() == DType::float32)
          std::snprintf(cell, sizeof cell, "%.9g", static_cast<double>(t.data<float>()[i * width + k]));
        else
          std::snprintf(cell, sizeof cell, "%lld", static_cast<long long>(t.data<int64_t>()[i * width + k]));
        text += (first ? "" : ",") + std::string(cell);
        first = false;
      }
    }
    text += "\n";
  }
  return text;
}

}  // namespace

void check_prediction_path(const std::string& path, const std::vector<std::string>& outputs) {
  if (kind_of(path) == Kind::npy && outputs.size() != 1)
    throw UserError(fmt::format("--outputs '{}': a .npy file holds one array, and the model has {} outputs; write "
                                ".safetensors (each output by name) or .csv",
                                path, outputs.size()));
}

void write_predictions(const std::string& path, const TensorMap& outputs, const std::vector<std::string>& order) {
  switch (kind_of(path)) {
    case Kind::safetensors:
      write_safetensors(path, outputs);
      return;
    case Kind::npy:
      write_file(path, npy_bytes(outputs.at(order.front())));
      return;
    case Kind::csv:
      write_file(path, csv_text(outputs, order));
      return;
  }
}

}  // namespace tandem::cli

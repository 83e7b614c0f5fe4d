// DerivedParams: whether a kernel's derived form of its parameters (torch's weights packed
// into oneDNN's gate order, a weight reordered into a primitive's blocked layout) is still
// that of the parameters it is given. It is while params_version and every parameter's data
// pointer stay those it was derived from: the runtime bumps the version whenever a value
// changes (an optimizer step, weights loaded), and a replica on another device has other
// pointers. kUnknownParamsVersion (a caller that does not track versions) never matches,
// so such a caller always gets a fresh derivation.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backends/kernel.h"

namespace tandem::cpu {

class DerivedParams {
 public:
  bool current(uint64_t version, std::span<const Tensor> params) const {
    if (!valid_ || version == kUnknownParamsVersion || version != version_ || params.size() != sources_.size())
      return false;
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i].raw_data() != sources_[i]) return false;
    return true;
  }
  /// Records that the derived form now matches (version, params).
  void mark(uint64_t version, std::span<const Tensor> params) {
    valid_ = true;
    version_ = version;
    sources_.clear();
    for (const Tensor& p : params) sources_.push_back(p.raw_data());
  }
  void invalidate() { valid_ = false; }

 private:
  bool valid_ = false;
  uint64_t version_ = 0;
  std::vector<const void*> sources_;
};

}  // namespace tandem::cpu

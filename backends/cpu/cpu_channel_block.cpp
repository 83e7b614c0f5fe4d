#include "backends/cpu/cpu_channel_block.h"

namespace tandem::cpu {

int64_t channel_block() {
  // oneDNN's ISA values are nested bit sets: every bit of avx512_core set means it or a
  // superset of it (vnni, bf16, AMX)
  static const int64_t block = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto avx512 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
    return (isa & avx512) == avx512 ? int64_t{16} : int64_t{8};
  }();
  return block;
}

dnnl::memory::format_tag blocked_activation_tag() {
  return channel_block() == 16 ? dnnl::memory::format_tag::nChw16c : dnnl::memory::format_tag::nChw8c;
}

}  // namespace tandem::cpu

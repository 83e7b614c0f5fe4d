#include "core/device.h"

#include <charconv>

namespace tandem {

std::optional<Device> Device::parse(std::string_view text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  constexpr std::string_view prefix = "cuda:";
  if (!text.starts_with(prefix)) return std::nullopt;
  std::string_view digits = text.substr(prefix.size());
  if (digits.empty() || digits.size() > 4) return std::nullopt;
  int index = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  if (ec != std::errc() || end != digits.data() + digits.size() || index < 0) return std::nullopt;
  return Device::cuda(index);
}

std::string Device::str() const {
  return kind == DeviceKind::cpu ? std::string("cpu") : "cuda:" + std::to_string(index);
}

}  // namespace tandem

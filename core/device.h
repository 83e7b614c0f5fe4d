// Device: a small hashable value, printed and parsed as "cpu", "cuda:1" (after c10::Device).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace tandem {

enum class DeviceKind : uint8_t { cpu, cuda };

/// A device by kind and index. The CPU is always index 0.
struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  static constexpr Device cpu() { return {DeviceKind::cpu, 0}; }
  static constexpr Device cuda(int i) { return {DeviceKind::cuda, i}; }

  /// "cpu", "cuda" (= cuda:0) or "cuda:N"; nullopt when the text is none of these.
  static std::optional<Device> parse(std::string_view text);
  std::string str() const;

  friend bool operator==(const Device&, const Device&) = default;
  friend auto operator<=>(const Device&, const Device&) = default;
};

}  // namespace tandem

template <>
struct std::hash<tandem::Device> {
  size_t operator()(const tandem::Device& d) const noexcept {
    return std::hash<int>()(static_cast<int>(d.kind) * 1024 + d.index);
  }
};

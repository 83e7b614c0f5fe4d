// Private to runtime/io: a JSON object read member by member through nlohmann's SAX
// interface, in time linear in its size. nlohmann's parse-with-callback (which refused
// duplicate keys here before) searches the parent object for discarded values each time
// a nested object ends, which made a header of 20,000 tensors take seconds and one of
// 100,000 minutes; the whole object is never built either, so memory stays with the caller.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace tandem {

/// What can be wrong with the text besides a member's value; each is reported through
/// JsonMembersOptions::fail with the problem in words.
struct JsonMembersOptions {
  /// Containers open at once, the outer object included; one more is refused.
  int max_depth = 4;
  /// Called with "nests deeper than ...", "names the key 'k' twice in one object",
  /// "must be a JSON object, not array" or "is not valid JSON (...)"; must throw.
  std::function<void(const std::string& problem)> fail;
};

/// Parses `text`, which must be one JSON object, calling `on_member(key, value)` for each
/// member in the order written. A key named twice, in the object or in any object inside
/// it, is refused (nlohmann would keep the last), and so is nesting past max_depth.
void for_each_json_member(std::string_view text, const JsonMembersOptions& options,
                          const std::function<void(const std::string& key, const nlohmann::json& value)>& on_member);

}  // namespace tandem

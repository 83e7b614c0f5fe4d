#include "runtime/io/json_members.h"

#include <set>
#include <vector>

namespace tandem {
namespace {

using nlohmann::json;

/// Builds each member of the outer object as a json value, checking keys and depth as it
/// goes, and hands it over when it is complete. Values below the outer object are small
/// (a tensor's entry), so the per-key contains() check stays cheap.
class MemberSax : public nlohmann::json_sax<json> {
 public:
  MemberSax(const JsonMembersOptions& options,
            const std::function<void(const std::string&, const json&)>& on_member)
      : options_(options), on_member_(on_member) {}

  bool null() override { return value(json(nullptr), "null"); }
  bool boolean(bool v) override { return value(json(v), "boolean"); }
  bool number_integer(number_integer_t v) override { return value(json(v), "number"); }
  bool number_unsigned(number_unsigned_t v) override { return value(json(v), "number"); }
  bool number_float(number_float_t v, const string_t&) override { return value(json(v), "number"); }
  bool string(string_t& v) override { return value(json(std::move(v)), "string"); }
  bool binary(binary_t& v) override { return value(json::binary(std::move(v)), "binary"); }

  bool start_object(std::size_t) override { return open(json::object(), "object"); }
  bool start_array(std::size_t) override { return open(json::array(), "array"); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

  bool key(string_t& k) override {
    if (skipping_) return true;  // inside an outer array: nothing is built, only depth counts
    if (depth_ == 1) {
      if (!outer_keys_.insert(k).second) duplicate(k);
      member_key_ = std::move(k);
    } else {
      if (stack_.back()->contains(k)) duplicate(k);
      pending_key_ = std::move(k);
    }
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    std::string detail = e.what();  // quotes the last token read, which may be huge
    if (detail.size() > 300) detail = detail.substr(0, 300) + "...";
    options_.fail("is not valid JSON (" + detail + ")");
    return false;
  }

 private:
  /// A scalar: the outer value itself (refused), a member, or part of one.
  bool value(json v, const char* type) {
    if (depth_ == 0) options_.fail(std::string("must be a JSON object, not ") + type);
    if (skipping_) return true;
    if (depth_ == 1) on_member_(member_key_, v);
    else insert(std::move(v));
    return true;
  }

  bool open(json container, const char* type) {
    if (depth_ >= options_.max_depth) options_.fail("nests deeper than " + std::to_string(options_.max_depth) + " levels");
    ++depth_;
    if (depth_ == 1) {
      // The outer value must be an object; an array is refused once it ends, so that
      // its nesting is judged first (a bomb of brackets says it nests too deep).
      skipping_ = container.is_array();
      outer_type_ = type;
      return true;
    }
    if (skipping_) return true;
    if (depth_ == 2) {
      member_ = std::move(container);
      stack_.assign(1, &member_);
    } else {
      stack_.push_back(insert(std::move(container)));
    }
    return true;
  }

  bool close() {
    --depth_;
    if (depth_ == 0) {
      if (skipping_) options_.fail(std::string("must be a JSON object, not ") + outer_type_);
      return true;
    }
    if (skipping_) return true;
    stack_.pop_back();
    if (depth_ == 1) {
      on_member_(member_key_, member_);
      member_ = json();
    }
    return true;
  }

  /// Puts `v` into the innermost open container; where it now lives.
  json* insert(json v) {
    json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    return &(top[pending_key_] = std::move(v));
  }

  [[noreturn]] void duplicate(const std::string& k) {
    std::string shown = k.substr(0, 120) + (k.size() > 120 ? "..." : "");
    options_.fail("names the key '" + shown + "' twice in one object");
    throw std::logic_error("JsonMembersOptions::fail returned");  // fail must throw
  }

  const JsonMembersOptions& options_;
  const std::function<void(const std::string&, const json&)>& on_member_;
  int depth_ = 0;               // containers open, the outer one included
  bool skipping_ = false;       // the outer value is an array: only its depth is checked
  const char* outer_type_ = "";
  std::set<std::string> outer_keys_;
  std::string member_key_, pending_key_;
  json member_;                 // the member being built
  std::vector<json*> stack_;    // its open containers, innermost last
};

}  // namespace

void for_each_json_member(std::string_view text, const JsonMembersOptions& options,
                          const std::function<void(const std::string&, const json&)>& on_member) {
  MemberSax sax(options, on_member);
  json::sax_parse(text.begin(), text.end(), &sax, nlohmann::detail::input_format_t::json, true);
}

}  // namespace tandem

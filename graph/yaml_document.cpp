#include "graph/yaml_document.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <vector>

#include "core/printable_text.h"
#include "graph/load_graph.h"

namespace tandem {
namespace {

[[noreturn]] void fail_at(const std::string& file, int line, int column, const std::string& message) {
  SourceLocation loc{file, line, column};
  throw ModelError(loc.str() + ": " + message, loc);
}

/// Refuses what YAML's character set excludes: bytes that are not UTF-8, NUL and the other
/// C0 controls but tab, line feed and carriage return, DEL, and C1 controls but NEL.
void check_text(const std::string& text, const std::string& file) {
  int line = 1, column = 1;
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    size_t length = utf8_sequence_length(std::string_view(text).substr(i));
    if (length == 0) {
      static constexpr char kHex[] = "0123456789abcdef";
      fail_at(file, line, column,
              std::string("this is not a YAML text file: byte 0x") + kHex[b >> 4] + kHex[b & 0xf] +
                  " is not UTF-8; save the model file as UTF-8 text");
    }
    const bool c1 = length == 2 && b == 0xc2 && static_cast<unsigned char>(text[i + 1]) <= 0x9f &&
                    static_cast<unsigned char>(text[i + 1]) != 0x85;
    if (b == 0)
      fail_at(file, line, column, "this is not a YAML text file (it contains NUL bytes)");
    if ((b < 0x20 && b != '\t' && b != '\n' && b != '\r') || b == 0x7f || c1)
      fail_at(file, line, column,
              "control character '" + printable_text(text.substr(i, length)) +
                  "' is not allowed in YAML text; remove it or write it as an escape inside double quotes");
    if (b == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
    i += length;
  }
}

/// Whether the quoted scalar that starts at byte `pos` (its opening quote) is closed.
/// YAML's rules: in '...' a quote is written '' and in "..." a backslash escapes the next.
bool quote_is_closed(const std::string& text, size_t pos) {
  const char quote = text[pos];
  for (size_t i = pos + 1; i < text.size(); ++i) {
    if (quote == '"' && text[i] == '\\') {
      ++i;
    } else if (text[i] == quote) {
      if (quote == '\'' && i + 1 < text.size() && text[i + 1] == '\'') ++i;
      else return true;
    }
  }
  return false;
}

/// Walks the parser's events once (an alias is one event, never expanded), so its cost is
/// linear in the text whatever the anchors.
class StrictDocument : public YAML::EventHandler {
 public:
  StrictDocument(const std::string& text, const std::string& file) : text_(text), file_(file) {}

  int documents_with_content() const { return documents_with_content_; }
  YAML::Mark second_document() const { return second_document_; }

  void OnDocumentStart(const YAML::Mark& mark) override {
    // yaml-cpp 0.7 meets a token that cannot begin a document (a ',' outside brackets) by
    // emitting an empty document without consuming it, again and again: YAML::Load read
    // such a file as empty, and a loop over the documents would never end.
    if (documents_started_++ > 0 && mark.pos == document_start_.pos) {
      const auto pos = static_cast<size_t>(std::max(0, mark.pos));
      const std::string token = pos < text_.size() ? printable_text(text_.substr(pos, 1)) : "end of file";
      fail_at(file_, mark.line + 1, mark.column + 1, "invalid YAML: unexpected '" + token + "'");
    }
    document_start_ = mark;
    document_has_content_ = false;
  }
  void OnDocumentEnd() override {
    if (!document_has_content_) return;
    if (++documents_with_content_ == 2) second_document_ = document_start_;
  }

  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override {
    if (frames_.empty()) return;  // a document that is empty (a trailing `---`) holds nothing to ignore
    node(mark, nullptr);
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { node(mark, nullptr); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t, const std::string& value) override {
    if (mark.pos >= 0 && static_cast<size_t>(mark.pos) < text_.size()) {
      const char c = text_[static_cast<size_t>(mark.pos)];
      if ((c == '"' || c == '\'') && !quote_is_closed(text_, static_cast<size_t>(mark.pos)))
        fail_at(file_, mark.line + 1, mark.column + 1,
                std::string("the string quoted here has no closing ") + c +
                    " before the end of the file; close the quote");
    }
    node(mark, &value);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    open(mark, false);
  }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    open(mark, true);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapEnd() override { close(); }

 private:
  struct Frame {
    bool is_map = false;
    bool expecting_key = true;
    std::map<std::string, YAML::Mark> keys;  // where each key was first written
  };

  /// A node begins: in a mapping, every other one is a key.
  void node(const YAML::Mark& mark, const std::string* scalar) {
    document_has_content_ = true;
    if (frames_.empty() || !frames_.back().is_map) return;
    Frame& map = frames_.back();
    const bool is_key = map.expecting_key;
    map.expecting_key = !map.expecting_key;
    if (!is_key || scalar == nullptr) return;  // complex keys: the loader refuses them itself
    auto [it, inserted] = map.keys.emplace(*scalar, mark);
    if (!inserted)
      fail_at(file_, mark.line + 1, mark.column + 1,
              "duplicate key '" + scalar->substr(0, 120) + "' (first at line " + std::to_string(it->second.line + 1) +
                  ", column " + std::to_string(it->second.column + 1) + ")");
  }

  void open(const YAML::Mark& mark, bool is_map) {
    node(mark, nullptr);
    if (static_cast<int>(frames_.size()) >= kMaxYamlDepth)
      fail_at(file_, mark.line + 1, mark.column + 1,
              "the YAML nests more than " + std::to_string(kMaxYamlDepth) +
                  " mappings and lists deep; a model file needs a few per block");
    frames_.push_back(Frame{is_map, true, {}});
  }

  void close() { frames_.pop_back(); }

  const std::string& text_;
  const std::string& file_;
  std::vector<Frame> frames_;
  YAML::Mark document_start_, second_document_;
  bool document_has_content_ = false;
  int documents_started_ = 0;
  int documents_with_content_ = 0;
};

}  // namespace

YAML::Node load_yaml_document(const std::string& text, const std::string& file_name) {
  check_text(text, file_name);
  try {
    std::istringstream in(text);
    YAML::Parser parser(in);
    StrictDocument strict(text, file_name);
    while (parser.HandleNextDocument(strict)) {
      if (strict.documents_with_content() > 1) {
        YAML::Mark m = strict.second_document();
        fail_at(file_name, m.line + 1, m.column + 1,
                "a second YAML document starts here; a model file holds one document (remove the '---' and what "
                "follows, or put the second model in its own file)");
      }
    }
    YAML::Node root = YAML::Load(text);  // the events were valid: this parses the same text
    return root;
  } catch (const YAML::DeepRecursion& e) {  // yaml-cpp's own guard, should a structure reach it first
    fail_at(file_name, e.mark.line + 1, e.mark.column + 1,
            "the YAML nests too deep for its parser; a model file needs a few levels per block");
  } catch (const YAML::Exception& e) {
    if (e.mark.is_null()) fail_at(file_name, 1, 1, "invalid YAML: " + e.msg);
    fail_at(file_name, e.mark.line + 1, e.mark.column + 1, "invalid YAML: " + e.msg);
  }
}

}  // namespace tandem

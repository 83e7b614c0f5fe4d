#include "runtime/io/npy.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <optional>
#include <string_view>
#include <variant>
#include <vector>

#include "core/readable_file.h"
#include "runtime/io/mapped_file.h"
#include "runtime/io/widen_elements.h"
#include "runtime/io/zip_archive.h"

static_assert(std::endian::native == std::endian::little, ".npy reading assumes a little-endian host");

namespace tandem {
namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr const char* kCorrupt = "the file is corrupt or not a .npy file; save it again with numpy.save";
constexpr const char* kReadable =
    "Tandem reads float32 and int64, and converts float64 and float16 to float32 and int32, int16, int8, uint8 and "
    "bool to int64";

[[noreturn]] void fail(const std::string& message) { throw UserError(message); }

// ---- the header: a Python dict literal -------------------------------------------------

/// A value of the header's dict: a string, a bool, or a tuple of integers.
using HeaderValue = std::variant<std::string, bool, Shape>;

/// Reads numpy's header dict, as numpy writes it (repr of a dict), and refuses anything
/// else: numpy.load evaluates it with ast.literal_eval, Tandem parses only this grammar.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& what) : text_(text), what_(what) {}

  std::map<std::string, HeaderValue> dict() {
    std::map<std::string, HeaderValue> out;
    expect('{');
    while (!accept('}')) {
      std::string key = string_literal();
      expect(':');
      HeaderValue value = this->value();
      if (!out.emplace(key, std::move(value)).second) bad("names '" + key + "' twice");
      if (!accept(',')) {
        expect('}');
        break;
      }
    }
    skip_space();
    if (at_ != text_.size()) bad("has text after its dict");
    return out;
  }

 private:
  [[noreturn]] void bad(const std::string& problem) { fail(what_ + ": the .npy header " + problem + "; " + kCorrupt); }

  void skip_space() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\n' || text_[at_] == '\t')) ++at_;
  }
  bool accept(char c) {
    skip_space();
    if (at_ < text_.size() && text_[at_] == c) return ++at_, true;
    return false;
  }
  void expect(char c) {
    if (!accept(c)) bad(std::string("lacks a '") + c + "' at byte " + std::to_string(at_));
  }
  bool accept_word(std::string_view word) {
    skip_space();
    if (text_.substr(at_).starts_with(word)) return at_ += word.size(), true;
    return false;
  }
  std::string string_literal() {
    skip_space();
    if (at_ >= text_.size() || (text_[at_] != '\'' && text_[at_] != '"')) bad("lacks a quoted key or string");
    char quote = text_[at_++];
    size_t end = text_.find(quote, at_);
    if (end == std::string_view::npos) bad("leaves a string open");
    std::string s(text_.substr(at_, end - at_));
    if (s.find('\\') != std::string::npos) bad("holds an escaped string");
    at_ = end + 1;
    return s;
  }
  Shape tuple() {
    Shape shape;
    expect('(');
    while (!accept(')')) {
      skip_space();
      size_t start = at_;
      int64_t v = 0;
      while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') {
        if (v > (INT64_MAX - 9) / 10) bad("holds a dimension too large");
        v = v * 10 + (text_[at_++] - '0');
      }
      if (at_ == start) bad("holds a shape that is not a tuple of whole numbers");
      if (at_ < text_.size() && text_[at_] == 'L') ++at_;  // Python 2's long, in old files
      shape.push_back(v);
      if (!accept(',')) {
        expect(')');
        break;
      }
    }
    return shape;
  }
  HeaderValue value() {
    skip_space();
    if (at_ < text_.size() && (text_[at_] == '\'' || text_[at_] == '"')) return string_literal();
    if (accept_word("True")) return true;
    if (accept_word("False")) return false;
    if (at_ < text_.size() && text_[at_] == '(') return tuple();
    if (at_ < text_.size() && text_[at_] == '[') bad("describes a structured array (a list of fields)");
    bad("holds a value that is not a string, True, False or a tuple at byte " + std::to_string(at_));
  }

  std::string_view text_;
  const std::string& what_;
  size_t at_ = 0;
};

template <class T>
const T& header_field(const std::map<std::string, HeaderValue>& dict, const char* key, const std::string& what) {
  auto it = dict.find(key);
  if (it == dict.end()) fail(what + ": the .npy header has no '" + key + "'; " + kCorrupt);
  if (!std::holds_alternative<T>(it->second))
    fail(what + ": the .npy header's '" + key + "' has the wrong type; " + kCorrupt);
  return std::get<T>(it->second);
}

// ---- dtypes ----------------------------------------------------------------------------

enum class Source { f4, f8, f2, i8, i4, i2, i1, u1, b1 };

struct NpyDType {
  Source source;
  size_t itemsize;
  DType target;
};

/// '<f4' and the like; the byte order checked first ('|' for one-byte types, '=' native).
NpyDType parse_descr(const std::string& descr, const std::string& what) {
  if (descr.size() >= 2 && descr.substr(1) == "O")
    fail(what + ": the array holds Python objects (dtype object); save an array of numbers");
  if (descr.size() < 3) fail(what + ": unknown dtype '" + descr + "'; " + kReadable);
  char order = descr[0];
  std::string type = descr.substr(1);
  if (order == '>' && type != "i1" && type != "u1" && type != "b1")
    fail(what + ": the array is big-endian ('" + descr + "'); save it little-endian, e.g. array.astype('<" + type +
         "')");
  if (order != '<' && order != '|' && order != '=' && order != '>') fail(what + ": unknown dtype '" + descr + "'");
  static const std::map<std::string, NpyDType> kTypes = {
      {"f4", {Source::f4, 4, DType::float32}}, {"f8", {Source::f8, 8, DType::float32}},
      {"f2", {Source::f2, 2, DType::float32}}, {"i8", {Source::i8, 8, DType::int64}},
      {"i4", {Source::i4, 4, DType::int64}},   {"i2", {Source::i2, 2, DType::int64}},
      {"i1", {Source::i1, 1, DType::int64}},   {"u1", {Source::u1, 1, DType::int64}},
      {"b1", {Source::b1, 1, DType::int64}},
  };
  auto it = kTypes.find(type);
  if (it != kTypes.end()) return it->second;
  fail(what + ": dtype '" + descr + "' is not supported; " + kReadable +
       ". Convert the array before saving (e.g. array.astype('float32') or array.astype('int64')).");
}

void convert_into(Source source, const std::byte* src, const Tensor& t) {
  const int64_t n = t.numel();
  auto to_i64 = [](auto v) { return static_cast<int64_t>(v); };
  switch (source) {
    case Source::f4:
    case Source::i8: std::memcpy(t.raw_data(), src, t.nbytes()); break;
    case Source::f8: convert_each<double>(src, t.data<float>(), n, [](double v) { return static_cast<float>(v); }); break;
    case Source::f2: convert_each<uint16_t>(src, t.data<float>(), n, half_to_float); break;
    case Source::i4: convert_each<int32_t>(src, t.data<int64_t>(), n, to_i64); break;
    case Source::i2: convert_each<int16_t>(src, t.data<int64_t>(), n, to_i64); break;
    case Source::i1: convert_each<int8_t>(src, t.data<int64_t>(), n, to_i64); break;
    case Source::u1: convert_each<uint8_t>(src, t.data<int64_t>(), n, to_i64); break;
    case Source::b1: convert_each<uint8_t>(src, t.data<int64_t>(), n, [](uint8_t v) { return int64_t{v != 0}; }); break;
  }
}

uint64_t le(std::span<const std::byte> bytes, size_t offset, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t(std::to_integer<uint8_t>(bytes[offset + i])) << (8 * i);
  return v;
}

}  // namespace

Tensor parse_npy(std::span<const std::byte> bytes, const std::string& what) {
  std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (!text.starts_with(kMagic)) fail(what + ": does not begin with .npy's magic \"\\x93NUMPY\"; " + kCorrupt);
  if (bytes.size() < 10) fail(what + ": the file ends inside the .npy preamble; " + kCorrupt);
  const int major = std::to_integer<int>(bytes[6]);
  if (major < 1 || major > 3)
    fail(what + ": .npy format version " + std::to_string(major) + "." + std::to_string(std::to_integer<int>(bytes[7])) +
         " is not one Tandem reads (1.0, 2.0, 3.0)");
  const size_t length_bytes = major == 1 ? 2 : 4;
  if (bytes.size() < 6 + 2 + length_bytes) fail(what + ": the file ends inside the .npy preamble; " + kCorrupt);
  const uint64_t header_length = le(bytes, 8, length_bytes);
  const uint64_t data_start = 8 + length_bytes + header_length;
  if (data_start > bytes.size())
    fail(what + ": the .npy header of " + std::to_string(header_length) + " bytes reaches past the end of the file; " +
         kCorrupt);
  auto dict = HeaderParser(text.substr(8 + length_bytes, header_length), what).dict();
  if (dict.size() != 3) fail(what + ": the .npy header must hold exactly descr, fortran_order and shape; " + kCorrupt);
  const NpyDType dtype = parse_descr(header_field<std::string>(dict, "descr", what), what);
  if (header_field<bool>(dict, "fortran_order", what))
    fail(what + ": the array is in Fortran order; save it in C order (numpy.ascontiguousarray(array))");
  Shape shape = header_field<Shape>(dict, "shape", what);

  uint64_t numel = 1;
  for (int64_t d : shape) {
    if (d != 0 && numel > static_cast<uint64_t>(INT64_MAX) / 8 / static_cast<uint64_t>(d))
      fail(what + ": shape " + shape_str(shape) + " has too many elements; " + kCorrupt);
    numel *= static_cast<uint64_t>(d);
  }
  const uint64_t data_bytes = numel * dtype.itemsize;
  const uint64_t present = bytes.size() - data_start;
  if (present < data_bytes)
    fail(what + ": shape " + shape_str(shape) + " needs " + std::to_string(data_bytes) + " bytes of data, the file holds " +
         std::to_string(present) + "; the file is truncated: copy or save it again");
  if (present > data_bytes)
    fail(what + ": " + std::to_string(present - data_bytes) + " bytes follow the array's data; " + kCorrupt);
  Tensor t = Tensor::empty(shape, dtype.target);
  if (numel > 0) convert_into(dtype.source, bytes.data() + data_start, t);
  return t;
}

Tensor read_npy(const std::string& path) {
  ReadableFile file(path);
  MappedFile mapped(file);
  return parse_npy(mapped.bytes(), path);
}

TensorMap read_npz(const std::string& path) {
  ReadableFile file(path);
  MappedFile mapped(file);
  TensorMap arrays;
  for (const ZipMember& m : zip_members(mapped.bytes(), path)) {
    if (!m.name.ends_with(".npy"))
      fail(path + ": member '" + m.name + "' is not a .npy array; an .npz file holds only arrays (numpy.savez)");
    std::string name = m.name.substr(0, m.name.size() - 4);
    std::string what = path + ": array '" + name + "'";
    std::vector<std::byte> bytes = zip_member_bytes(mapped.bytes(), m, path);
    if (!arrays.emplace(name, parse_npy(bytes, what)).second) fail(path + ": array '" + name + "' is there twice");
  }
  if (arrays.empty()) fail(path + ": the archive holds no arrays");
  return arrays;
}

}  // namespace tandem

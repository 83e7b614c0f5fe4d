#include "runtime/io/safetensors.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <array>
#include <bit>
#include <charconv>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "core/readable_file.h"
#include "runtime/io/file_kind.h"
#include "runtime/io/json_members.h"
#include "runtime/io/mapped_file.h"
#include "runtime/io/widen_elements.h"

// The format is little-endian and so are the machines Tandem runs on (x86-64, aarch64);
// reading the data with memcpy relies on that.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace tandem {
namespace {

using nlohmann::json;

/// Python's safetensors refuses headers above this size too (MAX_HEADER_SIZE).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
/// A valid header nests three deep (object -> entry -> shape); allow a little for
/// unknown extra fields, refuse anything deeper before it costs memory.
constexpr int kMaxJsonDepth = 4;
constexpr const char* kMetadataKey = "__metadata__";
constexpr const char* kCorrupt = "the file is corrupt or not a safetensors file; export it again";

// ---- dtypes as the file names them ---------------------------------------------------

enum class FileDType { BOOL, U8, I8, I16, I32, I64, F16, BF16, F32, F64 };

struct FileDTypeInfo {
  FileDType id;
  std::string_view name;
  size_t itemsize;
  DType target;  ///< what Tandem holds it as
};

constexpr FileDTypeInfo kReadableDTypes[] = {
    {FileDType::BOOL, "BOOL", 1, DType::int64}, {FileDType::U8, "U8", 1, DType::int64},
    {FileDType::I8, "I8", 1, DType::int64},     {FileDType::I16, "I16", 2, DType::int64},
    {FileDType::I32, "I32", 4, DType::int64},   {FileDType::I64, "I64", 8, DType::int64},
    {FileDType::F16, "F16", 2, DType::float32}, {FileDType::BF16, "BF16", 2, DType::float32},
    {FileDType::F32, "F32", 4, DType::float32}, {FileDType::F64, "F64", 8, DType::float32},
};

/// Dtypes the format defines that Tandem cannot represent without losing values.
constexpr std::string_view kUnreadableDTypes[] = {"U16",     "U32",         "U64",        "F8_E4M3", "F8_E5M2",
                                                  "F8_E8M0", "E8M0",        "F4",         "F6_E2M3", "F6_E3M2",
                                                  "C64",     "F8_E4M3FNUZ", "F8_E5M2FNUZ"};

constexpr const char* kReadableList =
    "Tandem reads F32 and I64, and converts F64, F16, BF16 to float32 and I32, I16, I8, U8, BOOL to int64";

// ---- messages ------------------------------------------------------------------------

[[noreturn]] void fail(const std::string& message) { throw UserError(message); }

/// A tensor name as messages show it: quoted and cut short (a corrupt header may hold
/// a name of megabytes). Built by appending, here and in offsets_str, because GCC 12
/// warns falsely (-Wrestrict) on `"literal" + std::string`.
std::string quote_name(std::string_view name) {
  constexpr size_t kMax = 120;
  std::string s = "'";
  s += name.substr(0, kMax);
  s += name.size() > kMax ? "...'" : "'";
  return s;
}

std::string offsets_str(uint64_t begin, uint64_t end) {
  std::string s = "[";
  s += std::to_string(begin);
  s += ", ";
  s += std::to_string(end);
  s += ']';
  return s;
}

// ---- header --------------------------------------------------------------------------

/// One validated tensor entry of the header.
struct Entry {
  std::string name;
  const FileDTypeInfo* dtype;
  Shape shape;
  uint64_t begin;  ///< byte offsets into the data section
  uint64_t end;
};

struct Header {
  std::vector<Entry> entries;
  std::map<std::string, std::string> metadata;
};

/// A non-negative JSON integer; `where` and `field` say what it was for.
uint64_t to_u64(const json& v, const std::string& where, std::string_view field) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer())
    fail(where + ": " + std::string(field) + " holds the negative number " + std::to_string(v.get<int64_t>()) + "; " +
         kCorrupt);
  fail(where + ": " + std::string(field) + " must hold non-negative integers, not " + v.type_name() + "; " + kCorrupt);
}

const json& field(const json& entry, const char* name, const std::string& where) {
  auto it = entry.find(name);
  if (it == entry.end())
    fail(where + ": entry has no \"" + name + "\" field (it needs dtype, shape and data_offsets); " + kCorrupt);
  return *it;
}

const FileDTypeInfo& parse_dtype_field(const json& v, const std::string& where) {
  if (!v.is_string()) fail(where + ": \"dtype\" must be a string, not " + std::string(v.type_name()) + "; " + kCorrupt);
  const auto& name = v.get_ref<const std::string&>();
  for (const auto& info : kReadableDTypes)
    if (info.name == name) return info;
  for (auto unreadable : kUnreadableDTypes)
    if (unreadable == name)
      fail(where + ": dtype " + name + " is not supported; " + kReadableList +
           ". Convert the tensor before saving (e.g. tensor.float() or tensor.long()).");
  fail(where + ": unknown dtype " + quote_name(name) + "; " + kReadableList + ".");
}

/// The shape, and checks that its element count and byte size fit in int64.
Shape parse_shape_field(const json& v, const FileDTypeInfo& dtype, const std::string& where) {
  if (!v.is_array()) fail(where + ": \"shape\" must be an array, not " + std::string(v.type_name()) + "; " + kCorrupt);
  Shape shape;
  shape.reserve(v.size());
  for (const json& d : v) {
    uint64_t dim = to_u64(d, where, "\"shape\"");
    if (dim > static_cast<uint64_t>(INT64_MAX))
      fail(where + ": shape dimension " + std::to_string(dim) + " is absurd; " + kCorrupt);
    shape.push_back(static_cast<int64_t>(dim));
  }
  // Checked here rather than by shape_numel so the message names the file and tensor.
  int64_t max_numel = INT64_MAX / static_cast<int64_t>(dtype.itemsize);
  if (std::find(shape.begin(), shape.end(), 0) == shape.end()) {
    int64_t numel = 1;
    for (int64_t d : shape) {
      if (numel > max_numel / d) fail(where + ": shape " + shape_str(shape) + " has too many elements; " + kCorrupt);
      numel *= d;
    }
  }
  return shape;
}

Entry parse_entry(const std::string& name, const json& v, uint64_t data_bytes, const std::string& what) {
  std::string where = what + ": tensor " + quote_name(name);
  if (!v.is_object())
    fail(where + ": entry must be an object with dtype, shape and data_offsets, not " + std::string(v.type_name()) +
         "; " + kCorrupt);
  Entry e{name, &parse_dtype_field(field(v, "dtype", where), where), {}, 0, 0};
  e.shape = parse_shape_field(field(v, "shape", where), *e.dtype, where);

  const json& offsets = field(v, "data_offsets", where);
  if (!offsets.is_array() || offsets.size() != 2)
    fail(where + ": \"data_offsets\" must be an array of two integers [begin, end]; " + kCorrupt);
  e.begin = to_u64(offsets[0], where, "\"data_offsets\"");
  e.end = to_u64(offsets[1], where, "\"data_offsets\"");
  if (e.begin > e.end)
    fail(where + ": data_offsets " + offsets_str(e.begin, e.end) + " begin after they end; " + kCorrupt);

  uint64_t expected = static_cast<uint64_t>(shape_numel(e.shape)) * e.dtype->itemsize;
  if (e.end - e.begin != expected)
    fail(where + ": data_offsets " + offsets_str(e.begin, e.end) + " do not match shape " + shape_str(e.shape) +
         " of " + std::string(e.dtype->name) + " (" + std::to_string(expected) + " bytes); " + kCorrupt);
  if (e.end > data_bytes)
    fail(where + ": data_offsets " + offsets_str(e.begin, e.end) + " reach past the end of the data (" +
         std::to_string(data_bytes) + " bytes); the file is truncated: copy or download it again");
  return e;
}

std::map<std::string, std::string> parse_metadata(const json& v, const std::string& what) {
  std::map<std::string, std::string> metadata;
  if (v.is_null()) return metadata;
  if (!v.is_object())
    fail(what + ": \"__metadata__\" must be an object of strings, not " + std::string(v.type_name()) + "; " + kCorrupt);
  for (const auto& [key, value] : v.items()) {
    if (!value.is_string())
      fail(what + ": \"__metadata__\" entry " + quote_name(key) + " must be a string, not " +
           std::string(value.type_name()) + "; " + kCorrupt);
    metadata.emplace(key, value.get<std::string>());
  }
  return metadata;
}

/// Tensors may leave gaps between them (Python's writer does not, others may), but two
/// tensors sharing bytes would alias once loaded: refuse.
void check_no_overlap(std::vector<const Entry*> entries, const std::string& what) {
  std::erase_if(entries, [](const Entry* e) { return e->begin == e->end; });
  std::sort(entries.begin(), entries.end(), [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < entries.size(); ++i)
    if (entries[i]->begin < entries[i - 1]->end)
      fail(what + ": tensors " + quote_name(entries[i - 1]->name) + " " +
           offsets_str(entries[i - 1]->begin, entries[i - 1]->end) + " and " + quote_name(entries[i]->name) + " " +
           offsets_str(entries[i]->begin, entries[i]->end) + " overlap in the file; " + kCorrupt);
}

Header parse_header(std::string_view text, uint64_t data_bytes, const std::string& what) {
  Header header;
  JsonMembersOptions options;
  options.max_depth = kMaxJsonDepth;
  options.fail = [&](const std::string& problem) { fail(what + ": header " + problem + "; " + kCorrupt); };
  for_each_json_member(text, options, [&](const std::string& name, const json& value) {
    if (name == kMetadataKey)
      header.metadata = parse_metadata(value, what);
    else
      header.entries.push_back(parse_entry(name, value, data_bytes, what));
  });
  std::vector<const Entry*> pointers;
  pointers.reserve(header.entries.size());
  for (const Entry& e : header.entries) pointers.push_back(&e);
  check_no_overlap(std::move(pointers), what);
  return header;
}

/// The header length from the first 8 bytes, checked against the file size.
uint64_t header_length(std::span<const std::byte> first_bytes, uint64_t file_bytes, const std::string& what) {
  if (file_bytes < 8)
    fail(what + ": file is " + std::to_string(file_bytes) +
         " bytes, shorter than the 8-byte safetensors header length; " + kCorrupt);
  uint64_t n = 0;
  std::memcpy(&n, first_bytes.data(), 8);
  if (n > kMaxHeaderBytes)
    fail(what + ": header length " + std::to_string(n) + " is over the 100 MB limit; " + kCorrupt);
  if (n > file_bytes - 8)
    fail(what + ": header length " + std::to_string(n) + " is more than the " + std::to_string(file_bytes - 8) +
         " bytes after it; the file is truncated or not a safetensors file");
  return n;
}

// ---- data ----------------------------------------------------------------------------

/// Widens `src` (the file's bytes for `e`) into `t`.
void convert_into(const Entry& e, const std::byte* src, const Tensor& t) {
  int64_t n = t.numel();
  auto to_i64 = [](auto v) { return static_cast<int64_t>(v); };
  switch (e.dtype->id) {
    case FileDType::BOOL:
      convert_each<uint8_t>(src, t.data<int64_t>(), n, [](uint8_t v) { return int64_t{v != 0}; });
      break;
    case FileDType::U8:
      convert_each<uint8_t>(src, t.data<int64_t>(), n, to_i64);
      break;
    case FileDType::I8:
      convert_each<int8_t>(src, t.data<int64_t>(), n, to_i64);
      break;
    case FileDType::I16:
      convert_each<int16_t>(src, t.data<int64_t>(), n, to_i64);
      break;
    case FileDType::I32:
      convert_each<int32_t>(src, t.data<int64_t>(), n, to_i64);
      break;
    case FileDType::F16:
      convert_each<uint16_t>(src, t.data<float>(), n, half_to_float);
      break;
    case FileDType::BF16:
      convert_each<uint16_t>(src, t.data<float>(), n,
                             [](uint16_t v) { return std::bit_cast<float>(uint32_t{v} << 16); });
      break;
    case FileDType::F64:
      convert_each<double>(src, t.data<float>(), n, [](double v) { return static_cast<float>(v); });
      break;
    case FileDType::F32:
    case FileDType::I64:
      TANDEM_ASSERT(false, "F32 and I64 are copied, not converted");
  }
}

/// Copies the bytes [offset, offset + n) of the data section to `dst`.
using FetchData = std::function<void(uint64_t offset, size_t n, std::byte* dst)>;

Tensor load_tensor(const Entry& e, const FetchData& fetch) {
  Tensor t = Tensor::empty(e.shape, e.dtype->target);
  size_t bytes = static_cast<size_t>(e.end - e.begin);
  if (bytes == 0) return t;
  bool same_layout = e.dtype->id == FileDType::F32 || e.dtype->id == FileDType::I64;
  if (same_layout) {
    fetch(e.begin, bytes, static_cast<std::byte*>(t.raw_data()));
  } else {
    std::vector<std::byte> staging(bytes);
    fetch(e.begin, bytes, staging.data());
    convert_into(e, staging.data(), t);
  }
  return t;
}

TensorMap load_all(const Header& header, const FetchData& fetch) {
  TensorMap tensors;
  for (const Entry& e : header.entries) tensors.emplace(e.name, load_tensor(e, fetch));
  return tensors;
}

// ---- files ---------------------------------------------------------------------------

/// Throws `message: <errno text>`; callers pass errno saved before building the message.
[[noreturn]] void fail_errno(int err, const std::string& message) { fail(message + ": " + std::strerror(err)); }

/// An open file descriptor, closed on destruction.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  /// Closes now, reporting failure (a delayed write error shows up here).
  bool close() {
    int fd = std::exchange(fd_, -1);
    return ::close(fd) == 0;
  }

 private:
  int fd_;
};

struct FileHeader {
  Header header;
  uint64_t data_start;
};

/// A file of another kind (CSV, numpy, torch.save) is named as what it is; a file that
/// is no known kind, or too short to hold the header's length, goes on to be refused for
/// what is wrong in it.
void check_kind(const ReadableFile& file) {
  if (file.size() < 8) return;
  FileKind kind = kind_of_file(file);
  if (kind != FileKind::safetensors && kind != FileKind::unknown) fail(wrong_kind_message(file, kind, "safetensors"));
}

FileHeader read_file_header(const ReadableFile& file) {
  check_kind(file);
  std::byte length_bytes[8] = {};
  if (file.size() >= 8) file.read_at(0, 8, length_bytes);
  uint64_t n = header_length(length_bytes, file.size(), file.path());
  std::string text(n, '\0');
  file.read_at(8, n, text.data());
  return {parse_header(text, file.size() - 8 - n, file.path()), 8 + n};
}

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t put = ::write(fd, p, n);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) {
      int err = errno;
      fail_errno(err, "cannot write " + path);
    }
    p += put;
    n -= static_cast<size_t>(put);
  }
}

/// Makes the rename durable; filesystems that cannot sync a directory are not an error.
void sync_parent_directory(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// ---- writing -------------------------------------------------------------------------

/// The temporary being written (write_safetensors), for a signal handler: a fixed buffer,
/// published by an atomic pointer once it holds the whole name.
char temporary_name[4096];
std::atomic<const char*> temporary_in_progress{nullptr};
static_assert(std::atomic<const char*>::is_always_lock_free);

/// Publishes `tmp` while it is written; a name too long for the buffer is not published.
class PublishedTemporary {
 public:
  explicit PublishedTemporary(const std::string& tmp) {
    if (tmp.size() >= sizeof temporary_name || temporary_in_progress.load() != nullptr) return;
    std::memcpy(temporary_name, tmp.c_str(), tmp.size() + 1);
    temporary_in_progress.store(temporary_name);
    published_ = true;
  }
  ~PublishedTemporary() {
    if (published_) temporary_in_progress.store(nullptr);
  }
  PublishedTemporary(const PublishedTemporary&) = delete;
  PublishedTemporary& operator=(const PublishedTemporary&) = delete;

 private:
  bool published_ = false;
};

}  // namespace

const char* safetensors_temporary_in_progress() { return temporary_in_progress.load(); }

// A live process's file (another writer of the same path, or a reused PID) is left alone; a
// name that is not exactly "<path>.tmp-PID" is never touched.
void remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const std::string prefix = target.filename().string() + ".tmp-";
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    std::string_view digits = std::string_view(name).substr(prefix.size());
    pid_t pid = 0;
    auto [last, err] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
    if (err != std::errc() || last != digits.data() + digits.size() || digits.empty() || pid <= 0) continue;
    if (pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (EPERM: not ours)
    std::error_code ignored;
    fs::remove(it->path(), ignored);
  }
}

namespace {

std::string json_string(const std::string& s, const std::string& what_it_is) {
  try {
    return json(s).dump();  // strict: throws on invalid UTF-8, which the format forbids
  } catch (const json::exception&) {
    fail("cannot save " + what_it_is + " " + quote_name(s) + ": it is not valid UTF-8");
  }
}

void check_writable(const std::string& name, const Tensor& t) {
  if (name == kMetadataKey) fail("cannot save a tensor named \"__metadata__\": the format reserves that name");
  if (!t.defined()) fail("cannot save tensor " + quote_name(name) + ": it is undefined (default-constructed)");
  if (t.device() != Device::cpu())
    fail("cannot save tensor " + quote_name(name) + ": it is on " + t.device().str() + "; copy it to the host first");
}

/// The JSON header, padded with spaces to a multiple of 8 bytes. Built by hand rather
/// than through nlohmann::ordered_json, whose insertion is linear in the key count.
std::string build_header(const TensorMap& tensors, const std::map<std::string, std::string>& metadata) {
  std::string h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    for (auto it = metadata.begin(); it != metadata.end(); ++it) {
      if (it != metadata.begin()) h += ',';
      h += json_string(it->first, "metadata key") + ':' + json_string(it->second, "metadata value");
    }
    h += '}';
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    check_writable(name, t);
    if (h.size() > 1) h += ',';
    std::string dtype = t.dtype() == DType::float32 ? "F32" : "I64";
    std::string shape = shape_str(t.shape());
    std::erase(shape, ' ');
    h += json_string(name, "tensor") + ":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(offset) + ',' + std::to_string(offset + t.nbytes()) + "]}";
    offset += t.nbytes();
  }
  h += '}';
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
}

std::array<std::byte, 8> length_prefix(uint64_t n) {
  std::array<std::byte, 8> bytes;
  std::memcpy(bytes.data(), &n, 8);
  return bytes;
}

}  // namespace

TensorMap parse_safetensors(std::span<const std::byte> bytes, const std::string& what_for_messages) {
  uint64_t n = header_length(bytes, bytes.size(), what_for_messages);
  std::string_view text(reinterpret_cast<const char*>(bytes.data()) + 8, n);
  auto data = bytes.subspan(8 + n);
  Header header = parse_header(text, data.size(), what_for_messages);
  return load_all(header, [&](uint64_t offset, size_t count, std::byte* dst) {
    std::memcpy(dst, data.data() + offset, count);  // in bounds: parse_entry checked end
  });
}

std::map<std::string, std::string> parse_safetensors_metadata(std::span<const std::byte> bytes,
                                                              const std::string& what_for_messages) {
  uint64_t n = header_length(bytes, bytes.size(), what_for_messages);
  std::string_view text(reinterpret_cast<const char*>(bytes.data()) + 8, n);
  return parse_header(text, bytes.size() - 8 - n, what_for_messages).metadata;
}

TensorMap read_safetensors(const std::string& path) {
  ReadableFile file(path);
  check_kind(file);
  MappedFile mapped(file);
  return parse_safetensors(mapped.bytes(), path);
}

TensorMap map_safetensors(const std::string& path) {
  ReadableFile file(path);
  check_kind(file);
  auto mapped = std::make_shared<MappedFile>(file);
  std::span<const std::byte> bytes = mapped->bytes();
  uint64_t n = header_length(bytes, bytes.size(), path);
  std::string_view text(reinterpret_cast<const char*>(bytes.data()) + 8, n);
  const uint64_t data_start = 8 + n;
  Header header = parse_header(text, bytes.size() - data_start, path);
  // One Storage for the whole mapping: it is unmapped when the last view goes. Its bytes
  // are read-only (PROT_READ): the views are for copying from.
  auto storage = std::make_shared<Storage>(const_cast<std::byte*>(bytes.data()), bytes.size(), Device::cpu(),
                                           [mapped](void*, size_t) mutable { mapped.reset(); });
  TensorMap tensors;
  for (const Entry& e : header.entries) {
    const uint64_t offset = data_start + e.begin;
    const bool same_layout = e.dtype->id == FileDType::F32 || e.dtype->id == FileDType::I64;
    if (same_layout && offset % e.dtype->itemsize == 0 && e.end > e.begin) {
      tensors.emplace(e.name, Tensor::from_storage(storage, e.shape, e.dtype->target, offset));
    } else {
      tensors.emplace(e.name, load_tensor(e, [&](uint64_t at, size_t count, std::byte* dst) {
                        std::memcpy(dst, bytes.data() + data_start + at, count);
                      }));
    }
  }
  return tensors;
}

std::map<std::string, std::string> read_safetensors_metadata(const std::string& path) {
  ReadableFile file(path);
  return read_file_header(file).header.metadata;
}

std::vector<std::byte> serialize_safetensors(const TensorMap& tensors,
                                             const std::map<std::string, std::string>& metadata) {
  std::string header = build_header(tensors, metadata);
  size_t total = 8 + header.size();
  for (const auto& [name, t] : tensors) total += t.nbytes();
  std::vector<std::byte> out;
  out.reserve(total);
  auto append = [&](const void* p, size_t n) {
    auto b = static_cast<const std::byte*>(p);
    out.insert(out.end(), b, b + n);
  };
  append(length_prefix(header.size()).data(), 8);
  append(header.data(), header.size());
  for (const auto& [name, t] : tensors)
    if (t.nbytes() > 0) append(t.raw_data(), t.nbytes());
  return out;
}

void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::string header = build_header(tensors, metadata);  // validates before touching the disk
  remove_stale_temporaries(path);
  std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  PublishedTemporary published(tmp);  // before it exists: a signal from here on removes it
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666));
  if (fd.get() < 0) {
    int err = errno;
    fail_errno(err, "cannot write " + path + ": cannot create " + tmp);
  }
  try {
    write_all(fd.get(), length_prefix(header.size()).data(), 8, tmp);
    write_all(fd.get(), header.data(), header.size(), tmp);
    for (const auto& [name, t] : tensors)
      if (t.nbytes() > 0) write_all(fd.get(), t.raw_data(), t.nbytes(), tmp);
    if (::fsync(fd.get()) != 0) {
      int err = errno;
      fail_errno(err, "cannot write " + tmp + ": fsync");
    }
    if (!fd.close()) {
      int err = errno;
      fail_errno(err, "cannot write " + tmp + ": close");
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      int err = errno;
      fail_errno(err, "cannot write " + path + ": rename from " + tmp);
    }
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  sync_parent_directory(path);
}

}  // namespace tandem

#include "runtime/data/csv_reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <string_view>

#include "runtime/data/line_reader.h"

namespace tandem {

namespace {

/// Where one ColumnSpec's values sit in a row, and the values read so far.
struct ColumnPlan {
  const ColumnSpec* spec;
  int64_t first;   // 0-based column of its first value
  int64_t width;   // numel(sample_shape)
  std::vector<float> floats;
  std::vector<int64_t> ints;
};

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool is_blank(std::string_view line) { return trim(line).empty(); }

/// "a:b" -> {a, b - a}; "a" -> {a, 1}. nullopt when malformed.
std::optional<std::pair<int64_t, int64_t>> parse_range(std::string_view text) {
  auto parse_index = [](std::string_view s, int64_t& out) {
    s = trim(s);
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && end == s.data() + s.size() && !s.empty() && out >= 0;
  };
  size_t colon = text.find(':');
  int64_t a = 0, b = 0;
  if (colon == std::string_view::npos) {
    if (!parse_index(text, a)) return std::nullopt;
    return std::pair{a, int64_t{1}};
  }
  if (!parse_index(text.substr(0, colon), a) || !parse_index(text.substr(colon + 1), b) || b <= a)
    return std::nullopt;
  return std::pair{a, b - a};
}

/// Lays the columns out: from spec.columns when given, else consecutively. Returns the
/// number of columns a row must hold (exactly when consecutive, at least otherwise).
int64_t plan_columns(const DataSpec& spec, const std::vector<ColumnSpec>& columns, std::vector<ColumnPlan>& plans) {
  const std::string& file = spec.path;
  for (const auto& [name, text] : spec.columns) {
    bool known = std::any_of(columns.begin(), columns.end(), [&n = name](const ColumnSpec& c) { return c.name == n; });
    if (!known) throw UserError(file + ": columns: '" + name + "' is neither an input nor a target");
  }
  int64_t next = 0, needed = 0;
  for (const ColumnSpec& c : columns) {
    int64_t width = shape_numel(c.sample_shape);
    int64_t first = next;
    if (!spec.columns.empty()) {
      auto it = spec.columns.find(c.name);
      if (it == spec.columns.end()) throw UserError(file + ": columns: no entry for '" + c.name + "'");
      auto range = parse_range(it->second);
      if (!range)
        throw UserError(file + ": columns: '" + c.name + "': '" + it->second +
                        "' is not a column index \"a\" or a range \"a:b\" with a < b");
      if (range->second != width)
        throw UserError(file + ": columns: '" + c.name + "' maps " + std::to_string(range->second) +
                        " columns ('" + it->second + "') but its sample shape " + shape_str(c.sample_shape) +
                        " holds " + std::to_string(width));
      first = range->first;
    }
    next = first + width;
    needed = std::max(needed, next);
    plans.push_back(ColumnPlan{&c, first, width, {}, {}});
  }
  return needed;
}

std::string where(const std::string& file, int64_t line, int64_t column) {
  return file + ":" + std::to_string(line) + ": column " + std::to_string(column) + ": ";
}

float parse_float(std::string_view cell, const std::string& file, int64_t line, int64_t column) {
  std::string_view s = trim(cell);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  float value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || end != s.data() + s.size() || ec == std::errc::invalid_argument)
    throw UserError(where(file, line, column) + "'" + std::string(trim(cell)) + "' is not a number");
  if (ec == std::errc::result_out_of_range)
    throw UserError(where(file, line, column) + "'" + std::string(trim(cell)) + "' is out of range for float32");
  // from_chars reads "nan" and "inf": a sample holding one trains to a NaN loss
  if (!std::isfinite(value))
    throw UserError(where(file, line, column) + "'" + std::string(trim(cell)) +
                    "' is not a finite number; training data must hold finite values (drop or fill in that row)");
  return value;
}

int64_t parse_int(std::string_view cell, const ColumnSpec& spec, const std::string& file, int64_t line,
                  int64_t column) {
  std::string_view s = trim(cell);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  int64_t value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || end != s.data() + s.size() || ec != std::errc()) {
    // Not a plain integer: "3.0" and "1e2" are integers written as floats; "3.5" is not.
    double d = 0;
    auto [dend, dec] = std::from_chars(s.data(), s.data() + s.size(), d);
    if (s.empty() || dend != s.data() + s.size() || dec == std::errc::invalid_argument)
      throw UserError(where(file, line, column) + "'" + std::string(trim(cell)) + "' is not a number");
    if (dec != std::errc() || !std::isfinite(d) || d != std::trunc(d) || d < -9.2233720368547758e18 ||
        d >= 9.2233720368547758e18)
      throw UserError(where(file, line, column) + spec.name + " '" + std::string(trim(cell)) +
                      "' is not an integer");
    value = static_cast<int64_t>(d);
  }
  if (spec.high && (value < 0 || value >= *spec.high) && value != spec.ignored)
    throw UserError(where(file, line, column) + spec.name + " " + std::to_string(value) + " is outside [0, " +
                    std::to_string(*spec.high) + ")");
  return value;
}

/// Room for about `rows` samples, so that a large file is not copied as its vectors grow.
void reserve(std::vector<ColumnPlan>& plans, int64_t rows) {
  int64_t width = 0;
  for (const ColumnPlan& p : plans) width += p.width;
  rows = std::min<int64_t>(rows, (int64_t{1} << 26) / width);  // a hint from a file header: bounded
  for (ColumnPlan& p : plans) {
    if (p.spec->dtype == DType::float32)
      p.floats.reserve(static_cast<size_t>(rows * p.width));
    else
      p.ints.reserve(static_cast<size_t>(rows * p.width));
  }
}

void split_cells(std::string_view line, std::vector<std::string_view>& cells) {
  cells.clear();
  size_t start = 0;
  for (;;) {
    size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) {
      cells.push_back(line.substr(start));
      return;
    }
    cells.push_back(line.substr(start, comma - start));
    start = comma + 1;
  }
}

/// Parses one row's cells onto the end of each column's values.
void append_row(const std::vector<std::string_view>& cells, const std::string& file, int64_t line,
                std::vector<ColumnPlan>& plans) {
  for (ColumnPlan& p : plans) {
    for (int64_t k = p.first; k < p.first + p.width; ++k) {
      if (p.spec->dtype == DType::float32)
        p.floats.push_back(parse_float(cells[k], file, line, k));
      else
        p.ints.push_back(parse_int(cells[k], *p.spec, file, line, k));
    }
  }
}

/// The values read, as a tensor [samples, *sample_shape].
Tensor to_tensor(const ColumnPlan& p, int64_t samples) {
  Shape shape{samples};
  shape.insert(shape.end(), p.spec->sample_shape.begin(), p.spec->sample_shape.end());
  Tensor t = Tensor::empty(std::move(shape), p.spec->dtype);
  if (p.spec->dtype == DType::float32)
    std::memcpy(t.raw_data(), p.floats.data(), p.floats.size() * sizeof(float));
  else
    std::memcpy(t.raw_data(), p.ints.data(), p.ints.size() * sizeof(int64_t));
  return t;
}

}  // namespace

TensorMap read_csv(const DataSpec& spec, const std::vector<ColumnSpec>& columns) {
  const std::string& file = spec.path;
  std::vector<ColumnPlan> plans;
  const int64_t needed = plan_columns(spec, columns, plans);
  const bool exact = spec.columns.empty();

  LineReader reader(file, ends_with(file, ".gz"));
  std::string_view line;
  if (spec.header && !reader.next(line)) throw UserError(file + ": no samples");

  std::vector<std::string_view> cells;
  int64_t samples = 0;
  int64_t blank_line = 0;  // the first blank line seen; an error if a row follows it
  while (reader.next(line)) {
    if (is_blank(line)) {
      if (blank_line == 0) blank_line = reader.line_number();
      continue;
    }
    if (blank_line != 0)
      throw UserError(file + ":" + std::to_string(blank_line) + ": blank line between samples");
    if (samples == 0) reserve(plans, reader.size_hint() / static_cast<int64_t>(line.size() + 1) + 1);
    split_cells(line, cells);
    auto found = static_cast<int64_t>(cells.size());
    if (exact ? found != needed : found < needed)
      throw UserError(file + ":" + std::to_string(reader.line_number()) + ": expected " +
                      (exact ? "" : "at least ") + std::to_string(needed) + " columns, found " +
                      std::to_string(found));
    append_row(cells, file, reader.line_number(), plans);
    ++samples;
  }
  if (samples == 0) throw UserError(file + ": no samples");

  TensorMap out;
  for (const ColumnPlan& p : plans) out.emplace(p.spec->name, to_tensor(p, samples));
  return out;
}

}  // namespace tandem

#include "runtime/data/csv_reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <map>
#include <string_view>

#include "runtime/data/line_reader.h"

namespace tandem {

namespace {

/// Where one ColumnSpec's values sit in a row, and the values read so far.
struct ColumnPlan {
  const ColumnSpec* spec;
  std::vector<int64_t> cells;  // 0-based column of each of its numel(sample_shape) values
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

std::vector<int64_t> consecutive(int64_t first, int64_t width) {
  std::vector<int64_t> cells(static_cast<size_t>(width));
  for (int64_t k = 0; k < width; ++k) cells[static_cast<size_t>(k)] = first + k;
  return cells;
}

/// Lays the columns out: from spec.columns when given, else consecutively.
void plan_columns(const DataSpec& spec, const std::vector<ColumnSpec>& columns, std::vector<ColumnPlan>& plans) {
  const std::string& file = spec.path;
  for (const auto& [name, text] : spec.columns) {
    bool known = std::any_of(columns.begin(), columns.end(), [&n = name](const ColumnSpec& c) { return c.name == n; });
    if (!known) throw UserError(file + ": columns: '" + name + "' is neither an input nor a target");
  }
  int64_t next = 0;
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
    plans.push_back(ColumnPlan{&c, consecutive(first, width), {}, {}});
  }
}

/// The header names a value of a column `name` of `width` values may have: the name itself
/// for one value; name_0, name.0, name[0] or name0 (pandas' and numpy's ways of numbering a
/// wide feature) for value 0 of several.
std::vector<std::string> header_names(const std::string& name, int64_t width, int64_t k) {
  if (width == 1) return {name};
  const std::string i = std::to_string(k);
  return {name + "_" + i, name + "." + i, name + "[" + i + "]", name + i};
}

/// Maps each column to the header cells that name its values. A column the header does not
/// name in full is refused, with the header's names that no column claims (a misspelling, a
/// column the model does not declare). Returns false, mapping nothing, when `may_skip` and
/// the header names none of the columns: a guessed header read in order (run --inputs).
bool plan_columns_by_header(const DataSpec& spec, std::string_view line, const std::vector<ColumnSpec>& columns,
                            std::vector<ColumnPlan>& plans, int64_t line_number, bool may_skip) {
  std::map<std::string, int64_t, std::less<>> index;  // header name -> column
  std::vector<std::string> names;
  size_t start = 0;
  for (;;) {
    size_t comma = line.find(',', start);
    std::string cell(trim(line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
    if (cell.size() >= 2 && cell.front() == '"' && cell.back() == '"') cell = cell.substr(1, cell.size() - 2);
    const auto column = static_cast<int64_t>(names.size());
    if (!cell.empty() && !index.emplace(cell, column).second)
      throw UserError(spec.path + ":" + std::to_string(line_number) + ": the header names '" + cell +
                      "' twice (columns " + std::to_string(index[cell]) + " and " + std::to_string(column) +
                      "); rename one");
    names.push_back(cell);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  std::vector<std::string> missing;
  std::vector<bool> claimed(names.size(), false);
  std::vector<ColumnPlan> mapped;
  for (const ColumnSpec& c : columns) {
    const int64_t width = shape_numel(c.sample_shape);
    ColumnPlan plan{&c, {}, {}, {}};
    // a wide column is numbered in one way throughout: the way its first value is named
    for (size_t form = 0; form < header_names(c.name, width, 0).size() && plan.cells.empty(); ++form) {
      std::vector<int64_t> cells;
      for (int64_t k = 0; k < width; ++k) {
        auto it = index.find(header_names(c.name, width, k)[form]);
        if (it == index.end()) break;
        cells.push_back(it->second);
      }
      if (static_cast<int64_t>(cells.size()) == width) plan.cells = std::move(cells);
    }
    if (plan.cells.empty()) {
      missing.push_back(width == 1 ? "'" + c.name + "'"
                                   : "'" + c.name + "' (" + std::to_string(width) + " columns, '" + c.name +
                                         "_0' to '" + c.name + "_" + std::to_string(width - 1) + "')");
      continue;
    }
    for (int64_t k : plan.cells) claimed[static_cast<size_t>(k)] = true;
    mapped.push_back(std::move(plan));
  }
  if (missing.empty()) {
    plans = std::move(mapped);
    return true;
  }
  if (may_skip && mapped.empty()) return false;
  std::string unknown;
  for (size_t k = 0; k < names.size(); ++k)
    if (!claimed[k]) unknown += (unknown.empty() ? "'" : ", '") + names[k] + "'";
  std::string missing_text;
  for (const std::string& m : missing) missing_text += (missing_text.empty() ? "" : ", ") + m;
  throw UserError(spec.path + ":" + std::to_string(line_number) + ": the header does not name " + missing_text +
                  (unknown.empty() ? "" : "; it has " + unknown + ", which no input or target is named") +
                  ". With header: true the columns are read by name: name them as the model's inputs and targets "
                  "(a column of several values as x_0, x_1, ...), or map them by position with columns: {name: "
                  "\"a:b\"} under train: data:");
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
    throw UserError(where(file, line, column) + out_of_range_text(spec, value));
  return value;
}

/// Room for about `rows` samples, so that a large file is not copied as its vectors grow.
void reserve(std::vector<ColumnPlan>& plans, int64_t rows) {
  int64_t width = 0;
  for (const ColumnPlan& p : plans) width += static_cast<int64_t>(p.cells.size());
  rows = std::min<int64_t>(rows, (int64_t{1} << 26) / width);  // a hint from a file header: bounded
  for (ColumnPlan& p : plans) {
    if (p.spec->dtype == DType::float32)
      p.floats.reserve(static_cast<size_t>(rows) * p.cells.size());
    else
      p.ints.reserve(static_cast<size_t>(rows) * p.cells.size());
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
    for (int64_t k : p.cells) {
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

/// "the inputs and targets take columns 0 to N-1 in order: x 0-63, label 64", for a message.
std::string layout_text(const std::vector<ColumnPlan>& plans) {
  std::string text;
  for (const ColumnPlan& p : plans) {
    text += (text.empty() ? "" : ", ") + p.spec->name + " " + std::to_string(p.cells.front());
    if (p.cells.size() > 1) text += "-" + std::to_string(p.cells.back());
  }
  return text;
}

/// A row with too few or too many cells: which input or target it is short of, and the ways
/// to say where the columns are.
[[noreturn]] void wrong_cell_count(const DataSpec& spec, int64_t line, int64_t found, int64_t needed, bool exact,
                                   bool by_header, const std::vector<ColumnPlan>& plans) {
  std::string text = spec.path + ":" + std::to_string(line) + ": expected " + (exact ? "" : "at least ") +
                     std::to_string(needed) + " columns, found " + std::to_string(found);
  std::string short_of;
  for (const ColumnPlan& p : plans)
    for (int64_t k : p.cells)
      if (k >= found && short_of.empty())
        short_of = "; no value for '" + p.spec->name + "'" +
                   (p.cells.size() > 1 ? " (its columns " + std::to_string(p.cells.front()) + "-" +
                                             std::to_string(p.cells.back()) + ")"
                                       : " (column " + std::to_string(k) + ")");
  text += short_of;
  if (by_header) throw UserError(text + " (the header names " + std::to_string(needed) + ")");
  if (spec.columns.empty())
    text += ". Without a header the inputs, then the targets, take the columns in order (" + layout_text(plans) +
            "): if the file's columns differ, give it a header line naming them and header: true, or map them "
            "with columns: {name: \"a:b\"} under train: data:";
  throw UserError(text);
}

/// Whether no cell of `cells` is a number and one is text: the first line of a file written
/// with a header (a row with one bad cell is that cell's error).
bool looks_like_header(const std::vector<std::string_view>& cells) {
  bool text = false;
  for (std::string_view cell : cells) {
    std::string_view s = trim(cell);
    if (s.empty()) continue;
    if (s.front() == '+') s.remove_prefix(1);
    double d = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
    if (ec != std::errc::invalid_argument && end == s.data() + s.size()) return false;
    text = true;
  }
  return text;
}

}  // namespace

TensorMap read_csv(const DataSpec& spec, const std::vector<ColumnSpec>& columns, bool header_may_skip) {
  const std::string& file = spec.path;
  std::vector<ColumnPlan> plans;
  plan_columns(spec, columns, plans);

  LineReader reader(file, ends_with(file, ".gz"));
  std::string_view line;
  if (spec.header && !reader.next(line)) throw UserError(file + ": no samples");
  // with a header and no columns: mapping, the header says which column is which
  bool by_header = false;
  int64_t header_cells = 0;
  if (spec.header && spec.columns.empty() && !is_blank(line)) {
    std::vector<ColumnPlan> named;
    by_header = plan_columns_by_header(spec, line, columns, named, reader.line_number(), header_may_skip);
    if (by_header) plans = std::move(named);
    header_cells = static_cast<int64_t>(std::count(line.begin(), line.end(), ',')) + 1;
  }
  int64_t needed = 0;
  for (const ColumnPlan& p : plans)
    for (int64_t k : p.cells) needed = std::max(needed, k + 1);
  if (by_header) needed = header_cells;
  // every row holds exactly the columns the layout takes, or the header's; a columns:
  // mapping may leave columns out
  const bool exact = by_header || spec.columns.empty();

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
    const bool first_row = samples == 0 && !spec.header;
    if (first_row && looks_like_header(cells))
      throw UserError(file + ":" + std::to_string(reader.line_number()) + ": '" + std::string(trim(line.substr(0, 60))) +
                      (line.size() > 60 ? "...'" : "'") + " is not numbers but looks like a header line: give " +
                      "header: true under train: data: to read the columns by these names, or delete the line");
    auto found = static_cast<int64_t>(cells.size());
    if (exact ? found != needed : found < needed)
      wrong_cell_count(spec, reader.line_number(), found, needed, exact, by_header, plans);
    append_row(cells, file, reader.line_number(), plans);
    ++samples;
  }
  if (samples == 0) throw UserError(file + ": no samples");

  TensorMap out;
  for (const ColumnPlan& p : plans) out.emplace(p.spec->name, to_tensor(p, samples));
  return out;
}

}  // namespace tandem

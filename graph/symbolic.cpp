#include "graph/symbolic.h"

#include <algorithm>

#include "core/error.h"

namespace tandem {
namespace {

int64_t checked_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) throw UserError("a tensor dimension is too large (integer overflow)");
  return r;
}

int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) throw UserError("a tensor dimension is too large (integer overflow)");
  return r;
}

}  // namespace

Dim::Dim(int64_t constant) {
  if (constant != 0) terms_[{}] = constant;
}

Dim Dim::symbol(const std::string& name) {
  Dim d;
  d.terms_[{name}] = 1;
  return d;
}

bool Dim::is_constant() const {
  return terms_.empty() || (terms_.size() == 1 && terms_.begin()->first.empty());
}

int64_t Dim::constant() const {
  TANDEM_ASSERT(is_constant(), "dimension " + str() + " is symbolic");
  return terms_.empty() ? 0 : terms_.begin()->second;
}

std::optional<std::string> Dim::as_symbol() const {
  if (terms_.size() != 1) return std::nullopt;
  const auto& [monomial, coeff] = *terms_.begin();
  if (monomial.size() != 1 || coeff != 1) return std::nullopt;
  return monomial[0];
}

std::vector<std::string> Dim::symbols() const {
  std::vector<std::string> names;
  for (const auto& [monomial, coeff] : terms_)
    for (const auto& s : monomial)
      if (std::find(names.begin(), names.end(), s) == names.end()) names.push_back(s);
  return names;
}

std::optional<int64_t> Dim::evaluate(const Bindings& bindings) const {
  int64_t total = 0;
  for (const auto& [monomial, coeff] : terms_) {
    int64_t term = coeff;
    for (const auto& s : monomial) {
      auto it = bindings.find(s);
      if (it == bindings.end()) return std::nullopt;
      term = checked_mul(term, it->second);
    }
    total = checked_add(total, term);
  }
  return total;
}

Dim Dim::operator+(const Dim& other) const {
  Dim r = *this;
  for (const auto& [monomial, coeff] : other.terms_) {
    int64_t c = checked_add(r.terms_[monomial], coeff);
    if (c == 0) r.terms_.erase(monomial);
    else r.terms_[monomial] = c;
  }
  return r;
}

Dim Dim::operator*(const Dim& other) const {
  Dim r;
  for (const auto& [ma, ca] : terms_)
    for (const auto& [mb, cb] : other.terms_) {
      std::vector<std::string> m = ma;
      m.insert(m.end(), mb.begin(), mb.end());
      std::sort(m.begin(), m.end());
      int64_t c = checked_add(r.terms_[m], checked_mul(ca, cb));
      if (c == 0) r.terms_.erase(m);
      else r.terms_[m] = c;
    }
  return r;
}

std::optional<Dim> Dim::divided_by(const Dim& divisor) const {
  if (divisor.terms_.size() != 1) return *this == divisor ? std::optional<Dim>(Dim(1)) : std::nullopt;
  const auto& [dm, dc] = *divisor.terms_.begin();
  Dim r;
  for (const auto& [monomial, coeff] : terms_) {
    if (coeff % dc != 0) return std::nullopt;
    std::vector<std::string> m = monomial;
    for (const auto& s : dm) {
      auto it = std::find(m.begin(), m.end(), s);
      if (it == m.end()) return std::nullopt;
      m.erase(it);
    }
    r.terms_[m] = coeff / dc;
  }
  return r;
}

std::string Dim::str() const {
  if (terms_.empty()) return "0";
  std::string s;
  // constants last reads more naturally: "batch + 1"
  std::vector<std::pair<std::vector<std::string>, int64_t>> ordered(terms_.begin(), terms_.end());
  std::stable_partition(ordered.begin(), ordered.end(), [](const auto& t) { return !t.first.empty(); });
  for (const auto& [monomial, coeff] : ordered) {
    if (!s.empty()) s += coeff < 0 ? " - " : " + ";
    else if (coeff < 0) s += "-";
    int64_t magnitude = coeff < 0 ? -coeff : coeff;
    std::string term;
    if (magnitude != 1 || monomial.empty()) term = std::to_string(magnitude);
    for (const auto& sym : monomial) term += (term.empty() ? "" : "*") + sym;
    s += term;
  }
  return s;
}

std::string sym_shape_str(const SymShape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + shape[i].str();
  return s + "]";
}

Dim sym_numel(const SymShape& shape) {
  Dim n(1);
  for (const Dim& d : shape) n = n * d;
  return n;
}

}  // namespace tandem

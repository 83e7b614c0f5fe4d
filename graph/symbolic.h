// Symbolic dimensions. A graph input's shape may name symbols (`batch`, `seq`) that are
// fixed only when the model runs; shapes inferred from them are polynomials in those
// symbols with integer coefficients: `batch`, `8*batch`, `batch*seq`, `batch + tags`.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tandem {

/// Values of the symbols for one run: {"batch": 32}.
using Bindings = std::map<std::string, int64_t>;

/// A polynomial over symbols with integer coefficients; a plain size is a constant.
/// Throws UserError when a coefficient would overflow.
class Dim {
 public:
  Dim() = default;
  Dim(int64_t constant);  // NOLINT: a constant converts implicitly
  static Dim symbol(const std::string& name);

  bool is_constant() const;
  /// The constant value; only valid when is_constant().
  int64_t constant() const;
  /// The one symbol this is exactly (coefficient 1), if it is one.
  std::optional<std::string> as_symbol() const;
  std::vector<std::string> symbols() const;
  /// Value under `bindings`; nullopt if a symbol is unbound.
  std::optional<int64_t> evaluate(const Bindings& bindings) const;

  Dim operator+(const Dim& other) const;
  Dim operator*(const Dim& other) const;
  /// Exact division: nullopt unless every term divides.
  std::optional<Dim> divided_by(const Dim& divisor) const;
  friend bool operator==(const Dim&, const Dim&) = default;

  std::string str() const;

 private:
  // monomial (sorted symbol names, repeated for powers) -> coefficient; no zero entries
  std::map<std::vector<std::string>, int64_t> terms_;
};

using SymShape = std::vector<Dim>;

std::string sym_shape_str(const SymShape& shape);
/// The product of all dims.
Dim sym_numel(const SymShape& shape);

}  // namespace tandem

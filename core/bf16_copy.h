// Bf16Copy: a float32 weight's bf16 copy, kept with the weight's storage.
//
// Note [a weight's bf16 copy]: a layer in bf16 on the cpu reads its weight in bf16. In
// training the weight changes at every step, so its first forward after each step cast
// the whole fp32 master again: one more pass over every weight (on the 4 x 1024 MLP, a
// fifth of a batch-1 step). The host's optimizer already reads and writes every master
// value, so it writes each updated value's bf16 rounding beside it, into this copy (as
// apex keeps fp32 master weights and the model's half copies), and the forward reads the
// copy as it is. Rounded as everything else Tandem rounds to bf16 (core/bfloat16.h), so a
// copy the optimizer wrote and one a kernel cast hold the same bits.
//
// Whether a copy holds the master's values is told by the params version (the runtime's
// count of changes to the weights, which it bumps after every update):
// - a kernel that casts the master into the copy stamps it with the version it cast;
// - the optimizer that rewrote it marks it rewritten, and Model::parameters_changed, which
//   bumps the version right after the update, stamps the rewritten copies with the new
//   version. Any other change to a weight bumps the version without stamping its copy, so
//   the next kernel casts it again.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tandem {

class Bf16Copy {
 public:
  /// Room for `n` bf16 values, 64-byte aligned, not yet holding any version.
  explicit Bf16Copy(size_t n);
  ~Bf16Copy();
  Bf16Copy(const Bf16Copy&) = delete;
  Bf16Copy& operator=(const Bf16Copy&) = delete;

  uint16_t* data() const { return data_; }
  size_t size() const { return n_; }

  /// Whether it holds the master's values of params version `version`.
  bool current(uint64_t version) const { return state_ == State::stamped && version_ == version; }
  /// A kernel cast the master of `version` into it.
  void made_at(uint64_t version) {
    state_ = State::stamped;
    version_ = version;
  }
  /// The optimizer wrote the rounding of every updated master value into it.
  void rewritten() { state_ = State::rewritten; }
  /// The params version became `version` after an update: a copy rewritten by that update
  /// holds it.
  void version_bumped(uint64_t version) {
    if (state_ == State::rewritten) made_at(version);
  }

 private:
  enum class State { none, stamped, rewritten };
  uint16_t* data_;
  size_t n_;
  State state_ = State::none;
  uint64_t version_ = 0;
};

}  // namespace tandem

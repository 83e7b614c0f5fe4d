// Sets an environment variable for one scope, then puts back what was there (tests that
// try TANDEM_SIM_GPUS and the like without leaking them into the next test).
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace tandem::testing {

class ScopedEnv {
 public:
  /// `value` null: unset for the scope.
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace tandem::testing

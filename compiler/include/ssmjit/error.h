// The one exception type of ssmjit (header-only: every layer throws it). Messages name the
// argument, what was expected and what came.
#pragma once
#include <stdexcept>
#include <string>

namespace ssmjit {

class Error : public std::runtime_error {
 public:
  enum class Kind { InvalidArgument, Compile, Cuda, Unavailable, Internal };
  Error(Kind kind, const std::string& msg) : std::runtime_error(msg), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

}  // namespace ssmjit

// A shared library opened with dlopen and its entry points resolved by name into typed function
// pointers. Every library the project loads at run time (libcuda, NVRTC, cuBLASLt, NCCL) comes
// through it: their headers supply the types only and nothing links against them, so a machine
// without one still runs everything that does not need it. The handle is never closed: the
// resolved pointers serve for the life of the process.
#pragma once
#include <initializer_list>
#include <string>
#include <vector>

namespace ssmjit {

class DynamicLibrary {
 public:
  // The first of `candidates` that dlopen accepts (RTLD_NOW | RTLD_LOCAL); none may.
  explicit DynamicLibrary(const std::vector<std::string>& candidates);

  bool loaded() const { return handle_ != nullptr; }
  // The candidate it opened.
  const std::string& name() const { return name_; }
  // "\n  <candidate>: <dlopen's reason>" for each candidate that failed.
  const std::string& tried() const { return tried_; }
  // dlopen's reason for the last candidate that failed.
  const std::string& lastError() const { return lastError_; }

  // Sets `fn` to the first of `symbols` the library exports and returns true; else leaves `fn`,
  // adds the first of `symbols` to missing() and returns false.
  template <class Fn>
  bool resolve(Fn& fn, std::initializer_list<const char*> symbols) {
    void* p = find(symbols);
    if (p) fn = reinterpret_cast<Fn>(p);
    return p != nullptr;
  }
  // The entry points resolve() did not find, "a, b"; empty when it found every one.
  const std::string& missing() const { return missing_; }

  // Why the library cannot serve, empty when it can: "<what> not found (<howToFind>); tried:
  // <tried()>" when nothing loaded, "<name()> lacks the entry points <missing()><needs>" when
  // resolve() missed any.
  std::string whyUnusable(const std::string& what, const std::string& howToFind, const std::string& needs = "") const;

 private:
  void* find(std::initializer_list<const char*> symbols);

  void* handle_ = nullptr;
  std::string name_, tried_, lastError_, missing_;
};

}  // namespace ssmjit

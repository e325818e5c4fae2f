// The entry-point table of a library loaded at run time (runtime/Driver.h, runtime/Cublaslt.h,
// runtime/parallel/Nccl.h), loaded once on construction (a function-local static: once per
// process, on first use), with the reason when it could not be. Internal to the runtime.
#pragma once
#include <string>

#include "ssmjit/error.h"

namespace ssmjit {

template <class Api>
class LoadedApi {
 public:
  // Runs `load(Api*, std::string* why)`, which returns whether the library can serve.
  template <class Load>
  LoadedApi(const char* library, Load load) : library_(library) {
    ok_ = load(&api_, &why_);
  }

  // True if it loaded; else false and the reason in *why.
  bool available(std::string* why) const {
    if (!ok_ && why) *why = why_;
    return ok_;
  }
  // The table; throws ssmjit::Error(Unavailable) "<library> unavailable: <reason>" if it did not load.
  const Api& get() const {
    if (!ok_) throw Error(Error::Kind::Unavailable, std::string(library_) + " unavailable: " + why_);
    return api_;
  }
  // The table as far as loading got, loaded or not: the entry points it did not reach are null.
  const Api& partial() const { return api_; }

 private:
  const char* library_;
  Api api_{};
  std::string why_;
  bool ok_ = false;
};

}  // namespace ssmjit

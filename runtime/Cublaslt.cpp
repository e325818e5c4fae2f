// cuBLASLt through dlopen; see Cublaslt.h.
#include "runtime/Cublaslt.h"

#include <dlfcn.h>

#include <mutex>
#include <type_traits>

#include "compiler/ToolkitLibrary.h"
#include "ssmjit/error.h"

namespace ssmjit::cublaslt {

bool detail::tryLoad(std::initializer_list<const char*> names, Api* a, std::string* why) {
  std::string opened, tried;
  void* lib = openToolkitLibrary(names, &opened, &tried);
  if (!lib) {
    *why = "libcublasLt not found (set CUDA_HOME or LD_LIBRARY_PATH); tried:" + tried;
    return false;
  }
  std::string missing;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    if (!fn) missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  sym(a->create, "cublasLtCreate");
  sym(a->getStatusName, "cublasLtGetStatusName");
  sym(a->getStatusString, "cublasLtGetStatusString");
  sym(a->matmulDescCreate, "cublasLtMatmulDescCreate");
  sym(a->matmulDescDestroy, "cublasLtMatmulDescDestroy");
  sym(a->matmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
  sym(a->matrixLayoutCreate, "cublasLtMatrixLayoutCreate");
  sym(a->matrixLayoutDestroy, "cublasLtMatrixLayoutDestroy");
  sym(a->preferenceCreate, "cublasLtMatmulPreferenceCreate");
  sym(a->preferenceDestroy, "cublasLtMatmulPreferenceDestroy");
  sym(a->preferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
  sym(a->algoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
  sym(a->matmul, "cublasLtMatmul");
  if (!missing.empty()) {
    *why = opened + " lacks the entry points " + missing;
    return false;
  }
  // The library stays open for the life of the process.
  return true;
}

namespace {

struct State {
  Api api{};
  bool ok = false;
  std::string why;
};

const State& state() {
  static State s;
  static std::once_flag once;
  std::call_once(once, [] { s.ok = detail::tryLoad({"libcublasLt.so.13", "libcublasLt.so"}, &s.api, &s.why); });
  return s;
}

}  // namespace

bool available(std::string* why) {
  const State& s = state();
  if (!s.ok && why) *why = s.why;
  return s.ok;
}

const Api& api() {
  const State& s = state();
  if (!s.ok) throw Error(Error::Kind::Unavailable, "cuBLASLt unavailable: " + s.why);
  return s.api;
}

void check(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  const Api& a = api();
  const char* name = a.getStatusName(st);
  const char* msg = a.getStatusString(st);
  std::string text = std::string(what) + ": " + (name ? name : "cublasStatus_t " + std::to_string(static_cast<int>(st)));
  if (msg) text += std::string(" (") + msg + ")";
  throw Error(Error::Kind::Cuda, text);
}

}  // namespace ssmjit::cublaslt

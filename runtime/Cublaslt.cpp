// cuBLASLt through dlopen; see Cublaslt.h.
#include "runtime/Cublaslt.h"

#include "compiler/DynamicLibrary.h"
#include "compiler/ToolkitLibrary.h"
#include "runtime/LoadedApi.h"
#include "ssmjit/error.h"

namespace ssmjit::cublaslt {

bool detail::tryLoad(std::initializer_list<const char*> names, Api* a, std::string* why) {
  DynamicLibrary lib(toolkitLibraryCandidates(names));
  lib.resolve(a->create, {"cublasLtCreate"});
  lib.resolve(a->getStatusName, {"cublasLtGetStatusName"});
  lib.resolve(a->getStatusString, {"cublasLtGetStatusString"});
  lib.resolve(a->matmulDescCreate, {"cublasLtMatmulDescCreate"});
  lib.resolve(a->matmulDescDestroy, {"cublasLtMatmulDescDestroy"});
  lib.resolve(a->matmulDescSetAttribute, {"cublasLtMatmulDescSetAttribute"});
  lib.resolve(a->matrixLayoutCreate, {"cublasLtMatrixLayoutCreate"});
  lib.resolve(a->matrixLayoutDestroy, {"cublasLtMatrixLayoutDestroy"});
  lib.resolve(a->preferenceCreate, {"cublasLtMatmulPreferenceCreate"});
  lib.resolve(a->preferenceDestroy, {"cublasLtMatmulPreferenceDestroy"});
  lib.resolve(a->preferenceSetAttribute, {"cublasLtMatmulPreferenceSetAttribute"});
  lib.resolve(a->algoGetHeuristic, {"cublasLtMatmulAlgoGetHeuristic"});
  lib.resolve(a->matmul, {"cublasLtMatmul"});
  *why = lib.whyUnusable("libcublasLt", "set CUDA_HOME or LD_LIBRARY_PATH");
  return why->empty();
}

namespace {

const LoadedApi<Api>& loaded() {
  static const LoadedApi<Api> s("cuBLASLt", [](Api* a, std::string* why) { return detail::tryLoad({"libcublasLt.so.13", "libcublasLt.so"}, a, why); });
  return s;
}

}  // namespace

bool available(std::string* why) { return loaded().available(why); }

const Api& api() { return loaded().get(); }

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

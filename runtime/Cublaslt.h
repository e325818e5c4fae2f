// cuBLASLt, loaded at run time with dlopen("libcublasLt.so.13", then "libcublasLt.so"; then the
// toolkit's directories, compiler/ToolkitLibrary.h) in the manner of the driver (Driver.h):
// cublasLt.h supplies the types only and nothing links against libcublasLt, so everything builds
// and the CPU tests run where it is missing. Internal to the runtime.
#pragma once
#include <cublasLt.h>

#include <initializer_list>
#include <string>

namespace ssmjit::cublaslt {

// The entry points the linear op uses, resolved once.
struct Api {
  decltype(&::cublasLtCreate) create = nullptr;
  decltype(&::cublasLtGetStatusName) getStatusName = nullptr;
  decltype(&::cublasLtGetStatusString) getStatusString = nullptr;
  decltype(&::cublasLtMatmulDescCreate) matmulDescCreate = nullptr;
  decltype(&::cublasLtMatmulDescDestroy) matmulDescDestroy = nullptr;
  decltype(&::cublasLtMatmulDescSetAttribute) matmulDescSetAttribute = nullptr;
  decltype(&::cublasLtMatrixLayoutCreate) matrixLayoutCreate = nullptr;
  decltype(&::cublasLtMatrixLayoutDestroy) matrixLayoutDestroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceCreate) preferenceCreate = nullptr;
  decltype(&::cublasLtMatmulPreferenceDestroy) preferenceDestroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) preferenceSetAttribute = nullptr;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) algoGetHeuristic = nullptr;
  decltype(&::cublasLtMatmul) matmul = nullptr;
};

// True if the library loads and exports every entry point above; else false and the reason in
// *why (every name tried with dlopen's message, or the missing entry points).
bool available(std::string* why = nullptr);
// The API; throws ssmjit::Error(Unavailable) "cuBLASLt unavailable: <reason>" if !available().
const Api& api();
// Throws ssmjit::Error(Cuda) "<what>: CUBLAS_STATUS_X (message)" unless s == CUBLAS_STATUS_SUCCESS.
void check(cublasStatus_t s, const char* what);

namespace detail {
// One load attempt from `names` (as toolkitLibraryCandidates takes them), uncached: the process-wide
// load uses {"libcublasLt.so.13", "libcublasLt.so"}; tests pass a name that does not exist.
// Returns whether it loaded; the reason in *why when not.
bool tryLoad(std::initializer_list<const char*> names, Api* api, std::string* why);
}  // namespace detail

}  // namespace ssmjit::cublaslt

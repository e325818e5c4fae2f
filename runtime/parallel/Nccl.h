// NCCL, loaded at run time with dlopen("libnccl.so.2", then "libnccl.so"; then the toolkit's
// directories, compiler/ToolkitLibrary.h) in the manner of cuBLASLt (runtime/Cublaslt.h): nccl.h
// supplies the types only and nothing links against libnccl, so everything builds and the CPU
// tests run where it is missing. Internal to the runtime; the public face is ssmjit/parallel.h.
#pragma once
#include <nccl.h>

#include <initializer_list>
#include <string>

namespace ssmjit::nccl {

// The entry points the communicator uses, resolved once.
struct Api {
  decltype(&::ncclGetVersion) getVersion = nullptr;
  decltype(&::ncclGetUniqueId) getUniqueId = nullptr;
  decltype(&::ncclCommInitRankConfig) commInitRankConfig = nullptr;
  decltype(&::ncclCommDestroy) commDestroy = nullptr;
  decltype(&::ncclCommAbort) commAbort = nullptr;
  decltype(&::ncclCommGetAsyncError) commGetAsyncError = nullptr;
  decltype(&::ncclGetErrorString) getErrorString = nullptr;
  decltype(&::ncclGetLastError) getLastError = nullptr;
  decltype(&::ncclAllReduce) allReduce = nullptr;
  decltype(&::ncclReduceScatter) reduceScatter = nullptr;
  decltype(&::ncclAllGather) allGather = nullptr;
  decltype(&::ncclSend) send = nullptr;
  decltype(&::ncclRecv) recv = nullptr;
  decltype(&::ncclGroupStart) groupStart = nullptr;
  decltype(&::ncclGroupEnd) groupEnd = nullptr;
};

// True if the library loads and exports every entry point above; else false and the reason in
// *why (every name tried with dlopen's message, or the missing entry points).
bool available(std::string* why = nullptr);
// The API; throws ssmjit::Error(Unavailable) "NCCL unavailable: <reason>" if !available().
const Api& api();
// "ncclUnhandledCudaError (message)" for a result, with NCCL's last error text where it has one.
std::string describe(ncclResult_t r, ncclComm_t comm = nullptr);
// ncclCommAbort(comm) on a thread of its own, waited for at most `seconds`: true if it returned.
// NCCL's abort can block for good (on collectives a CUDA graph holds when a peer has died); then
// the thread is left to it, the communicator abandoned, and the caller goes on.
bool abortWithin(ncclComm_t comm, double seconds);
// True once abortWithin has returned false in this process.
bool anyAbandoned();

namespace detail {
// One load attempt from `names` (as toolkitLibraryCandidates takes them), uncached: the process-wide
// load uses {"libnccl.so.2", "libnccl.so"}; tests pass a name that does not exist.
bool tryLoad(std::initializer_list<const char*> names, Api* api, std::string* why);
}  // namespace detail

}  // namespace ssmjit::nccl

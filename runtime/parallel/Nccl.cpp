// NCCL through dlopen; see Nccl.h.
#include "runtime/parallel/Nccl.h"

#include <dlfcn.h>

#include <mutex>
#include <type_traits>

#include "compiler/ToolkitLibrary.h"
#include "ssmjit/error.h"

namespace ssmjit::nccl {

bool detail::tryLoad(std::initializer_list<const char*> names, Api* a, std::string* why) {
  std::string opened, tried;
  void* lib = openToolkitLibrary(names, &opened, &tried);
  if (!lib) {
    *why = "libnccl not found (install NCCL, or set CUDA_HOME or LD_LIBRARY_PATH); tried:" + tried;
    return false;
  }
  std::string missing;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    if (!fn) missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  sym(a->getVersion, "ncclGetVersion");
  sym(a->getUniqueId, "ncclGetUniqueId");
  sym(a->commInitRankConfig, "ncclCommInitRankConfig");
  sym(a->commDestroy, "ncclCommDestroy");
  sym(a->commAbort, "ncclCommAbort");
  sym(a->commGetAsyncError, "ncclCommGetAsyncError");
  sym(a->getErrorString, "ncclGetErrorString");
  sym(a->getLastError, "ncclGetLastError");
  sym(a->allReduce, "ncclAllReduce");
  sym(a->reduceScatter, "ncclReduceScatter");
  sym(a->allGather, "ncclAllGather");
  sym(a->send, "ncclSend");
  sym(a->recv, "ncclRecv");
  sym(a->groupStart, "ncclGroupStart");
  sym(a->groupEnd, "ncclGroupEnd");
  if (!missing.empty()) {
    *why = opened + " lacks the entry points " + missing + " (NCCL 2.14 or later is needed)";
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
  std::call_once(once, [] { s.ok = detail::tryLoad({"libnccl.so.2", "libnccl.so"}, &s.api, &s.why); });
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
  if (!s.ok) throw Error(Error::Kind::Unavailable, "NCCL unavailable: " + s.why);
  return s.api;
}

std::string describe(ncclResult_t r, ncclComm_t comm) {
  const Api& a = api();
  const char* s = a.getErrorString(r);
  std::string text = "ncclResult " + std::to_string(static_cast<int>(r)) + " (" + (s ? s : "unknown") + ")";
  const char* last = a.getLastError(comm);
  if (last && *last) text += ": " + std::string(last);
  return text;
}

}  // namespace ssmjit::nccl

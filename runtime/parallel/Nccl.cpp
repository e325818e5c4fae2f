// NCCL through dlopen; see Nccl.h.
#include "runtime/parallel/Nccl.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "compiler/DynamicLibrary.h"
#include "compiler/ToolkitLibrary.h"
#include "runtime/LoadedApi.h"
#include "ssmjit/error.h"

namespace ssmjit::nccl {

bool detail::tryLoad(std::initializer_list<const char*> names, Api* a, std::string* why) {
  DynamicLibrary lib(toolkitLibraryCandidates(names));
  lib.resolve(a->getVersion, {"ncclGetVersion"});
  lib.resolve(a->getUniqueId, {"ncclGetUniqueId"});
  lib.resolve(a->commInitRankConfig, {"ncclCommInitRankConfig"});
  lib.resolve(a->commDestroy, {"ncclCommDestroy"});
  lib.resolve(a->commAbort, {"ncclCommAbort"});
  lib.resolve(a->commGetAsyncError, {"ncclCommGetAsyncError"});
  lib.resolve(a->getErrorString, {"ncclGetErrorString"});
  lib.resolve(a->getLastError, {"ncclGetLastError"});
  lib.resolve(a->allReduce, {"ncclAllReduce"});
  lib.resolve(a->reduceScatter, {"ncclReduceScatter"});
  lib.resolve(a->allGather, {"ncclAllGather"});
  lib.resolve(a->send, {"ncclSend"});
  lib.resolve(a->recv, {"ncclRecv"});
  lib.resolve(a->groupStart, {"ncclGroupStart"});
  lib.resolve(a->groupEnd, {"ncclGroupEnd"});
  *why = lib.whyUnusable("libnccl", "install NCCL, or set CUDA_HOME or LD_LIBRARY_PATH", " (NCCL 2.14 or later is needed)");
  return why->empty();
}

namespace {

const LoadedApi<Api>& loaded() {
  static const LoadedApi<Api> s("NCCL", [](Api* a, std::string* why) { return detail::tryLoad({"libnccl.so.2", "libnccl.so"}, a, why); });
  return s;
}

}  // namespace

bool available(std::string* why) { return loaded().available(why); }

const Api& api() { return loaded().get(); }

std::string describe(ncclResult_t r, ncclComm_t comm) {
  const Api& a = api();
  const char* s = a.getErrorString(r);
  std::string text = "ncclResult " + std::to_string(static_cast<int>(r)) + " (" + (s ? s : "unknown") + ")";
  const char* last = a.getLastError(comm);
  if (last && *last) text += ": " + std::string(last);
  return text;
}

namespace {
std::atomic<bool> abandoned{false};
}  // namespace

bool anyAbandoned() { return abandoned.load(); }

bool abortWithin(ncclComm_t comm, double seconds) {
  struct Done {
    std::mutex m;
    std::condition_variable cv;
    bool returned = false;
  };
  auto done = std::make_shared<Done>();  // shared: an abandoned thread outlives this call
  std::thread([comm, done, abort = api().commAbort] {
    abort(comm);
    std::lock_guard<std::mutex> lock(done->m);
    done->returned = true;
    done->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(done->m);
  const bool returned = done->cv.wait_for(lock, std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)),
                                          [&] { return done->returned; });
  if (!returned) abandoned = true;
  return returned;
}

}  // namespace ssmjit::nccl

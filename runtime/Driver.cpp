// The CUDA Driver API through dlopen("libcuda.so.1"). cuda.h maps many entry points to versioned
// symbols with macros (cuMemAlloc -> cuMemAlloc_v2, cuGraphInstantiate ->
// cuGraphInstantiateWithFlags, ...); the Api members are spelled with the same macros, so
// stringizing a member after macro expansion gives exactly the symbol whose signature the member
// has. That keeps this file in step with the header instead of a hand-kept list of "_v2" names.
#include "runtime/Driver.h"

#include <array>
#include <atomic>
#include <mutex>
#include <string>

#include "compiler/DynamicLibrary.h"
#include "runtime/LoadedApi.h"
#include "ssmjit/error.h"

#define SSMJIT_STR2(x) #x
#define SSMJIT_STR(x) SSMJIT_STR2(x)

namespace ssmjit::driver {
namespace {

// Loads libcuda's entry points, then checks that cuInit succeeds and a device is present.
bool load(Api* api, std::string* why) {
  DynamicLibrary lib({"libcuda.so.1"});
  if (!lib.loaded()) {
    *why = "libcuda.so.1 not found: " + lib.lastError();
    return false;
  }
  Api& a = *api;
#define SSMJIT_SYM(member) lib.resolve(a.member, {SSMJIT_STR(member)})
  SSMJIT_SYM(cuInit);
  SSMJIT_SYM(cuGetErrorName);
  SSMJIT_SYM(cuGetErrorString);
  SSMJIT_SYM(cuDeviceGetCount);
  SSMJIT_SYM(cuDeviceGet);
  SSMJIT_SYM(cuDeviceGetAttribute);
  SSMJIT_SYM(cuDeviceGetName);
  SSMJIT_SYM(cuDevicePrimaryCtxRetain);
  SSMJIT_SYM(cuCtxGetCurrent);
  SSMJIT_SYM(cuCtxSetCurrent);
  SSMJIT_SYM(cuCtxGetDevice);
  SSMJIT_SYM(cuCtxSynchronize);
  SSMJIT_SYM(cuCtxGetStreamPriorityRange);
  SSMJIT_SYM(cuModuleLoadDataEx);
  SSMJIT_SYM(cuModuleUnload);
  SSMJIT_SYM(cuModuleGetFunction);
  SSMJIT_SYM(cuFuncGetAttribute);
  SSMJIT_SYM(cuFuncSetAttribute);
  SSMJIT_SYM(cuLaunchKernel);
  SSMJIT_SYM(cuMemAlloc);
  SSMJIT_SYM(cuMemFree);
  SSMJIT_SYM(cuMemcpyHtoD);
  SSMJIT_SYM(cuMemcpyDtoH);
  SSMJIT_SYM(cuMemcpyDtoDAsync);
  SSMJIT_SYM(cuMemcpyHtoDAsync);
  SSMJIT_SYM(cuMemcpyDtoHAsync);
  SSMJIT_SYM(cuMemsetD8Async);
  SSMJIT_SYM(cuMemsetD16Async);
  SSMJIT_SYM(cuMemsetD32Async);
  SSMJIT_SYM(cuStreamCreateWithPriority);
  SSMJIT_SYM(cuStreamDestroy);
  SSMJIT_SYM(cuStreamSynchronize);
  SSMJIT_SYM(cuStreamQuery);
  SSMJIT_SYM(cuStreamWaitEvent);
  SSMJIT_SYM(cuStreamBeginCapture);
  SSMJIT_SYM(cuStreamEndCapture);
  SSMJIT_SYM(cuStreamIsCapturing);
  SSMJIT_SYM(cuGraphInstantiate);
  SSMJIT_SYM(cuGraphLaunch);
  SSMJIT_SYM(cuGraphExecDestroy);
  SSMJIT_SYM(cuGraphDestroy);
  SSMJIT_SYM(cuEventCreate);
  SSMJIT_SYM(cuEventDestroy);
  SSMJIT_SYM(cuEventRecord);
  SSMJIT_SYM(cuEventSynchronize);
  SSMJIT_SYM(cuEventQuery);
#undef SSMJIT_SYM
  // CUDA 13 headers name cuEventElapsedTime_v2 (drivers >= 12.8); older drivers export only the
  // unversioned symbol, whose signature is the same.
  lib.resolve(a.cuEventElapsedTime, {SSMJIT_STR(cuEventElapsedTime), "cuEventElapsedTime"});
  if (!lib.missing().empty()) {
    *why = "libcuda.so.1 lacks " + lib.missing() + " (driver too old for this build's CUDA headers)";
    return false;
  }
  CUresult r = a.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    a.cuGetErrorName(r, &name);
    *why = std::string("cuInit failed: ") + (name ? name : "unknown error") +
           (r == CUDA_ERROR_NO_DEVICE ? " (no CUDA device)" : "");
    return false;
  }
  int count = 0;
  r = a.cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS || count <= 0) {
    *why = "no CUDA device";
    return false;
  }
  return true;
}

const LoadedApi<Api>& loaded() {
  static const LoadedApi<Api> s("CUDA driver", load);
  return s;
}

// The retained primary context of device 0, shared by every thread that had no context current.
CUcontext primaryContext() {
  static std::once_flag once;
  static CUcontext ctx = nullptr;
  static std::string error;
  std::call_once(once, [] {
    const Api& a = api();
    try {
      CUdevice dev = 0;
      check(a.cuDeviceGet(&dev, 0), "cuDeviceGet(0)");
      check(a.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain(device 0)");
    } catch (const Error& e) {
      error = e.what();
    }
  });
  if (!ctx) throw Error(Error::Kind::Cuda, error);
  return ctx;
}

// Compute capability (major * 10 + minor) per device ordinal; 0 until first asked.
std::array<std::atomic<int>, 64> gCapability{};

int capabilityOf(CUdevice dev) {
  const bool cacheable = dev >= 0 && dev < static_cast<int>(gCapability.size());
  if (cacheable) {
    if (int cc = gCapability[dev].load(std::memory_order_relaxed)) return cc;
  }
  const Api& a = api();
  int major = 0, minor = 0;
  check(a.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
        "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)");
  check(a.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
        "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)");
  int cc = major * 10 + minor;
  if (cacheable) gCapability[dev].store(cc, std::memory_order_relaxed);
  return cc;
}

CUdevice currentDevice() {
  ensureContext();
  CUdevice dev = 0;
  check(api().cuCtxGetDevice(&dev), "cuCtxGetDevice");
  return dev;
}

}  // namespace

bool available(std::string* why) { return loaded().available(why); }

const Api& api() { return loaded().get(); }

void check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const Api& a = loaded().partial();
  const char* name = nullptr;
  const char* msg = nullptr;
  if (a.cuGetErrorName) a.cuGetErrorName(r, &name);
  if (a.cuGetErrorString) a.cuGetErrorString(r, &msg);
  std::string text =
      std::string(what) + ": " + (name ? std::string(name) : "CUresult " + std::to_string(static_cast<int>(r)));
  if (msg) text += std::string(" (") + msg + ")";
  throw Error(Error::Kind::Cuda, text);
}

CUcontext ensureContext() {
  // cuCtxGetCurrent is a thread-local read inside the driver: cheap enough for every call, and
  // unlike a cached value it follows the caller's own context switches (cudaSetDevice, ...).
  const Api& a = api();
  CUcontext ctx = nullptr;
  check(a.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  if (ctx) return ctx;
  ctx = primaryContext();
  check(a.cuCtxSetCurrent(ctx), "cuCtxSetCurrent(primary context of device 0)");
  return ctx;
}

CUcontext useDevice(int ordinal) {
  const Api& a = api();
  int count = 0;
  check(a.cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (ordinal < 0 || ordinal >= count)
    throw Error(Error::Kind::InvalidArgument, "device " + std::to_string(ordinal) + " does not exist, expected [0, " +
                                                  std::to_string(count) + ")");
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  check(a.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
  check(a.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(a.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  return ctx;
}

std::string currentArch() {
  int cc = capabilityOf(currentDevice());
  // Exact-arch targets ("a") unlock wgmma/TMA on Hopper and tcgen05 on Blackwell; the CUBIN is
  // then tied to that exact CC, which is what a JIT for the present device wants.
  if (cc == 90) return "sm_90a";
  if (cc == 100) return "sm_100a";
  return "sm_" + std::to_string(cc);
}

int currentDeviceId() { return static_cast<int>(currentDevice()); }

std::string deviceName() {
  CUdevice dev = currentDevice();
  char name[256] = {};
  check(api().cuDeviceGetName(name, static_cast<int>(sizeof name) - 1, dev), "cuDeviceGetName");
  return name;
}

}  // namespace ssmjit::driver

#include "tools/GpuTiming.h"

#include <cstdio>
#include <vector>

#include "compiler/Nvrtc.h"
#include "runtime/DeviceBuffer.h"
#include "ssmjit/ops.h"
#include "tools/ToolSupport.h"

namespace ssmjit::tool {

double callTimeUs(const std::function<void(CUstream)>& call, CUstream s, int iters, int trials,
                  const std::function<void(CUstream)>& wait) {
  call(s);  // compile / load, warm up
  if (wait)
    wait(s);
  else
    driver::check(driver::api().cuStreamSynchronize(s), "cuStreamSynchronize");
  std::vector<double> us;
  Event e0, e1;
  for (int t = 0; t < trials; ++t) {
    e0.record(s);
    for (int i = 0; i < iters; ++i) call(s);
    e1.record(s);
    if (wait) wait(s);
    us.push_back(1e3 * e1.since(e0) / iters);
  }
  checkDeviceErrors(s);
  return median(us);
}

double hostCallUs(const std::function<void()>& call, CUstream s, int calls, int trials) {
  std::vector<double> us;
  for (int t = 0; t < trials; ++t) {
    driver::check(driver::api().cuStreamSynchronize(s), "cuStreamSynchronize");
    const WallTimer timer;
    for (int i = 0; i < calls; ++i) call();
    us.push_back(1e3 * timer.ms() / calls);
  }
  driver::check(driver::api().cuStreamSynchronize(s), "cuStreamSynchronize");
  return median(us);
}

double driverLaunchFloorUs(const std::vector<char>& cubin, CUstream s, int calls, int trials) {
  const driver::Api& a = driver::api();
  CUmodule m = nullptr;
  driver::check(a.cuModuleLoadDataEx(&m, cubin.data(), 0, nullptr, nullptr), "cuModuleLoadDataEx(empty kernel)");
  struct Unload {
    CUmodule m;
    ~Unload() { driver::api().cuModuleUnload(m); }
  } unload{m};
  CUfunction f = nullptr;
  driver::check(a.cuModuleGetFunction(&f, m, "ssmjit_empty"), "cuModuleGetFunction(ssmjit_empty)");
  auto launch = [&] {
    driver::check(a.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, nullptr, nullptr), "cuLaunchKernel(empty)");
  };
  launch();  // the first launch of a module does its lazy loading
  return hostCallUs(launch, s, calls, trials);
}

int deviceAttribute(CUdevice_attribute attr, const char* what) {
  driver::ensureContext();
  CUdevice dev = 0;
  driver::check(driver::api().cuCtxGetDevice(&dev), "cuCtxGetDevice");
  int v = 0;
  driver::check(driver::api().cuDeviceGetAttribute(&v, attr, dev), what);
  return v;
}

double measureCopyGBs(CUstream s) {
  const size_t bytes = size_t(1) << 30;
  DeviceBuffer src(bytes), dst(bytes);
  const driver::Api& a = driver::api();
  driver::check(a.cuMemsetD8Async(src.ptr(), 0x3c, bytes, s), "cuMemsetD8Async(copy source, 1 GiB)");
  driver::check(a.cuMemcpyDtoDAsync(dst.ptr(), src.ptr(), bytes, s), "cuMemcpyDtoDAsync(1 GiB, warm-up)");
  Event e0, e1;
  std::vector<double> gbs;
  for (int t = 0; t < 5; ++t) {
    e0.record(s);
    for (int k = 0; k < 3; ++k)
      driver::check(a.cuMemcpyDtoDAsync(dst.ptr(), src.ptr(), bytes, s), "cuMemcpyDtoDAsync(1 GiB)");
    e1.record(s);
    const double ms = e1.since(e0);
    gbs.push_back(2.0 * 3.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9);
  }
  return median(gbs);
}

double reportCopyGBs(CUstream s) {
  const double copy = measureCopyGBs(s);
  std::printf("device-to-device copy: %.0f GB/s\n", copy);
  return copy;
}

void printTableAndCopy(const Table& table, double copyGBs) {
  table.printMarkdown();
  printCopyFooter(copyGBs);
}

void printCopyFooter(double copyGBs) {
  std::printf("\ncopy bandwidth measured in this run: %.2f TB/s\n", copyGBs / 1e3);
}

namespace {
constexpr unsigned kInPlaceThreads = 256;
}  // namespace

InPlacePass::InPlacePass(const std::string& arch) {
  const NvrtcResult r = nvrtcCompile(
      "extern \"C\" __global__ void ssmjit_in_place(uint4* p, unsigned long long n, unsigned int mask) {\n"
      "  const unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n"
      "  if (i < n) { uint4 v = p[i]; v.x ^= mask; p[i] = v; }\n"
      "}\n",
      "in_place.cu", arch, {});
  const driver::Api& a = driver::api();
  driver::check(a.cuModuleLoadDataEx(&module_, r.cubin.data(), 0, nullptr, nullptr),
                "cuModuleLoadDataEx(in-place pass)");
  driver::check(a.cuModuleGetFunction(&fn_, module_, "ssmjit_in_place"), "cuModuleGetFunction(ssmjit_in_place)");
}

InPlacePass::~InPlacePass() { driver::api().cuModuleUnload(module_); }

void InPlacePass::launch(CUdeviceptr p, size_t vectors, CUstream s) const {
  unsigned long long n = vectors;
  unsigned int mask = 0;  // a run-time 0: the compiler cannot drop a store of what it loaded
  void* params[] = {&p, &n, &mask};
  const auto blocks = static_cast<unsigned>((vectors + kInPlaceThreads - 1) / kInPlaceThreads);
  driver::check(driver::api().cuLaunchKernel(fn_, blocks, 1, 1, kInPlaceThreads, 1, 1, 0, s, params, nullptr),
                "cuLaunchKernel(in-place pass)");
}

}  // namespace ssmjit::tool

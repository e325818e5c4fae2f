// Two GPUs, one process: does an all-reduce on NCCL symmetric windows (ncclMemAlloc +
// ncclCommWindowRegister, NCCL_WIN_COLL_SYMMETRIC; multicast stays off) hide better behind a kernel
// that fills every SM than the plain all-reduce? Times, per GPU 0, ms: the all-reduce alone, the
// compute alone, both at once (the all-reduce on a high-priority stream), plain and windowed.
// Build: nvcc -O3 -arch=sm_90 scripts/nccl_windows.cu -lnccl -o /tmp/nccl_windows
// Run:   NCCL_NVLS_ENABLE=0 /tmp/nccl_windows
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e = (x);                                                                   \
    if (e != cudaSuccess) { std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); std::exit(1); } \
  } while (0)
#define NK(x)                                                                              \
  do {                                                                                     \
    ncclResult_t r = (x);                                                                  \
    if (r != ncclSuccess) { std::printf("%s:%d %s\n", __FILE__, __LINE__, ncclGetErrorString(r)); std::exit(1); } \
  } while (0)

// A compute kernel shaped like the layer's: 4 blocks of 128 threads an SM, ~128 registers each.
__global__ void __launch_bounds__(128, 4) busy(float* out, int iters) {
  float v[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) v[i] = threadIdx.x * 0.001f + i;
  for (int it = 0; it < iters; ++it)
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = v[i] * 0.9999f + 0.0001f;
  float s = 0;
#pragma unroll
  for (int i = 0; i < 32; ++i) s += v[i];
  if (s == 12345.f) out[blockIdx.x] = s;
}

int main() {
  const int n = 2;
  const size_t count = size_t{16384} * 2560;  // bf16 elements: a TP layer's out, 83.9 MB
  const size_t bytes = count * 2;
  int devs[n] = {0, 1};
  ncclComm_t comms[n];
  NK(ncclCommInitAll(comms, n, devs));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int blocks = sms * 4 * 4;  // four waves
  for (int windowed = 0; windowed < 2; ++windowed) {
    void* buf[n];
    ncclWindow_t win[n];
    cudaStream_t hi[n], lo[n];
    float* junk[n];
    for (int i = 0; i < n; ++i) {
      CK(cudaSetDevice(i));
      if (windowed) NK(ncclMemAlloc(&buf[i], bytes));
      else CK(cudaMalloc(&buf[i], bytes));
      CK(cudaMemset(buf[i], 0, bytes));
      int least, greatest;
      CK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
      CK(cudaStreamCreateWithPriority(&hi[i], cudaStreamNonBlocking, greatest));
      CK(cudaStreamCreateWithPriority(&lo[i], cudaStreamNonBlocking, least));
      CK(cudaMalloc(&junk[i], blocks * 4));
    }
    if (windowed) {
      NK(ncclGroupStart());
      for (int i = 0; i < n; ++i) NK(ncclCommWindowRegister(comms[i], buf[i], bytes, &win[i], NCCL_WIN_COLL_SYMMETRIC));
      NK(ncclGroupEnd());
    }
    auto allReduce = [&] {
      NK(ncclGroupStart());
      for (int i = 0; i < n; ++i) NK(ncclAllReduce(buf[i], buf[i], count, ncclBfloat16, ncclSum, comms[i], hi[i]));
      NK(ncclGroupEnd());
    };
    auto compute = [&](int iters) {
      for (int i = 0; i < n; ++i) {
        CK(cudaSetDevice(i));
        busy<<<blocks, 128, 0, lo[i]>>>(junk[i], iters);
      }
    };
    auto sync = [&] {
      for (int i = 0; i < n; ++i) {
        CK(cudaSetDevice(i));
        CK(cudaDeviceSynchronize());
      }
    };
    cudaEvent_t a, b;
    CK(cudaSetDevice(0));
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    // Time `what` on GPU 0, the median of 5, after a warm-up.
    auto timed = [&](const char* name, auto what) {
      float ms[5];
      what();
      sync();
      for (int r = 0; r < 5; ++r) {
        CK(cudaSetDevice(0));
        CK(cudaEventRecord(a, 0));
        what();
        sync();
        CK(cudaSetDevice(0));
        CK(cudaEventRecord(b, 0));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&ms[r], a, b));
      }
      for (int i = 0; i < 5; ++i)
        for (int j = i + 1; j < 5; ++j)
          if (ms[j] < ms[i]) { float t = ms[i]; ms[i] = ms[j]; ms[j] = t; }
      std::printf("%s %s: %.3f ms\n", windowed ? "window" : "plain ", name, ms[2]);
    };
    const int iters = 5000;  // about 1.5 ms of compute
    timed("all-reduce alone", allReduce);
    timed("compute alone   ", [&] { compute(iters); });
    timed("both at once    ", [&] {
      compute(iters);
      allReduce();
    });
    if (windowed) {
      NK(ncclGroupStart());
      for (int i = 0; i < n; ++i) NK(ncclCommWindowDeregister(comms[i], win[i]));
      NK(ncclGroupEnd());
    }
    for (int i = 0; i < n; ++i) {
      CK(cudaSetDevice(i));
      if (windowed) NK(ncclMemFree(buf[i]));
      else CK(cudaFree(buf[i]));
    }
  }
  for (int i = 0; i < n; ++i) ncclCommDestroy(comms[i]);
  return 0;
}

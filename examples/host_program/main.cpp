// One Mamba-2 decode step through ssmjit from a plain C++ host program: allocate with the CUDA
// runtime, wrap the buffers as tensor views, call the op on a stream, compare with the float64
// reference.
#include <cuda_runtime.h>
#include <ssmjit/error.h>
#include <ssmjit/ops.h>
#include <ssmjit/reference.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#define CHECK(x)                                                   \
  do {                                                             \
    cudaError_t e = (x);                                           \
    if (e != cudaSuccess) {                                        \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e)); \
      return 1;                                                    \
    }                                                              \
  } while (0)

int main() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("no GPU found: nothing to run\n");
    return 0;
  }
  const int64_t batch = 2, H = 8, P = 64, N = 128, G = 1;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 1.f);
  auto randn = [&](size_t count, float scale) {
    std::vector<float> v(count);
    for (auto& x : v) x = nd(rng) * scale;
    return v;
  };
  std::vector<float> state = randn(batch * H * P * N, 1.f), x = randn(batch * H * P, 1.f), dt = randn(batch * H, 0.5f),
                     A = randn(H, 1.f), B = randn(batch * G * N, 1.f), C = randn(batch * G * N, 1.f),
                     out(batch * H * P, NAN);
  for (auto& a : A) a = -std::exp(a);  // A < 0, as in Mamba-2

  auto upload = [&](const std::vector<float>& h, float** d) {
    cudaMalloc(d, h.size() * sizeof(float));
    return cudaMemcpy(*d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice);
  };
  float *dState, *dX, *dDt, *dA, *dB, *dC, *dOut;
  CHECK(upload(state, &dState));
  CHECK(upload(x, &dX));
  CHECK(upload(dt, &dDt));
  CHECK(upload(A, &dA));
  CHECK(upload(B, &dB));
  CHECK(upload(C, &dC));
  CHECK(upload(out, &dOut));

  using ssmjit::DType;
  using ssmjit::TensorView;
  ssmjit::SelectiveStateUpdateArgs args;
  args.state = TensorView::contiguous(dState, DType::F32, {batch, H, P, N});
  args.x = TensorView::contiguous(dX, DType::F32, {batch, H, P});
  args.dt = TensorView::contiguous(dDt, DType::F32, {batch, H});
  args.A = TensorView::contiguous(dA, DType::F32, {H});
  args.B = TensorView::contiguous(dB, DType::F32, {batch, G, N});
  args.C = TensorView::contiguous(dC, DType::F32, {batch, G, N});
  args.out = TensorView::contiguous(dOut, DType::F32, {batch, H, P});
  args.dt_softplus = true;

  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  try {
    ssmjit::selective_state_update(args, stream);  // first call compiles; later calls hit the cache
    ssmjit::checkDeviceErrors(stream);
  } catch (const ssmjit::Error& e) {
    std::fprintf(stderr, "ssmjit: %s\n", e.what());
    return 1;
  }
  std::vector<float> gotOut(out.size()), gotState(state.size());
  CHECK(cudaMemcpy(gotOut.data(), dOut, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(gotState.data(), dState, state.size() * sizeof(float), cudaMemcpyDeviceToHost));

  // The same step on the CPU in float64.
  ssmjit::SelectiveStateUpdateArgs ref = args;
  auto host = [](std::vector<float>& v, TensorView t) {
    t.data = v.data();
    t.device = ssmjit::DeviceKind::CPU;
    return t;
  };
  std::vector<float> refState = state, refOut(out.size(), NAN);
  ref.state = host(refState, args.state);
  ref.x = host(x, args.x);
  ref.dt = host(dt, args.dt);
  ref.A = host(A, args.A);
  ref.B = host(B, args.B);
  ref.C = host(C, args.C);
  ref.out = host(refOut, args.out);
  ssmjit::reference::selective_state_update(ref);

  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    num += (gotOut[i] - refOut[i]) * double(gotOut[i] - refOut[i]);
    den += double(refOut[i]) * refOut[i];
  }
  double rel = std::sqrt(num / den);
  std::printf("selective_state_update: relative L2 error of y vs float64 reference: %.3g\n", rel);
  return rel < 1e-5 ? 0 : 1;
}

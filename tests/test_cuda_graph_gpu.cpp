// CudaGraph: capture of launches on a stream, replay, and a clean stream after a failed capture.
#include <gtest/gtest.h>

#include <stdexcept>

#include "GpuTest.h"
#include "runtime/CudaGraph.h"
#include "ssmjit/error.h"

using ssmjit::CudaGraph;
using ssmjit::DeviceBuffer;
using ssmjit::OwnedStream;

namespace {
const char* kAddOne = R"(
extern "C" __global__ void add_one(float* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1.0f;
}
)";
}  // namespace

TEST(CudaGraph, DefaultStreamIsRejected) {
  // Checked before any driver call, so this runs without a GPU too.
  try {
    CudaGraph::capture(nullptr, [](CUstream) {});
    FAIL();
  } catch (const ssmjit::Error& e) {
    EXPECT_EQ(e.kind(), ssmjit::Error::Kind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("default stream"), std::string::npos) << e.what();
  }
}

TEST(CudaGraph, CapturesAndReplays) {
  SSMJIT_REQUIRE_GPU();
  SSMJIT_REQUIRE_NVRTC();
  ssmjit::testing::TestKernel k(kAddOne, "add_one");
  const int n = 1000;
  DeviceBuffer buf = DeviceBuffer::fromHost(std::vector<float>(n, 0.0f));
  OwnedStream stream;
  for (CUstreamCaptureMode mode : {CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, CU_STREAM_CAPTURE_MODE_GLOBAL}) {
    SCOPED_TRACE(mode);
    buf.fill(0);
    CUdeviceptr p = buf.ptr();
    int count = n;
    void* args[] = {&p, &count};
    CudaGraph g = CudaGraph::capture(
        stream,
        [&](CUstream s) {
          for (int i = 0; i < 3; ++i) k.launch((n + 255) / 256, 256, s, args);
        },
        mode);
    ASSERT_TRUE(g.valid());
    // Capturing records; nothing ran yet.
    stream.synchronize();
    EXPECT_EQ(buf.download<float>()[0], 0.0f);
    for (int r = 0; r < 5; ++r) g.launch(stream);
    stream.synchronize();
    std::vector<float> out = buf.download<float>();
    EXPECT_EQ(out[0], 15.0f);
    EXPECT_EQ(out[n - 1], 15.0f);
  }
}

TEST(CudaGraph, ThrowingBodyEndsTheCapture) {
  SSMJIT_REQUIRE_GPU();
  OwnedStream stream;
  EXPECT_THROW(CudaGraph::capture(stream, [](CUstream) { throw std::runtime_error("boom"); }), std::runtime_error);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  ssmjit::driver::check(ssmjit::driver::api().cuStreamIsCapturing(stream, &status), "cuStreamIsCapturing");
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  // The stream takes ordinary work again.
  EXPECT_NO_THROW(stream.synchronize());
}

TEST(CudaGraph, MoveAndReset) {
  SSMJIT_REQUIRE_GPU();
  OwnedStream stream;
  CudaGraph g = CudaGraph::capture(stream, [](CUstream) {});  // an empty graph is valid
  EXPECT_TRUE(g.valid());
  CudaGraph h = std::move(g);
  EXPECT_FALSE(g.valid());
  EXPECT_TRUE(h.valid());
  h.launch(stream);
  stream.synchronize();
  h.reset();
  EXPECT_FALSE(h.valid());
  EXPECT_THROW(h.launch(stream), ssmjit::Error);
}

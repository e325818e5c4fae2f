// The communicator's bound on collectives in flight (runtime/parallel/CollectivesInFlight.h) on one
// GPU, with a gate kernel standing in for a collective that cannot finish: the limit's marks behind
// it hand back the oldest, unfinished; once the gate opens every mark finishes and is forgotten;
// a capturing stream is seen as one. (The bound in a real fault: ParallelMamba2.ARankKilled*.)
#include <gtest/gtest.h>

#include "GpuTest.h"
#include "runtime/CudaGraph.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/parallel/CollectivesInFlight.h"

namespace ssmjit {
namespace {

using parallel::CollectivesInFlight;

// Spins until *open is set, or for about 2^34 cycles (several seconds) so that a broken test
// cannot hang the suite.
constexpr const char* kGate = R"(
extern "C" __global__ void gate(volatile int* open) {
  const long long t0 = clock64();
  while (*open == 0 && clock64() - t0 < (1LL << 34)) {}
}
)";

TEST(CollectivesInFlightGpu, TheOldestIsHandedBackWhileTheLimitIsUnfinished) {
  SSMJIT_REQUIRE_GPU();
  SSMJIT_REQUIRE_NVRTC();
  testing::TestKernel gate(kGate, "gate");
  DeviceBuffer open(sizeof(int));
  open.fill(0);
  OwnedStream s, opener;
  void* openPtr = open.data();
  void* args[] = {&openPtr};
  gate.launch(1, 1, s.get(), args);

  CollectivesInFlight marks;
  for (size_t i = 0; i + 1 < CollectivesInFlight::kLimit; ++i) {
    marks.enqueued(s.get());
    EXPECT_EQ(marks.oldestWhileFull(), nullptr) << "after " << i + 1 << " marks";
  }
  marks.enqueued(s.get());
  const CUevent oldest = marks.oldestWhileFull();
  ASSERT_NE(oldest, nullptr);
  EXPECT_EQ(driver::api().cuEventQuery(oldest), CUDA_ERROR_NOT_READY);

  const driver::Api& a = driver::api();
  driver::check(a.cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(openPtr), 1, 1, opener.get()), "cuMemsetD32Async");
  driver::check(a.cuStreamSynchronize(s.get()), "cuStreamSynchronize");
  EXPECT_EQ(marks.oldestWhileFull(), nullptr);
  // The finished marks' events serve again: a full set on an idle stream finishes as well.
  for (size_t i = 0; i < CollectivesInFlight::kLimit; ++i) marks.enqueued(s.get());
  driver::check(a.cuStreamSynchronize(s.get()), "cuStreamSynchronize");
  EXPECT_EQ(marks.oldestWhileFull(), nullptr);
}

TEST(CollectivesInFlightGpu, ACapturingStreamIsSeenAsOne) {
  SSMJIT_REQUIRE_GPU();
  OwnedStream s;
  DeviceBuffer buf(sizeof(int));
  EXPECT_FALSE(CollectivesInFlight::capturing(s.get()));
  bool seen = false;
  CudaGraph g = CudaGraph::capture(s.get(), [&](CUstream st) {
    seen = CollectivesInFlight::capturing(st);
    driver::check(driver::api().cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(buf.data()), 0, 1, st),
                  "cuMemsetD32Async");
  });
  EXPECT_TRUE(seen);
  EXPECT_FALSE(CollectivesInFlight::capturing(s.get()));
}

}  // namespace
}  // namespace ssmjit

// The in-process group (runtime/parallel/LocalGroup.h): ranks as threads on one GPU. Its
// collectives against their definitions, and its failures: ranks that call different collectives,
// or a rank that never comes, end every rank with an error naming the cause within the bound.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "GpuTest.h"
#include "runtime/CudaGraph.h"
#include "runtime/DeviceBuffer.h"
#include "ssmjit/error.h"
#include "support/FloatBits.h"
#include "support/RankChecks.h"
#include "support/RankThreads.h"

namespace ssmjit {
namespace {

using testing::onDevice;

// Rank r's n values: r * 1000 + i, exact in fp32 and their sums too.
std::vector<float> rankValues(int r, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = float(r * 1000 + i);
  return v;
}

TEST(LocalGroup, CollectivesMatchTheirDefinitions) {
  SSMJIT_REQUIRE_GPU();
  const int n = 3;
  const int64_t m = 1000;
  testing::runRankThreads(n, [&](int r, Communicator& comm) {
    OwnedStream s;
    const DeviceBuffer in = DeviceBuffer::fromHost(rankValues(r, m));
    DeviceBuffer gathered(size_t(n * m * 4)), sum = DeviceBuffer::fromHost(rankValues(r, m)), scattered(size_t(m * 4));
    DeviceBuffer whole = DeviceBuffer::fromHost(rankValues(r, n * m)), got(size_t(m * 4));
    got.fill(0xFF);
    comm.allGather(onDevice(in, DType::F32, {m}), onDevice(gathered, DType::F32, {n * m}), s.get());
    comm.allReduceSum(onDevice(sum, DType::F32, {m}), s.get());
    comm.reduceScatterSum(onDevice(whole, DType::F32, {n * m}), onDevice(scattered, DType::F32, {m}), s.get());
    // A chain: rank r sends to r + 1 and receives from r - 1 (the ends only one way).
    comm.sendRecv(r + 1 < n ? onDevice(in, DType::F32, {m}) : TensorView{}, r + 1 < n ? r + 1 : -1,
                  r > 0 ? onDevice(got, DType::F32, {m}) : TensorView{}, r > 0 ? r - 1 : -1, s.get());
    comm.synchronize(s.get());
    const std::vector<float> g = gathered.download<float>(), su = sum.download<float>(),
                             sc = scattered.download<float>(), rv = got.download<float>();
    for (int q = 0; q < n; ++q)
      for (int64_t i = 0; i < m; ++i) EXPECT_EQ(g[q * m + i], float(q * 1000 + i)) << "allGather";
    for (int64_t i = 0; i < m; ++i) {
      EXPECT_EQ(su[i], float(n * i + 1000 * (0 + 1 + 2))) << "allReduceSum";
      EXPECT_EQ(sc[i], float(n * (r * m + i) + 1000 * (0 + 1 + 2))) << "reduceScatterSum";
      if (r > 0) EXPECT_EQ(rv[i], float((r - 1) * 1000 + i)) << "sendRecv";
    }
  });
}

TEST(LocalGroup, SumsSixteenBitValuesOnceRounded) {
  SSMJIT_REQUIRE_GPU();
  // bf16 values 1 + 2^-7 on each of 4 ranks sum to 4 + 2^-5: exact in bf16. Summed in bf16 one
  // rank at a time, 3 + 3 * 2^-7 would round on the way.
  testing::runRankThreads(4, [&](int, Communicator& comm) {
    OwnedStream s;
    const std::vector<uint16_t> v(64, testing::toBf16(1.0f + 1.0f / 128));
    DeviceBuffer b = DeviceBuffer::fromHost(v);
    comm.allReduceSum(onDevice(b, DType::BF16, {64}), s.get());
    comm.synchronize(s.get());
    for (uint16_t h : b.download<uint16_t>()) EXPECT_EQ(h, testing::toBf16(4.0f + 1.0f / 32));
  });
}

// Rank 1 calls another collective, or none: every rank throws within the bound, naming why.
void expectEveryRankFails(bool rankOneAbsent, const std::string& cause) {
  std::vector<std::unique_ptr<Communicator>> comms = parallel::localGroup(2, 2.0);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  const int device = driver::currentDeviceId();
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      driver::useDevice(device);
      OwnedStream s;
      DeviceBuffer b(64 * 4), out(128 * 4);
      try {
        if (r == 1 && rankOneAbsent) return;
        if (r == 1)
          comms[r]->allGather(onDevice(b, DType::F32, {64}), onDevice(out, DType::F32, {128}), s.get());
        else
          comms[r]->allReduceSum(onDevice(b, DType::F32, {64}), s.get());
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < (rankOneAbsent ? 1 : 2); ++r)
    EXPECT_NE(errors[r].find(cause), std::string::npos) << "rank " << r << ": " << errors[r];
}

TEST(LocalGroup, DifferentCollectivesEndEveryRank) {
  SSMJIT_REQUIRE_GPU();
  expectEveryRankFails(false, "the ranks called different collectives");
}

TEST(LocalGroup, AnAbsentRankEndsTheOthersAtTheBound) {
  SSMJIT_REQUIRE_GPU();
  expectEveryRankFails(true, "timed out after");
}

}  // namespace
}  // namespace ssmjit

// Multi-rank tests on one GPU: n ranks as threads of this process over the runtime's in-process
// group (runtime/parallel/LocalGroup.h), each with the device's context current. Where NCCL's
// one-process-a-GPU runs need more GPUs than the machine has, the same rank code still runs here
// and its results are checked against one GPU's; the collectives are host copies, so times mean
// nothing.
#pragma once
#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/Driver.h"
#include "runtime/parallel/LocalGroup.h"
#include "ssmjit/parallel.h"

namespace ssmjit::testing {

// Runs rank(r, comm) for r in [0, n) on n threads; a rank's exception fails the test, naming it.
inline void runRankThreads(int n, const std::function<void(int rank, Communicator& comm)>& rank,
                           double timeout_s = 120) {
  const int device = driver::currentDeviceId();
  std::vector<std::unique_ptr<Communicator>> comms = parallel::localGroup(n, timeout_s);
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        driver::useDevice(device);
        rank(r, *comms[r]);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        comms[r]->abort(std::string("rank ") + std::to_string(r) + " threw");  // the others stop waiting
      }
    });
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r << " of " << n << " threw";
}

}  // namespace ssmjit::testing

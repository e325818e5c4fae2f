// The collectives a communicator has enqueued that the GPU has not finished, at most a fixed
// number. A collective that a lost peer keeps from finishing stalls its stream; a host running
// ahead of it would fill the driver's launch queue and block inside a launch, where no deadline
// is checked. Holding the host to a few collectives ahead keeps every such wait in the
// communicator's bounded one. Internal to the communicator.
#pragma once
#include <cuda.h>

#include <deque>
#include <vector>

namespace ssmjit::parallel {

class CollectivesInFlight {
 public:
  // A layer call enqueues a few collectives, so 8 keep whole calls queued ahead of the GPU, and
  // the kernels between them stay far below the driver's launch queue depth.
  static constexpr size_t kLimit = 8;

  CollectivesInFlight() = default;
  ~CollectivesInFlight();
  CollectivesInFlight(const CollectivesInFlight&) = delete;
  CollectivesInFlight& operator=(const CollectivesInFlight&) = delete;

  // Whether `stream` is capturing a graph: then neither call below applies (an event query may
  // end a capture, and a graph's replays are waited for by whoever launches them).
  static bool capturing(CUstream stream);
  // Forgets the finished ones; then the oldest unfinished one's event while kLimit are
  // unfinished (the caller waits for it, then calls finished()), else null.
  CUevent oldestWhileFull();
  // The oldest has finished.
  void finished();
  // Marks the end of a collective just enqueued on `stream` (not capturing).
  void enqueued(CUstream stream);

 private:
  std::deque<CUevent> pending_;
  std::vector<CUevent> spare_;
};

}  // namespace ssmjit::parallel

// The collectives a communicator has enqueued and the GPU has not finished (CollectivesInFlight.h).
#include "runtime/parallel/CollectivesInFlight.h"

#include "runtime/Driver.h"

namespace ssmjit::parallel {

CollectivesInFlight::~CollectivesInFlight() {
  if (pending_.empty() && spare_.empty()) return;  // never used (an in-process group's rank)
  const driver::Api& a = driver::api();
  for (CUevent e : pending_) a.cuEventDestroy(e);
  for (CUevent e : spare_) a.cuEventDestroy(e);
}

bool CollectivesInFlight::capturing(CUstream stream) {
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  driver::check(driver::api().cuStreamIsCapturing(stream, &capture), "cuStreamIsCapturing");
  return capture != CU_STREAM_CAPTURE_STATUS_NONE;
}

CUevent CollectivesInFlight::oldestWhileFull() {
  const driver::Api& a = driver::api();
  while (!pending_.empty() && a.cuEventQuery(pending_.front()) == CUDA_SUCCESS) finished();
  return pending_.size() >= kLimit ? pending_.front() : nullptr;
}

void CollectivesInFlight::finished() {
  spare_.push_back(pending_.front());
  pending_.pop_front();
}

void CollectivesInFlight::enqueued(CUstream stream) {
  const driver::Api& a = driver::api();
  CUevent e = nullptr;
  if (spare_.empty()) {
    driver::check(a.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  } else {
    e = spare_.back();
    spare_.pop_back();
  }
  const CUresult r = a.cuEventRecord(e, stream);
  if (r != CUDA_SUCCESS) spare_.push_back(e);
  driver::check(r, "cuEventRecord");
  pending_.push_back(e);
}

}  // namespace ssmjit::parallel

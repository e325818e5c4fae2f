#include "runtime/CudaGraph.h"

#include <string>
#include <utility>

#include "runtime/Driver.h"
#include "ssmjit/error.h"

namespace ssmjit {

OwnedStream::OwnedStream(unsigned flags, bool highPriority) {
  driver::ensureContext();
  const driver::Api& api = driver::api();
  int least = 0, greatest = 0;
  if (highPriority) driver::check(api.cuCtxGetStreamPriorityRange(&least, &greatest), "cuCtxGetStreamPriorityRange");
  driver::check(api.cuStreamCreateWithPriority(&stream_, flags, highPriority ? greatest : 0),
                ("cuStreamCreateWithPriority(flags " + std::to_string(flags) + ")").c_str());
}

OwnedStream::~OwnedStream() {
  // No throw from a destructor; cuStreamDestroy lets queued work finish before it releases.
  if (stream_) driver::api().cuStreamDestroy(stream_);
}

OwnedStream::OwnedStream(OwnedStream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)) {}

OwnedStream& OwnedStream::operator=(OwnedStream&& o) noexcept {
  if (this != &o) {
    if (stream_) driver::api().cuStreamDestroy(stream_);
    stream_ = std::exchange(o.stream_, nullptr);
  }
  return *this;
}

void OwnedStream::synchronize() const {
  driver::check(driver::api().cuStreamSynchronize(stream_), "cuStreamSynchronize");
}

CudaGraph::~CudaGraph() { reset(); }

CudaGraph::CudaGraph(CudaGraph&& o) noexcept
    : graph_(std::exchange(o.graph_, nullptr)), exec_(std::exchange(o.exec_, nullptr)) {}

CudaGraph& CudaGraph::operator=(CudaGraph&& o) noexcept {
  if (this != &o) {
    reset();
    graph_ = std::exchange(o.graph_, nullptr);
    exec_ = std::exchange(o.exec_, nullptr);
  }
  return *this;
}

void CudaGraph::reset() {
  if (exec_) driver::api().cuGraphExecDestroy(exec_);
  if (graph_) driver::api().cuGraphDestroy(graph_);
  exec_ = nullptr;
  graph_ = nullptr;
}

CudaGraph CudaGraph::capture(CUstream stream, const std::function<void(CUstream)>& body, CUstreamCaptureMode mode) {
  if (stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD)
    throw Error(Error::Kind::InvalidArgument,
                "CudaGraph::capture: stream must be a created stream, got the default stream");
  driver::ensureContext();
  const driver::Api& a = driver::api();
  driver::check(a.cuStreamBeginCapture(stream, mode), "cuStreamBeginCapture");
  CudaGraph g;
  try {
    body(stream);
  } catch (...) {
    // End the capture so that the stream is usable again; the partial graph is discarded.
    CUgraph partial = nullptr;
    if (a.cuStreamEndCapture(stream, &partial) == CUDA_SUCCESS && partial) a.cuGraphDestroy(partial);
    throw;
  }
  CUresult r = a.cuStreamEndCapture(stream, &g.graph_);
  if (r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
    driver::check(r,
                  "cuStreamEndCapture (the capture was invalidated by an operation that cannot be "
                  "captured, e.g. a synchronisation, cuMemAlloc or a legacy-stream call in the body)");
  driver::check(r, "cuStreamEndCapture");
  driver::check(a.cuGraphInstantiate(&g.exec_, g.graph_, 0), "cuGraphInstantiate");
  return g;
}

void CudaGraph::launch(CUstream stream) const {
  if (!exec_) throw Error(Error::Kind::InvalidArgument, "CudaGraph::launch: the graph was never captured");
  driver::check(driver::api().cuGraphLaunch(exec_, stream), "cuGraphLaunch");
}

}  // namespace ssmjit

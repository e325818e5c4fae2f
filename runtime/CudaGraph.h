// CUDA graph capture and replay, and an owned stream to capture on. Used by the graph tests and
// `ssmjit bench` (decode steps are replayed as graphs in serving, so ops must be capturable).
// Internal to the runtime.
#pragma once
#include <cuda.h>

#include <functional>

namespace ssmjit {

// A stream created in the current context, destroyed with it.
class OwnedStream {
 public:
  // CU_STREAM_NON_BLOCKING by default: no implicit sync with the legacy default stream.
  // `highPriority`: the context's greatest stream priority, so that the block scheduler starts
  // this stream's blocks first as others' retire (a collective beside a GEMM).
  explicit OwnedStream(unsigned flags = CU_STREAM_NON_BLOCKING, bool highPriority = false);
  ~OwnedStream();
  OwnedStream(OwnedStream&& o) noexcept;
  OwnedStream& operator=(OwnedStream&& o) noexcept;
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;

  CUstream get() const { return stream_; }
  operator CUstream() const { return stream_; }
  void synchronize() const;

 private:
  CUstream stream_ = nullptr;
};

// An instantiated graph. capture() runs `body(stream)` between cuStreamBeginCapture and
// cuStreamEndCapture; the work body enqueues on `stream` is recorded, not run. If body throws,
// the capture is ended and discarded and the exception passes on.
class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();
  CudaGraph(CudaGraph&& o) noexcept;
  CudaGraph& operator=(CudaGraph&& o) noexcept;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // `stream` must not be the legacy default stream (nullptr), which cannot be captured.
  // THREAD_LOCAL mode (the default) forbids unsafe calls (cuMemAlloc, synchronous copies) only on
  // this thread; GLOBAL forbids them process-wide, which catches more mistakes in tests.
  static CudaGraph capture(CUstream stream, const std::function<void(CUstream)>& body,
                           CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);

  // Enqueues one replay on `stream` (any stream of the context; does not synchronise).
  void launch(CUstream stream) const;

  bool valid() const { return exec_ != nullptr; }
  CUgraph graph() const { return graph_; }
  CUgraphExec exec() const { return exec_; }
  void reset();

 private:
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

}  // namespace ssmjit
